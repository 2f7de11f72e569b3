/**
 * The live dashboard's server side (docs/dashboard.md). About once a second it samples the counters
 * the dashboard turns into rates (samples.ts), keeps the last five minutes of outcome rates for the
 * page's chart, and, while someone watches, builds a snapshot (snapshot.ts) and sends it to every
 * open event stream. It is also an outcome sink: the rejections and the last hour come from the
 * outcome records.
 *
 *   GET /api/v1/dashboard/snapshot   the snapshot, once (built on the call, from live sources)
 *   GET /api/v1/dashboard/events     text/event-stream: `history` (the chart's last five minutes)
 *                                    and `snapshot` at once, then `snapshot` about every second,
 *                                    and a `: keep-alive` comment every 15 s
 *
 * One timer for everything (unref'd; close() stops it and ends every stream), no timer per client.
 */
import type { IncomingMessage, ServerResponse } from "node:http";
import type { Logger } from "pino";
import type { Registry } from "prom-client";
import type { OutcomeRecord, OutcomeSink } from "../contracts/outcome.js";
import type { DashboardFactory, GatewayDashboard } from "../gateway/admin/dashboard-port.js";
import { isDashboardPath, serveDashboardAsset } from "./assets.js";
import { EVENT_STREAM_HEADERS, EventClient } from "./event-stream.js";
import { LiveMinutes } from "./live-minutes.js";
import { RejectionLog } from "./rejections.js";
import { type CounterSample, readCounters, SampleRing } from "./samples.js";
import {
  buildSnapshot,
  type ChartPoint,
  chartPoint,
  type DashboardSnapshot,
  type DashboardSources,
  OUTCOME_WINDOW_MS,
  TENANT_WINDOW_MS,
  WAIT_WINDOW_MS,
} from "./snapshot.js";

interface DashboardOptions {
  /** Sampling and update period (default 1000 ms). */
  intervalMs?: number;
  /** Comment frames on every stream this often (default 15 s). */
  keepAliveMs?: number;
  /** Chart points kept for a page that connects (default 300: five minutes at 1 s). */
  historyPoints?: number;
  /** Rejections kept (default 50). */
  rejectionsKept?: number;
  logger?: Logger;
}

/** The dashboard as the gateway's admin listener runs it: `startGateway(options, { dashboard: createDashboard })`. */
export const createDashboard: DashboardFactory<Dashboard> = (parts) =>
  new Dashboard(parts.registry, parts, { logger: parts.logger });

export class Dashboard implements GatewayDashboard {
  /** Pass to the gateway's outcome sinks: feeds the rejections, the per-code counts and the last hour. */
  readonly outcomes: OutcomeSink;
  private readonly rejections: RejectionLog;
  private readonly live = new LiveMinutes();
  private readonly ring: SampleRing;
  private readonly points: ChartPoint[] = [];
  private readonly clients = new Set<EventClient>();
  private readonly intervalMs: number;
  private readonly keepAliveMs: number;
  private readonly historyPoints: number;
  private timer: NodeJS.Timeout | undefined;
  private ticking = false;
  private closed = false;
  private lastKeepAlive = Date.now();
  private failureLogged = false;

  constructor(
    private readonly registry: Registry,
    private readonly sources: DashboardSources,
    private readonly options: DashboardOptions = {},
  ) {
    this.intervalMs = options.intervalMs ?? 1000;
    this.keepAliveMs = options.keepAliveMs ?? 15_000;
    this.historyPoints = options.historyPoints ?? 300;
    this.rejections = new RejectionLog(options.rejectionsKept, (model) => this.poolOf(model));
    this.outcomes = {
      record: (outcome: OutcomeRecord) => {
        this.rejections.record(outcome);
        this.live.record(outcome);
      },
    };
    // Enough samples to reach back over the longest window, at one per interval.
    const longest = Math.max(OUTCOME_WINDOW_MS, WAIT_WINDOW_MS, TENANT_WINDOW_MS);
    this.ring = new SampleRing(Math.ceil(longest / this.intervalMs) + 2);
  }

