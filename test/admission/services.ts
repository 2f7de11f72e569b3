/**
 * The shared-state tests' real parts: Redis (REDIS_URL, default redis://127.0.0.1:6379) with a key
 * prefix of each test's own, removed afterwards; a private `redis-server` on a port of its own for
 * the tests that stop and restart Redis; `sluice` replicas as child processes (test/helpers/cli-process.ts)
 * over counting workers (mock workers in this process, sampled for what they run).
 *
 * A test that needs Redis skips with the reason when it is unreachable, unless
 * SLUICE_REQUIRE_SERVICES is set (CI), where it fails.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import type { TestContext } from "node:test";
import { Redis } from "ioredis";
import { StateKeys } from "../../src/admission/redis/keys.js";
import type { MockWorker } from "../../src/mock-worker/index.js";
import { exited, listeningPort, startCli } from "../helpers/cli-process.js";
import { closedPort, type Reply, sendTo, waitFor } from "../helpers/harness.js";

export const REDIS_URL = process.env.REDIS_URL ?? "redis://127.0.0.1:6379";

/** Pings Redis; undefined (and the test skipped) when it is unreachable outside CI. */
export async function redisOrSkip(t: TestContext, url = REDIS_URL): Promise<string | undefined> {
  const client = new Redis(url, { lazyConnect: true, maxRetriesPerRequest: 0, connectTimeout: 2000 });
  client.on("error", () => {});
  try {
    await client.connect();
    await client.ping();
    return url;
  } catch (err) {
    const reason = `Redis unreachable at ${url}: ${(err as Error).message}`;
    if (process.env.SLUICE_REQUIRE_SERVICES) throw new Error(`${reason} (SLUICE_REQUIRE_SERVICES is set)`);
    process.stdout.write(`# skipped: ${reason}\n`);
    t.skip(reason);
    return undefined;
  } finally {
    client.disconnect();
  }
}

/** A key prefix of this test's own; its keys are deleted after the test. */
export function statePrefix(t: TestContext, url = REDIS_URL): string {
  const prefix = `sluice-test-${randomBytes(4).toString("hex")}:`;
  t.after(() => dropKeys(url, prefix));
  return prefix;
}

export async function dropKeys(url: string, prefix: string): Promise<void> {
  const client = new Redis(url, { maxRetriesPerRequest: 0, connectTimeout: 2000 });
  client.on("error", () => {});
  try {
    let cursor = "0";
    do {
      const [next, keys] = await client.scan(cursor, "MATCH", `${prefix}*`, "COUNT", 1000);
      cursor = next;
      if (keys.length > 0) await client.del(...keys);
    } while (cursor !== "0");
  } catch {
    // Redis is gone (a private one, stopped): nothing to clean.
  } finally {
    client.disconnect();
  }
}

/** A Redis client for reading the shared state directly (closed after the test). */
export function redisClient(t: TestContext, url = REDIS_URL): Redis {
  const client = new Redis(url, { maxRetriesPerRequest: 1 });
  client.on("error", () => {});
  t.after(() => client.disconnect());
  return client;
}

/** Waiting tickets in every pool under a prefix (the shared queues). */
export async function queuedInRedis(client: Redis, prefix: string): Promise<number> {
  const base = new StateKeys(prefix).base;
  const keys = await client.keys(`${base}pool:*:q[0-3]`);
  let n = 0;
  for (const key of keys) n += await client.zcard(key);
  return n;
}

/** Leases in every pool under a prefix. */
export async function leasesInRedis(client: Redis, prefix: string): Promise<number> {
  const base = new StateKeys(prefix).base;
  const keys = await client.keys(`${base}pool:*:leases`);
  let n = 0;
  for (const key of keys) n += await client.zcard(key);
  return n;
}

// --- a private redis-server, to stop and start -----------------------------------------------------

export interface PrivateRedis {
  readonly url: string;
  readonly port: number;
  /** Kills it (SIGKILL: an outage, not a shutdown). */
  stop(): Promise<void>;
  /** Starts it again on the same port, empty. */
  start(): Promise<void>;
}

