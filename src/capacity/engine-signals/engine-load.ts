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
 * KV use is carried the same way with the prompt tokens of the gateway's own requests.
 */
import type { EngineReading } from "./engine-reading.js";

export interface EngineScrape {
  readonly reading: EngineReading;
  /** When the answer arrived, on the gateway's clock (ms). */
  readonly atMs: number;
  /** Requests the engine held that were not this gateway's. */
  readonly foreign: number;
  /** Prompt tokens of this gateway's in-flight requests at the scrape (the KV estimate's baseline). */
  readonly ownPromptTokens: number;
}

/** This gateway's side of a scrape: its in-flight requests and their prompt tokens, when asked and when answered. */
export interface OwnCounts {
  readonly requestsBefore: number;
  readonly requestsAfter: number;
  readonly promptTokensBefore: number;
  readonly promptTokensAfter: number;
}

export class EngineLoad {
  private last: EngineScrape | undefined;
  /** Scrapes that succeeded since the gateway started (status and tests count them). */
  scrapes = 0;
  /** Scrapes that failed (no answer, or not a usable one); the last reading stays meanwhile. */
  failures = 0;

  /**
   * Records a reading. `countForeign` false when scrapes are off: a single reading would hold its
   * foreign load forever.
   */
  record(reading: EngineReading, atMs: number, own: OwnCounts, countForeign = true): EngineScrape {
    const ownRequests = Math.min(own.requestsBefore, own.requestsAfter);
    const foreign = countForeign ? Math.max(0, reading.running + reading.waiting - ownRequests) : 0;
    const ownPromptTokens = Math.min(own.promptTokensBefore, own.promptTokensAfter);
    this.last = { reading, atMs, foreign, ownPromptTokens };
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

  /**
   * KV tokens in use at the engine now: the scraped use, plus the prompt tokens of this gateway's
   * requests admitted since, less those of its requests completed since. Undefined unless the
   * engine exports both its KV use and its KV capacity.
   */
  estimatedKvUsedTokens(ownPromptTokens: number): number | undefined {
    const r = this.last?.reading;
    if (r?.kvUtilization === undefined || r.kvCapacityTokens === undefined) return undefined;
    const scraped = r.kvUtilization * r.kvCapacityTokens;
    return Math.max(0, scraped + ownPromptTokens - this.last!.ownPromptTokens);
  }

  /** The same as a share of the KV capacity (may pass 1: the engine then queues or preempts). */
  estimatedKvUtilization(ownPromptTokens: number): number | undefined {
    const used = this.estimatedKvUsedTokens(ownPromptTokens);
    const capacity = this.last?.reading.kvCapacityTokens;
    return used === undefined || capacity === undefined ? undefined : used / capacity;
  }

  /** Seconds since the last reading; undefined with none. */
  ageSeconds(nowMs: number): number | undefined {
    return this.last === undefined ? undefined : Math.max(0, nowMs - this.last.atMs) / 1000;
  }
}
