/**
 * A worker's load as its engine last reported it, carried forward between scrapes by the gateway's
 * own admissions and completions.
 *
 * The engine counts every request it holds (running + waiting), this gateway's and anyone else's
 * (another gateway replica, a batch job calling the worker directly). At a scrape, what the engine
 * holds beyond this gateway's own in-flight requests is foreign load; it is held fixed until the
 * next scrape, and the gateway's own count moves live:
 *
 *   open at the engine now = foreign (at the last scrape) + own in flight now
 *                          = scraped running + waiting + admitted since - completed since
 *
 * so a stale scrape never lets the gateway overshoot: its own requests are always counted in full.
 * Foreign load is computed against the smaller of the own counts before and after the scrape's
 * round trip (a request admitted meanwhile may not have reached the engine yet), never below 0.
 */
import type { EngineReading } from "./engine-reading.js";

export interface EngineScrape {
  readonly reading: EngineReading;
  /** When the answer arrived, on the gateway's clock (ms). */
  readonly atMs: number;
  /** Requests the engine held that were not this gateway's. */
  readonly foreign: number;
}

export class EngineLoad {
  private last: EngineScrape | undefined;
  /** Scrapes that succeeded since the gateway started (status and tests count them). */
  scrapes = 0;
  /** Scrapes that failed (no answer, or not a usable one); the last reading stays meanwhile. */
  failures = 0;

  /**
   * Records a reading; `ownBefore`/`ownAfter`: this gateway's in-flight requests when it was asked
   * and when it answered. `foreignOverride` 0 when scrapes are off: a single reading would hold its
   * foreign load forever.
   */
  record(
    reading: EngineReading,
    atMs: number,
    ownBefore: number,
    ownAfter: number,
    foreignOverride?: number,
  ): EngineScrape {
    const own = Math.min(ownBefore, ownAfter);
    const foreign = foreignOverride ?? Math.max(0, reading.running + reading.waiting - own);
    this.last = { reading, atMs, foreign };
    this.scrapes++;
    return this.last;
  }

  /** Forgets the last reading (the worker left, or came back as possibly another engine). */
  clear(): void {
    this.last = undefined;
  }

  get latest(): EngineScrape | undefined {
    return this.last;
  }

  /** Requests other clients hold at the engine (0 with no reading). */
  get foreign(): number {
    return this.last?.foreign ?? 0;
  }

  /** Requests open at the engine now, by the estimate above; undefined with no reading. */
  estimatedOpen(ownInflight: number): number | undefined {
    return this.last === undefined ? undefined : this.last.foreign + ownInflight;
  }

  /** Seconds since the last reading; undefined with none. */
  ageSeconds(nowMs: number): number | undefined {
    return this.last === undefined ? undefined : Math.max(0, nowMs - this.last.atMs) / 1000;
  }
}
