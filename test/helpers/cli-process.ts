/** Runs the `sluice` command as a child process from the repository root (the CLI tests). */
import { type ChildProcess, spawn } from "node:child_process";
import { join } from "node:path";
import { waitFor } from "./harness.js";

export const REPO_ROOT = new URL("../../", import.meta.url).pathname;

export interface Run extends Output {
  code: number | null;
}

/** What a child wrote so far. */
export interface Output {
  stdout: string;
  stderr: string;
}

/** Starts COMMAND ARGS in CWD; `out` fills as the child writes. */
export function startProcess(
  command: string,
  args: string[],
  cwd: string,
  env: NodeJS.ProcessEnv = process.env,
): { child: ChildProcess; out: Output } {
  const child = spawn(command, args, { cwd, env, stdio: ["ignore", "pipe", "pipe"] });
  const out = { stdout: "", stderr: "" };
  child.stdout!.on("data", (d: Buffer) => {
    out.stdout += d.toString("utf8");
  });
  child.stderr!.on("data", (d: Buffer) => {
    out.stderr += d.toString("utf8");
  });
  return { child, out };
}

/** Starts `sluice ARGS` from the repository's sources; `out` fills as the child writes. */
export function startCli(args: string[]): { child: ChildProcess; out: Output } {
  return startProcess(
    process.execPath,
    ["--import", "tsx", join(REPO_ROOT, "src/cli/main.ts"), ...args],
    REPO_ROOT,
  );
}

/** The child's exit code, once it has exited. */
export function exited(child: ChildProcess): Promise<number | null> {
  if (child.exitCode !== null) return Promise.resolve(child.exitCode);
  return new Promise((resolve) => child.once("exit", (code) => resolve(code)));
}

/** Runs `sluice ARGS` to its end (killed after `timeoutMs`). */
export async function runCli(args: string[], timeoutMs = 20_000): Promise<Run> {
  const { child, out } = startCli(args);
  const timer = setTimeout(() => child.kill("SIGKILL"), timeoutMs);
  const code = await exited(child);
  clearTimeout(timer);
  return { code, ...out };
}

/** The port a `sluice` gateway child logged once listening (it fails if the child exits first). */
export async function listeningPort(
  child: ChildProcess,
  out: { stdout: string; stderr: string },
): Promise<number> {
  let port = 0;
  await waitFor(
    () => {
      if (child.exitCode !== null) throw new Error(`sluice exited ${child.exitCode}: ${out.stderr}`);
      const line = out.stdout.split("\n").find((l) => l.includes('"sluice gateway listening"'));
      if (line !== undefined) port = (JSON.parse(line) as { port: number }).port;
      return port > 0;
    },
    "the gateway logged its port",
    { timeoutMs: 20_000, intervalMs: 20 },
  );
  return port;
}
