/**
 * What the core needs of a cancellation signal: AbortSignal satisfies it, and so does any small
 * object that tells whether it fired and calls one listener when it does. The gateway passes such
 * a lazy object so that a request that never queues costs no AbortController.
 */
export interface CancelSignal {
  readonly aborted: boolean;
  addEventListener(type: "abort", listener: () => void, options?: { once?: boolean }): void;
  removeEventListener(type: "abort", listener: () => void): void;
}
