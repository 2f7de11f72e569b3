/**
 * Summarizes a V8 .cpuprofile (from `node --cpu-prof`, e.g. `npm run bench:gateway -- --cpu-prof DIR`):
 * self time by area (sluice's own modules, undici, node internals, GC, idle), the top frames by self
 * time, and the top sluice frames by inclusive time.
 *
 *   node --import tsx bench/gateway/profile-summary.ts DIR/sluice-scheduler [topN]
 *
 * Given a folder, it reads the largest .cpuprofile in it (the main thread's; tsx's loader thread writes a
 * small one beside it).
 */
import { readdirSync, readFileSync, statSync } from "node:fs";
import { join } from "node:path";

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number; columnNumber: number };
  children?: number[];
}

interface Profile {
  nodes: ProfileNode[];
  samples: number[];
  timeDeltas: number[];
}

const SRC = /\/src\/(.+)$/;

function shortUrl(url: string): string {
  if (url === "") return "";
  const src = SRC.exec(url);
  if (src !== null) return `src/${src[1]}`;
  const nm = url.lastIndexOf("node_modules/");
  if (nm !== -1) return url.slice(nm + "node_modules/".length);
  return url.replace(/^file:\/\//, "");
}

function area(node: ProfileNode): string {
  const { functionName, url } = node.callFrame;
  if (functionName === "(idle)") return "idle";
  if (functionName === "(garbage collector)") return "GC";
  if (functionName === "(program)") return "(program): native, not attributed";
  if (url === "") return "native / builtins";
  if (url.startsWith("node:")) return "node internals";
  const src = SRC.exec(url);
  if (src !== null) return `src/${src[1]!.split("/")[0]}`;
  const nm = /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(url);
  if (nm !== null) return nm[1]!;
  return "other";
}

function key(node: ProfileNode): string {
  const { functionName, url, lineNumber } = node.callFrame;
  const where = shortUrl(url);
  return `${functionName || "(anonymous)"}${where === "" ? "" : ` ${where}${lineNumber > 0 ? `:${lineNumber + 1}` : ""}`}`;
}

export function summarize(profile: Profile, top = 25): string {
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  const self = new Map<number, number>();
  profile.samples.forEach((id, i) => {
    self.set(id, (self.get(id) ?? 0) + (profile.timeDeltas[i] ?? 0) / 1000);
  });
  const totalMs = [...self.values()].reduce((a, b) => a + b, 0);
  const idleMs = profile.nodes
    .filter((n) => n.callFrame.functionName === "(idle)")
    .reduce((a, n) => a + (self.get(n.id) ?? 0), 0);
  const busyMs = totalMs - idleMs;

  const add = (m: Map<string, number>, k: string, v: number) => m.set(k, (m.get(k) ?? 0) + v);
  const areas = new Map<string, number>();
  const frames = new Map<string, number>();
  for (const n of profile.nodes) {
    const ms = self.get(n.id) ?? 0;
    if (ms === 0) continue;
    add(areas, area(n), ms);
    if (n.callFrame.functionName !== "(idle)") add(frames, key(n), ms);
  }

  // Inclusive time of sluice's own frames, counting a frame once per stack (recursion).
  const inclusive = new Map<string, number>();
  const parent = new Map<number, number>();
  for (const n of profile.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
  for (const [id, ms] of self) {
    const seen = new Set<string>();
    for (let cur: number | undefined = id; cur !== undefined; cur = parent.get(cur)) {
      const n = byId.get(cur)!;
      if (!SRC.test(n.callFrame.url)) continue;
      const k = key(n);
      if (seen.has(k)) continue;
      seen.add(k);
      add(inclusive, k, ms);
    }
  }

  const pct = (ms: number, of: number) => `${((100 * ms) / of).toFixed(1).padStart(5)}%`;
  const list = (m: Map<string, number>, n: number, of: number) =>
    [...m]
      .sort((a, b) => b[1] - a[1])
      .slice(0, n)
      .map(([k, ms]) => `  ${pct(ms, of)}  ${ms.toFixed(0).padStart(7)} ms  ${k}`)
      .join("\n");
  return [
    `profiled ${(totalMs / 1000).toFixed(1)} s, busy ${(busyMs / 1000).toFixed(1)} s (${pct(busyMs, totalMs).trim()})`,
    "",
    "self time by area (% of busy):",
    list(new Map([...areas].filter(([k]) => k !== "idle")), 20, busyMs),
    "",
    `top ${top} frames by self time (% of busy):`,
    list(frames, top, busyMs),
    "",
    `top ${top} src/ frames by inclusive time (% of busy):`,
    list(inclusive, top, busyMs),
  ].join("\n");
}

const [arg, topArg] = process.argv.slice(2);
if (arg === undefined) {
  process.stderr.write("usage: profile-summary.ts FILE.cpuprofile|DIR [topN]\n");
  process.exit(2);
}
let file = arg;
if (statSync(arg).isDirectory()) {
  const largest = readdirSync(arg)
    .filter((f) => f.endsWith(".cpuprofile"))
    .map((f) => ({ path: join(arg, f), size: statSync(join(arg, f)).size }))
    .sort((a, b) => b.size - a.size)[0];
  if (largest === undefined) throw new Error(`no .cpuprofile in ${arg}`);
  file = largest.path;
}
process.stdout.write(
  `${file}\n${summarize(JSON.parse(readFileSync(file, "utf8")) as Profile, Number(topArg ?? 25))}\n`,
);
