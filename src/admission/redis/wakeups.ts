/**
 * Wake-ups without polling: the scripts publish what they decided for another replica (a ticket
 * granted, a lease to preempt) on that replica's channel, and capacity changes on the fleet's; this
 * replica's subscriber hands each message to the admission backend of its pool.
 *
 *   g|pool|ticket|how      a queued ticket became a lease (how: queued | promoted | preempted)
 *   p|pool|lease|rank      preempt this lease for a request of class `rank`, if before its first byte
 *   c|pool|capacity|pin    the agreed capacity or the pin moved (pin -1: none)
 */
import type { Redis } from "ioredis";

export interface WakeupHandler {
  granted(ticket: string, how: string): void;
  preempt(lease: string, byRank: number): void;
  capacity(capacity: number, pin: number | undefined): void;
}

export class Wakeups {
  private readonly handlers = new Map<string, WakeupHandler>();
  private readonly resubscribed: Array<() => void> = [];
  private subscribedOnce = false;

  /** Create it before the subscriber connects: it subscribes on every (re)connection. */
  constructor(subscriber: Redis, channels: string[]) {
    subscriber.on("message", (_channel: string, message: string) => this.deliver(message));
    subscriber.on("ready", () => {
      subscriber.subscribe(...channels).then(
        () => {
          // Grants published while the subscription was down were missed: the owners re-check.
          if (this.subscribedOnce) for (const listener of this.resubscribed) listener();
          this.subscribedOnce = true;
        },
        () => {},
      );
    });
  }

  register(pool: string, handler: WakeupHandler): void {
    this.handlers.set(pool, handler);
  }

  /** Called after a resubscription (a message may have been missed meanwhile). */
  onResubscribed(listener: () => void): void {
    this.resubscribed.push(listener);
  }

  private deliver(message: string): void {
    const kind = message.charCodeAt(0);
    const poolEnd = message.indexOf("|", 2);
    if (poolEnd < 0) return;
    const handler = this.handlers.get(message.slice(2, poolEnd));
    if (handler === undefined) return;
    const rest = message.slice(poolEnd + 1);
    const bar = rest.lastIndexOf("|");
    if (kind === 0x67 /* g */ && bar > 0) handler.granted(rest.slice(0, bar), rest.slice(bar + 1));
    else if (kind === 0x70 /* p */ && bar > 0)
      handler.preempt(rest.slice(0, bar), Number(rest.slice(bar + 1)));
    else if (kind === 0x63 /* c */ && bar > 0) {
      const pin = Number(rest.slice(bar + 1));
      handler.capacity(Number(rest.slice(0, bar)), pin >= 0 ? pin : undefined);
    }
  }
}