  start(): void {
    if (this.timer !== undefined || this.closed) return;
    void this.tick();
    this.timer = setInterval(() => void this.tick(), this.intervalMs);
    this.timer.unref();
  }

  /** Open event streams. */
  get watchers(): number {
    return this.clients.size;
  }

  /** `/dashboard` and anything under it: the page and its assets. */
  isPagePath(path: string): boolean {
    return isDashboardPath(path);
  }

  servePage(req: IncomingMessage, res: ServerResponse, path: string): Promise<void> {
    return serveDashboardAsset(req, res, path);
  }

  /** The snapshot now. */
  async snapshot(): Promise<DashboardSnapshot> {
    const sample = await this.sample();
    return this.build(sample, this.ring.latest);
  }

  /** Serves GET /api/v1/dashboard/events (the caller checked the token). */
  events(req: IncomingMessage, res: ServerResponse): void {
    req.resume();
    res.writeHead(200, EVENT_STREAM_HEADERS);
    const client = new EventClient(res);
    if (this.closed) {
      client.end();
      return;
    }
    this.clients.add(client);
    res.on("close", () => this.clients.delete(client));
    client.comment("sluice dashboard: a snapshot event about every second");
    client.send("history", JSON.stringify({ interval_ms: this.intervalMs, points: this.points }));
    void this.snapshot().then(
      (snapshot) => client.send("snapshot", JSON.stringify(snapshot)),
      (err: unknown) => this.failed(err),
    );
  }

  /** Stops the timer and ends every stream. */
  close(): void {
    this.closed = true;
    clearInterval(this.timer);
    this.timer = undefined;
    for (const client of this.clients) client.end();
    this.clients.clear();
  }

  /** The pool named by `model` or serving it now, else the catch-all pool, else null. */
  private poolOf(model: string | undefined): string | null {
    const pools = this.sources.pools();
    if (model !== undefined) {
      const p = pools.find((x) => x.name === model || x.models.includes(model));
      if (p !== undefined) return p.name;
    }
    return pools.find((x) => x.name === "*")?.name ?? null;
  }

  private sample(): Promise<CounterSample> {
    const codes = new Map<string, number>();
    for (const [code, c] of this.rejections.codeTotals()) codes.set(code, c.total);
    return readCounters(this.registry, codes);
  }

  private build(sample: CounterSample, previous: CounterSample | undefined): DashboardSnapshot {
    const codeStatus = new Map<string, number>();
    for (const [code, c] of this.rejections.codeTotals()) codeStatus.set(code, c.status);
    return buildSnapshot(
      this.sources,
      sample,
      this.ring,
      previous,
      {
        kept: this.rejections.kept,
        total: this.rejections.total,
        groups: this.rejections.groups(),
        rows: this.rejections.latest(),
        codeStatus,
      },
      this.live,
    );
  }

  private async tick(): Promise<void> {
    if (this.ticking || this.closed) return;
    this.ticking = true;
    try {
      const previous = this.ring.latest;
      const sample = await this.sample();
      if (this.closed) return;
      const point = chartPoint(sample, previous);
      if (point !== null) {
        this.points.push(point);
        if (this.points.length > this.historyPoints) this.points.shift();
      }
      // Snapshots (and the ledger reads they start) only while someone watches.
      if (this.clients.size > 0) {
        const data = JSON.stringify(this.build(sample, previous));
        for (const client of this.clients) client.send("snapshot", data);
      }
      this.ring.push(sample);
      if (sample.tMs - this.lastKeepAlive >= this.keepAliveMs) {
        this.lastKeepAlive = sample.tMs;
        for (const client of this.clients) client.comment("keep-alive");
      }
    } catch (err) {
      this.failed(err);
    } finally {
      this.ticking = false;
    }
  }

  private failed(err: unknown): void {
    if (this.failureLogged) return;
    this.failureLogged = true;
    this.options.logger?.error({ err }, "dashboard snapshot failed");
  }
}
