/**
 * The dashboard tests' parts: a fleet with an admin listener whose traffic leaves every panel
 * something to show (requests served, a tenant over its budget, a full queue, requests held in
 * flight and queued), an event-stream reader, and headless Chromium (Debian's `chromium`, driven by
 * playwright-core) that skips with how to install it when it is missing, unless
 * SLUICE_REQUIRE_SERVICES is set (CI), where it fails.
 */
import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { TestContext } from "node:test";
import { type BrowserContext, chromium } from "playwright-core";
import { request } from "undici";
import type { DashboardSnapshot } from "../../src/dashboard/snapshot.js";
import {
  assertError,
  assertOk,
  type Fleet,
  type FleetOptions,
  type Held,
  type Reply,
  schedulerDoc,
  startFleet,
  waitFor,
} from "../helpers/harness.js";

export const TOKEN = "dashboard-admin-token-0123456789";
export const CHROMIUM = process.env.CHROMIUM_PATH ?? "/usr/bin/chromium";

/** etl's term budget: 5 requests of 7 tokens fit, the 6th crosses it, the 7th is refused. */
export const ETL_BUDGET_TOKENS = 40;

/**
 * Capacity 2 (one worker), no reservations, a bulk queue of 1; tenants acme (weight 3) and etl
 * (weight 1, a 40-token term budget), each with an API key.
 */
export function dashboardFleet(t: TestContext, extra: FleetOptions = {}): Promise<Fleet> {
  return startFleet(t, {
    workers: [{ maxRunningRequests: 2 }],
    schedulerYaml: schedulerDoc({
      classes: { bulk: { queue_size: 1 } },
      tenant_policies: {
        "auth:acme": { weight: 3 },
        "auth:etl": { weight: 1, budget_tokens: ETL_BUDGET_TOKENS },
      },
    }),
    tenants: ["acme", "etl"],
    adminToken: TOKEN,
    ...extra,
  });
}

export interface Load {
  /** Requests answered 200. */
  served: number;
  /** The 403 tenant_budget_exhausted etl got. */
  overBudget: Reply;
  /** The 429 scheduler_queue_full of a bulk request behind a full queue. */
  queueFull: Reply;
  /** Two default-class requests in flight (capacity 2) and one bulk request queued. */
  held: Held[];
}

/** Drives the load described in `Load` and waits until the holders are in place. */
export async function driveLoad(fleet: Fleet): Promise<Load> {
  let served = 0;
  for (let i = 0; i < 3; i++) {
    assertOk(await fleet.chatAs("acme"));
    served++;
  }
  let overBudget: Reply | undefined;
  for (let i = 0; i < 10 && overBudget === undefined; i++) {
    const reply = await fleet.chatAs("etl");
    if (reply.status === 200) served++;
    else overBudget = reply;
  }
  assert.ok(overBudget, "etl crossed its budget");
  assertError(overBudget, 403, "tenant_budget_exhausted");
  const slow = { "x-mock-ttft-ms": "120000" };
  const held = [fleet.holdAs("acme", {}, slow), fleet.holdAs("acme", {}, slow)];
  await waitFor(() => fleet.snapshot().classes.default.inflight === 2, "two requests in flight");
  held.push(fleet.holdAs("acme", {}, { ...slow, "x-smg-priority": "bulk" }));
  await waitFor(() => fleet.snapshot().classes.bulk.queued === 1, "one bulk request queued");
  const queueFull = await fleet.chatAs("acme", {}, { "x-smg-priority": "bulk" });
  assertError(queueFull, 429, "scheduler_queue_full");
  return { served, overBudget, queueFull, held };
}

/** The request id a reply carries (every answer has one). */
export function requestIdOf(reply: Reply): string {
  const id = reply.headers["x-request-id"];
  assert.equal(typeof id, "string", "the reply has an X-Request-Id");
  return id as string;
}

export async function snapshotOf(fleet: Fleet): Promise<DashboardSnapshot> {
  const reply = await fleet.admin("GET", "/api/v1/dashboard/snapshot");
  assert.equal(reply.status, 200, reply.text);
  return JSON.parse(reply.text) as DashboardSnapshot;
}

// --- event streams -------------------------------------------------------------------------------

export interface StreamEvent {
  event: string;
  data: string;
  /** When it was read, performance.now(). */
  at: number;
}

export interface EventStream {
  readonly status: number;
  readonly headers: Record<string, string | string[] | undefined>;
  readonly events: StreamEvent[];
  readonly comments: string[];
  /** Resolves when the server ends the stream (or it breaks). */
  readonly ended: Promise<void>;
  close(): void;
}

/** Opens `url` as an event stream and collects its frames as they come. */
export async function openEvents(url: string, authorization: string | null): Promise<EventStream> {
  const controller = new AbortController();
  const res = await request(url, {
    headers: authorization === null ? {} : { authorization },
    signal: controller.signal,
  });
  const events: StreamEvent[] = [];
  const comments: string[] = [];
  const ended = (async () => {
    let buffer = "";
    try {
      for await (const chunk of res.body) {
        buffer += (chunk as Buffer).toString("utf8");
        for (let end = buffer.indexOf("\n\n"); end >= 0; end = buffer.indexOf("\n\n")) {
          const frame = buffer.slice(0, end);
          buffer = buffer.slice(end + 2);
          let event = "message";
          const data: string[] = [];
          for (const line of frame.split("\n")) {
            if (line.startsWith(":")) comments.push(line.slice(1).trim());
            else if (line.startsWith("event: ")) event = line.slice(7);
            else if (line.startsWith("data: ")) data.push(line.slice(6));
          }
          if (data.length > 0) events.push({ event, data: data.join("\n"), at: performance.now() });
        }
      }
    } catch {
      // Aborted by close(), or cut by the server: either way the stream is over.
    }
  })();
  return {
    status: res.statusCode,
    headers: res.headers,
    events,
    comments,
    ended,
    close: () => controller.abort(),
  };
}

export function snapshotsIn(stream: EventStream): DashboardSnapshot[] {
  return stream.events
    .filter((e) => e.event === "snapshot")
    .map((e) => JSON.parse(e.data) as DashboardSnapshot);
}

// --- Chromium ------------------------------------------------------------------------------------

/**
 * Headless Chromium with a fresh profile (a user-data-dir of its own, removed afterwards), or
 * undefined when it is not installed here and the test was skipped. Each page is a tab of its own,
 * with its own sessionStorage.
 */
export async function launchChromium(
  t: TestContext,
  viewport: { width: number; height: number } = { width: 1400, height: 1000 },
): Promise<BrowserContext | undefined> {
  if (!existsSync(CHROMIUM)) {
    const reason = `Chromium is not installed at ${CHROMIUM}: apt-get install -y chromium (or set CHROMIUM_PATH)`;
    if (process.env.SLUICE_REQUIRE_SERVICES) throw new Error(`${reason} (SLUICE_REQUIRE_SERVICES is set)`);
    process.stdout.write(`# skipped: ${reason}\n`);
    t.skip(reason);
    return undefined;
  }
  const profile = await mkdtemp(join(tmpdir(), "sluice-chromium-"));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    headless: true,
    args: [
      "--headless",
      "--no-sandbox",
      "--disable-gpu",
      "--disable-quic",
      "--no-first-run",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
    ],
    viewport,
  });
  t.after(async () => {
    await context.close();
    await rm(profile, { recursive: true, force: true });
  });
  return context;
}
