/**
 * The systems under test run as child processes; this module starts them, waits until they answer,
 * and makes sure every one of them is gone when the bench ends (normal exit, error, SIGINT, SIGTERM).
 */
import { type ChildProcess, spawn, spawnSync } from "node:child_process";
import { once } from "node:events";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { createServer } from "node:net";
import { setTimeout as sleep } from "node:timers/promises";
import { request } from "undici";

export interface Child {
  readonly name: string;
  readonly proc: ChildProcess;
  /** The last few KiB of its stdout and stderr, for error messages. */
  output(): string;
  /** SIGTERM, then SIGKILL after `graceMs`; resolves once it has exited. */
  stop(graceMs?: number): Promise<void>;
}

const live = new Set<Child>();
const OUTPUT_TAIL = 8 * 1024;

export function spawnChild(name: string, command: string, args: string[], cwd?: string): Child {
  const proc = spawn(command, args, { stdio: ["ignore", "pipe", "pipe"], cwd });
  let tail = "";
  const keep = (chunk: Buffer) => {
    tail = (tail + chunk.toString("utf8")).slice(-OUTPUT_TAIL);
  };
  proc.stdout?.on("data", keep);
  proc.stderr?.on("data", keep);
  const exited = new Promise<void>((resolve) => {
    if (proc.exitCode !== null || proc.signalCode !== null) resolve();
    else proc.once("exit", () => resolve());
    proc.once("error", () => resolve());
  });
  const child: Child = {
    name,
    proc,
    output: () => tail,
    async stop(graceMs = 15_000) {
      if (proc.exitCode === null && proc.signalCode === null) {
        proc.kill("SIGTERM");
        const timer = setTimeout(() => proc.kill("SIGKILL"), graceMs);
        await exited;
        clearTimeout(timer);
      }
      live.delete(child);
    },
  };
  exited.then(() => live.delete(child));
  live.add(child);
  return child;
}

/** Stops every child still running, each with a grace period. */
export async function stopAll(): Promise<void> {
  await Promise.all([...live].map((c) => c.stop()));
}

let installed = false;

/**
 * Kills the children however the bench ends. On SIGINT/SIGTERM they get a graceful stop (a child
 * profiling with --cpu-prof writes its profile on exit), then the bench exits; on `exit` any child
 * still alive is killed outright (only synchronous work is possible there).
 */
export function installCleanup(extra: () => void): void {
  if (installed) return;
  installed = true;
  process.once("exit", () => {
    for (const c of live) c.proc.kill("SIGKILL");
    extra();
  });
  for (const signal of ["SIGINT", "SIGTERM"] as const) {
    process.once(signal, () => {
      process.stderr.write(`\n${signal}: stopping ${live.size} child process(es)\n`);
      void stopAll().finally(() => process.exit(signal === "SIGINT" ? 130 : 143));
    });
  }
}

/** A port that was free a moment ago on 127.0.0.1 (the child binds it right after). */
export async function freePort(): Promise<number> {
  const server = createServer();
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  const address = server.address();
  const port = typeof address === "object" && address !== null ? address.port : 0;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

/** Polls `url` until it answers 200; fails early when the child exits. */
export async function waitReady(child: Child, url: string, timeoutMs = 30_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let last = "";
  while (Date.now() < deadline) {
    if (child.proc.exitCode !== null || child.proc.signalCode !== null) {
      throw new Error(
        `${child.name} exited (${child.proc.exitCode ?? child.proc.signalCode}):\n${child.output()}`,
      );
    }
    try {
      const res = await request(url, { headersTimeout: 1000, bodyTimeout: 1000 });
      await res.body.dump();
      if (res.statusCode === 200) return;
      last = `status ${res.statusCode}`;
    } catch (err) {
      last = (err as Error).message;
    }
    await sleep(100);
  }
  throw new Error(`${child.name} not ready at ${url} after ${timeoutMs} ms (${last}):\n${child.output()}`);
}

let ticksPerSecond: number | undefined;

/**
 * CPU time (user + system, all threads) used so far by a process and its descendants (nginx's worker
 * is the master's child), from /proc; undefined where there is no /proc. Clock-tick resolution.
 */
export function cpuSeconds(pid: number | undefined): number | undefined {
  if (pid === undefined || !existsSync(`/proc/${pid}/stat`)) return undefined;
  ticksPerSecond ??= Number(spawnSync("getconf", ["CLK_TCK"], { encoding: "utf8" }).stdout.trim()) || 100;
  let ticks = 0;
  const pending = [pid];
  try {
    while (pending.length > 0) {
      const p = pending.pop()!;
      const stat = readFileSync(`/proc/${p}/stat`, "utf8");
      // After "pid (comm) ": state is field 3, utime field 14, stime field 15.
      const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
      ticks += Number(fields[11]) + Number(fields[12]);
      for (const tid of readdirSync(`/proc/${p}/task`)) {
        const children = readFileSync(`/proc/${p}/task/${tid}/children`, "utf8").trim();
        if (children !== "") pending.push(...children.split(" ").map(Number));
      }
    }
  } catch {
    return undefined;
  }
  return ticks / ticksPerSecond;
}
