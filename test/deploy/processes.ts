/**
 * Child processes for the deploy tests, with waits long enough for a machine busy building: these
 * tests run npm installs and a TypeScript build beside the rest of the suite.
 */
import type { ChildProcess } from "node:child_process";
import { exited, type Output, type Run, startProcess } from "../helpers/cli-process.js";
import { waitFor } from "../helpers/harness.js";

export const START_TIMEOUT_MS = 90_000;

/** Runs COMMAND ARGS in CWD to its end. */
export async function run(command: string, args: string[], cwd: string, env = process.env): Promise<Run> {
  const { child, out } = startProcess(command, args, cwd, env);
  const code = await exited(child);
  return { code, ...out };
}

/** The first match of PATTERN's group 1 in the child's stdout (it fails if the child exits first). */
export async function printed(
  child: ChildProcess,
  out: Output,
  pattern: RegExp,
  what: string,
): Promise<string> {
  let found = "";
  await waitFor(
    () => {
      if (child.exitCode !== null)
        throw new Error(`${what}: the process exited ${child.exitCode}: ${out.stderr}`);
      found = pattern.exec(out.stdout)?.[1] ?? "";
      return found !== "";
    },
    what,
    { timeoutMs: START_TIMEOUT_MS, intervalMs: 50 },
  );
  return found;
}

/** The port a `sluice` gateway logged once listening (its JSON log line). */
export async function gatewayPort(child: ChildProcess, out: Output): Promise<number> {
  const line = await printed(
    child,
    out,
    /^(.*"sluice gateway listening".*)$/m,
    "the gateway logged its port",
  );
  return (JSON.parse(line) as { port: number }).port;
}
