/**
 * One server-sent-events client of the dashboard. Frames are `event: NAME\ndata: JSON\n\n`, and a
 * comment line keeps idle proxies from closing the stream. A client that reads slower than the
 * frames come skips frames instead of buffering them (each snapshot is complete by itself); one that
 * has not drained for STALLED_MS is cut.
 */
import type { ServerResponse } from "node:http";

const STALLED_MS = 30_000;

export const EVENT_STREAM_HEADERS: Readonly<Record<string, string>> = {
  "content-type": "text/event-stream; charset=utf-8",
  "cache-control": "no-cache, no-store",
  // Tell a buffering reverse proxy (nginx) to pass each frame on at once.
  "x-accel-buffering": "no",
  "x-content-type-options": "nosniff",
};

export class EventClient {
  private stalledSince: number | undefined;

  constructor(private readonly res: ServerResponse) {
    res.on("drain", () => {
      this.stalledSince = undefined;
    });
  }

  get open(): boolean {
    return !this.res.destroyed && !this.res.writableEnded;
  }

  /** Sends one event (a pre-serialized JSON `data`); false when it was skipped or the client is gone. */
  send(event: string, data: string): boolean {
    return this.write(`event: ${event}\ndata: ${data}\n\n`);
  }

  comment(text: string): boolean {
    return this.write(`: ${text}\n\n`);
  }

  end(): void {
    if (this.open) this.res.end();
  }

  private write(frame: string): boolean {
    if (!this.open) return false;
    if (this.res.writableNeedDrain) {
      const now = Date.now();
      this.stalledSince ??= now;
      if (now - this.stalledSince > STALLED_MS) this.res.destroy();
      return false;
    }
    this.res.write(frame);
    return true;
  }
}
