/**
 * Choosing the Node a bench runs on: `--node LINE` or SLUICE_NODE=LINE, where LINE is a major (24), an
 * exact version (24.21.0) or `system`. When the running Node is not that line, the calling script is run
 * again, with the same Node options and arguments, on the binary scripts/node-line.sh installs (pinned in
 * scripts/node-lines.lock, integrity-checked, kept in .tools/), and this process exits with its status.
 */
import { spawnSync } from "node:child_process";
import { realpathSync } from "node:fs";
import { delimiter, dirname } from "node:path";
import { fileURLToPath } from "node:url";

const SCRIPT = fileURLToPath(new URL("./node-line.sh", import.meta.url));
/** Set in the re-run process, so it never re-runs itself. */
const REEXEC_MARK = "SLUICE_NODE_REEXEC";

/** The `--node LINE` / `--node=LINE` value in argv, and argv without it. */
export function takeNodeFlag(argv: readonly string[]): { line: string | undefined; rest: string[] } {
  const rest: string[] = [];
  let line: string | undefined;
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    if (arg === "--node") {
      line = argv[++i];
      if (line === undefined) throw new Error("--node needs a value: a major (24), a version or system");
    } else if (arg.startsWith("--node=")) {
      line = arg.slice("--node=".length);
    } else {
      rest.push(arg);
    }
  }
  return { line, rest };
}

function runningIs(line: string): boolean {
  const want = line.replace(/^v/, "");
  const have = process.versions.node;
  return want === have || want === have.split(".")[0];
}

/**
 * Re-runs the current script on the selected Node line unless it already runs there; returns only when
 * no other Node is needed. Call it first thing in a bench's module body.
 */
export function runOnSelectedNode(argv: readonly string[] = process.argv.slice(2)): void {
  const { line: flag, rest } = takeNodeFlag(argv);
  const line = flag ?? process.env.SLUICE_NODE;
  if (line === undefined || line === "" || runningIs(line)) return;
  if (process.env[REEXEC_MARK] === "1") {
    if (line === "system") return;
    throw new Error(`asked for Node ${line} but re-running still gave Node ${process.version}`);
  }
  const found = spawnSync("bash", [SCRIPT, "path", line], {
    encoding: "utf8",
    stdio: ["ignore", "pipe", "inherit"],
  });
  if (found.status !== 0) process.exit(found.status ?? 1);
  const bin = found.stdout.trim();
  if (realpathSync(bin) === realpathSync(process.execPath)) return; // `system` and we are it
  process.stderr.write(`Running on Node ${line}: ${bin}\n`);
  const script = process.argv[1]!;
  const child = spawnSync(bin, [...process.execArgv, script, ...rest], {
    stdio: "inherit",
    env: {
      ...process.env,
      SLUICE_NODE: line,
      [REEXEC_MARK]: "1",
      PATH: `${dirname(bin)}${delimiter}${process.env.PATH ?? ""}`,
    },
  });
  if (child.error !== undefined) throw child.error;
  if (child.signal !== null) process.kill(process.pid, child.signal);
  process.exit(child.status ?? 1);
}