export async function privateRedis(t: TestContext): Promise<PrivateRedis | undefined> {
  const port = await closedPort();
  const url = `redis://127.0.0.1:${port}`;
  let child: ChildProcess | undefined;
  const start = async () => {
    child = spawn(
      "redis-server",
      [
        "--port",
        String(port),
        "--bind",
        "127.0.0.1",
        "--save",
        "",
        "--appendonly",
        "no",
        "--loglevel",
        "warning",
      ],
      { stdio: "ignore" },
    );
    const c = child;
    await waitFor(
      async () => {
        if (c.exitCode !== null) throw new Error(`redis-server exited ${c.exitCode}`);
        const probe = new Redis(url, {
          lazyConnect: true,
          maxRetriesPerRequest: 0,
          retryStrategy: () => null,
        });
        probe.on("error", () => {});
        try {
          await probe.connect();
          return (await probe.ping()) === "PONG";
        } catch {
          return false;
        } finally {
          probe.disconnect();
        }
      },
      "the private redis-server answered",
      { timeoutMs: 10_000, intervalMs: 50 },
    );
  };
  const stop = async () => {
    const c = child;
    child = undefined;
    if (c === undefined || c.exitCode !== null) return;
    c.kill("SIGKILL");
    await exited(c);
  };
  try {
    await start();
  } catch (err) {
    const reason = `redis-server could not be started: ${(err as Error).message}`;
    if (process.env.SLUICE_REQUIRE_SERVICES) throw new Error(reason);
    process.stdout.write(`# skipped: ${reason}\n`);
    t.skip(reason);
    return undefined;
  }
  t.after(stop);
  return { url, port, stop, start };
}

// --- replicas -------------------------------------------------------------------------------------

export interface Replica {
  readonly child: ChildProcess;
  readonly out: { stdout: string; stderr: string };
  readonly url: string;
  readonly adminUrl: string | undefined;
  /** SIGKILL, at once. */
  kill(): Promise<void>;
}

export const ADMIN_TOKEN = "state-test-admin-token";

/** Starts a `sluice` replica with these flags (no ledger); killed after the test. */
export async function startReplica(t: TestContext, args: string[], admin = false): Promise<Replica> {
  const adminArgs = admin ? ["--admin-port", "0"] : [];
  const env = admin ? { SLUICE_ADMIN_TOKEN: ADMIN_TOKEN } : {};
  const previous = process.env.SLUICE_ADMIN_TOKEN;
  Object.assign(process.env, env);
  const { child, out } = startCli(["--port", "0", "--ledger", "off", ...adminArgs, ...args]);
  if (admin) {
    if (previous === undefined) delete process.env.SLUICE_ADMIN_TOKEN;
    else process.env.SLUICE_ADMIN_TOKEN = previous;
  }
  const kill = async () => {
    if (child.exitCode !== null || child.signalCode !== null) return;
    child.kill("SIGKILL");
    await exited(child);
  };
  t.after(kill);
  const port = await listeningPort(child, out);
  let adminUrl: string | undefined;
  if (admin) {
    await waitFor(() => out.stdout.includes('"admin API listening"'), "the admin API listened", {
      timeoutMs: 10_000,
    });
    const line = out.stdout.split("\n").find((l) => l.includes('"admin API listening"'))!;
    adminUrl = (JSON.parse(line) as { url: string }).url;
  }
  return { child, out, url: `http://127.0.0.1:${port}`, adminUrl, kill };
}

/** Starts `n` replicas at once (they boot in parallel). */
export function startReplicas(t: TestContext, n: number, args: string[], admin = false): Promise<Replica[]> {
  return Promise.all(Array.from({ length: n }, () => startReplica(t, args, admin)));
}

/** The replicas' shared flags. */
export function stateArgs(url: string, prefix: string, extra: string[] = []): string[] {
  return ["--state-url", url, "--state-key-prefix", prefix, ...extra];
}

/** A GET on a replica's admin API. */
export async function adminGet(replica: Replica, path: string): Promise<Record<string, unknown>> {
  const reply = await sendTo(replica.adminUrl!, path, {
    headers: { authorization: `Bearer ${ADMIN_TOKEN}` },
  });
  if (reply.status !== 200) throw new Error(`${path}: ${reply.status} ${reply.text}`);
  return JSON.parse(reply.text) as Record<string, unknown>;
}

/** A chat request to a replica; never rejects (a transport error comes back as an Error). */
export function chat(
  replica: Replica,
  headers: Record<string, string> = {},
  body: Record<string, unknown> = {},
): Promise<Reply | Error> {
  return sendTo(replica.url, "/v1/chat/completions", {
    method: "POST",
    headers: { "content-type": "application/json", ...headers },
    body: { model: "mock-llm", messages: [{ role: "user", content: "hello there" }], max_tokens: 4, ...body },
  }).catch((err: unknown) => err as Error);
}

// --- counting workers ---------------------------------------------------------------------------

/** Samples the requests open at the workers (every 1 ms); `max` is the most seen at once. */
export function sampleInflight(
  workers: MockWorker[],
  limit = Number.POSITIVE_INFINITY,
): { readonly max: number; readonly over: number[]; stop(): number } {
  let max = 0;
  const over: number[] = [];
  const timer = setInterval(() => {
    let open = 0;
    for (const w of workers) open += w.stats().open;
    if (open > max) max = open;
    if (open > limit && over.length < 100) over.push(performance.now());
  }, 1);
  return {
    get max() {
      return max;
    },
    over,
    stop() {
      clearInterval(timer);
      return max;
    },
  };
}

export function statusOf(reply: Reply | Error): number | string {
  return reply instanceof Error ? reply.message : reply.status;
}
