/**
 * Output tokens per SSE event in one worker's streams. Adaptive capacity reads a running stream's
 * decode pace from its events (lease.ts, `paceMark`), and an event is one token only at a stream
 * interval of 1: SGLang's `--stream-interval N` sends N tokens an event, and speculative decoding
 * sends as many as the step accepted. Counted as tokens, such events read N times slow, and a
 * `tpot_slo_ms` would cut a healthy worker toward its floor.
 *
 * Seeded from what the worker reports (SGLang's `stream_interval` at /get_server_info), then
 * learned from each finished stream: the worker's own token count (its usage) over the events that
 * carried tokens. Which events only frame a stream differs by server (a role chunk, a finish chunk,
 * the usage chunk, `[DONE]`), so a stream teaches only with MIN_TOKEN_EVENTS or more, where one
 * event miscounted moves the estimate by a few percent, and an estimate within SNAP of 1 is 1: the
 * common case stays exact.
 */

/** The fewest token-carrying events for a stream to teach (one framing event miscounted: <= 6%). */
export const MIN_TOKEN_EVENTS = 16;
/** An estimate within this of 1 is 1 (framing events read as tokens, not several tokens an event). */
const SNAP = 0.15;
/** Weight of one stream in the estimate (an average over the last few answers). */
const ALPHA = 0.2;
/** No server sends more than this per event; a larger ratio is a miscount (a body that was not SSE). */
const MAX_TOKENS_PER_EVENT = 64;

/**
 * One finished stream's own tokens per event (the worker's count over its token events), 1 when
 * within SNAP of 1; undefined when the stream is too short to tell.
 */
export function streamTokensPerEvent(tokens: number, tokenEvents: number): number | undefined {
  const ratio = ratioOf(tokens, tokenEvents);
  return ratio === undefined ? undefined : snap(ratio);
}

/** tokens / tokenEvents within [1, MAX_TOKENS_PER_EVENT]; undefined for a stream too short to tell. */
function ratioOf(tokens: number, tokenEvents: number): number | undefined {
  if (!(tokenEvents >= MIN_TOKEN_EVENTS) || !(tokens > 0)) return undefined;
  return Math.min(MAX_TOKENS_PER_EVENT, Math.max(1, tokens / tokenEvents));
}

function snap(ratio: number): number {
  return Math.abs(ratio - 1) <= SNAP ? 1 : ratio;
}

export class TokensPerEvent {
  private estimate = 1;
  private streams = 0;

  /** Output tokens per event to assume for this worker's streams now (>= 1). */
  get value(): number {
    return snap(this.estimate);
  }

  /** Streams this worker taught so far. */
  get learnedFrom(): number {
    return this.streams;
  }

  /** What the worker reports (a positive integer), used until a stream teaches; anything else is ignored. */
  seed(reported: unknown): void {
    if (this.streams > 0) return;
    if (typeof reported === "number" && Number.isInteger(reported) && reported >= 1) {
      this.estimate = Math.min(reported, MAX_TOKENS_PER_EVENT);
    }
  }

  /** One finished stream: `tokens` output tokens (the worker's count) in `tokenEvents` events. */
  learn(tokens: number, tokenEvents: number): void {
    const ratio = ratioOf(tokens, tokenEvents);
    if (ratio === undefined) return;
    this.estimate = this.streams === 0 ? ratio : this.estimate + ALPHA * (ratio - this.estimate);
    this.streams++;
  }
}
