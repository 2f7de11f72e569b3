/**
 * Summarizes a V8 .cpuprofile (from `node --cpu-prof`, e.g. `npm run bench:gateway -- --cpu-prof DIR`):
 * self time by area (sluice's own modules, undici, node internals, GC, idle), the top frames by self
 * time, and the top sluice frames by inclusive time.
 *
 *   node --import tsx bench/gateway/profile-summary.ts DIR/sluice-scheduler-stream [topN] [skip-ms]
 *
 * skip-ms leaves out the profile's first milliseconds (the process's startup and the warm-up); the
 * bench prints the value it used for each profile.
 *
 * Given a folder, it reads the largest .cpuprofile in it (the main thread's; tsx's loader thread writes a
 * small one beside it). The gateway bench imports it to put a compact summary into BENCHMARKS.md.
 */
import { readdirSync, readFileSync, statSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number; columnNumber: number };
  children?: number[];
}

export interface Profile {
  nodes: ProfileNode[];
  samples: number[];
  timeDeltas: number[];
}

/** Profiles cover the whole process; `skipMs` leaves out its first milliseconds (startup, warm-up). */

const SRC = /\/src\/(.+)$/;
/** The bench's own files (the bare proxy). */
const BENCH = /\/bench\/(.+)$/;

function shortUrl(url: string): string {
  if (url === "") return "";
  const src = SRC.exec(url);
  if (src !== null) return `src/${src[1]}`;
  const bench = BENCH.exec(url);
  if (bench !== null) return `bench/${bench[1]}`;
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
  if (url.startsWith("wasm://")) return "wasm (undici's HTTP parser, llhttp)";
  const src = SRC.exec(url);
  if (src !== null) return `src/${src[1]!.split("/")[0]}`;
  if (BENCH.test(url)) return "bench/ (the bare proxy)";
  const nm = /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(url);
  if (nm !== null) return nm[1]!;
  return "other";
}

function key(node: ProfileNode): string {
  const { functionName, url, lineNumber } = node.callFrame;
  const where = shortUrl(url);
  return `${functionName || "(anonymous)"}${where === "" ? "" : ` ${where}${lineNumber > 0 ? `:${lineNumber + 1}` : ""}`}`;
}

export interface ProfileAnalysis {
  totalMs: number;
  busyMs: number;
  /** Self time by area, largest first, idle left out. */
  areas: Array<[string, number]>;
  /** Self time by frame, largest first, idle left out. */
  self: Array<[string, number]>;
  /** Inclusive time of sluice's own (src/) frames, largest first. */
  inclusive: Array<[string, number]>;
}

export function analyze(profile: Profile, skipMs = 0): ProfileAnalysis {
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  const self = new Map<number, number>();
  let atMs = 0;
  profile.samples.forEach((id, i) => {
    const deltaMs = (profile.timeDeltas[i] ?? 0) / 1000;
    atMs += deltaMs;
    if (atMs >= skipMs) self.set(id, (self.get(id) ?? 0) + deltaMs);
  });
  const totalMs = [...self.values()].reduce((a, b) => a + b, 0);
  const idleMs = profile.nodes
    .filter((n) => n.callFrame.functionName === "(idle)")
    .reduce((a, n) => a + (self.get(n.id) ?? 0), 0);

  const add = (m: Map<string, number>, k: string, v: number) => m.set(k, (m.get(k) ?? 0) + v);
  const areas = new Map<string, number>();
  const frames = new Map<string, number>();
  for (const n of profile.nodes) {
    const ms = self.get(n.id) ?? 0;
    if (ms === 0) continue;
    if (n.callFrame.functionName === "(idle)") continue;
    add(areas, area(n), ms);
    add(frames, key(n), ms);
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
  const sorted = (m: Map<string, number>) => [...m].sort((a, b) => b[1] - a[1]);
  return {
    totalMs,
    busyMs: totalMs - idleMs,
    areas: sorted(areas),
    self: sorted(frames),
    inclusive: sorted(inclusive),
  };
}

const pct = (ms: number, of: number) => `${((100 * ms) / of).toFixed(1).padStart(5)}%`;

function list(entries: Array<[string, number]>, n: number, of: number): string {
  return entries
    .slice(0, n)
    .map(([k, ms]) => `  ${pct(ms, of)}  ${ms.toFixed(0).padStart(7)} ms  ${k}`)
    .join("\n");
}

export function summarize(profile: Profile, top = 25, skipMs = 0): string {
  const a = analyze(profile, skipMs);
  return [
    `profiled ${(a.totalMs / 1000).toFixed(1)} s, busy ${(a.busyMs / 1000).toFixed(1)} s (${pct(a.busyMs, a.totalMs).trim()})`,
    "",
    "self time by area (% of busy):",
    list(a.areas, 20, a.busyMs),
    "",
    `top ${top} frames by self time (% of busy):`,
    list(a.self, top, a.busyMs),
    "",
    `top ${top} src/ frames by inclusive time (% of busy):`,
    list(a.inclusive, top, a.busyMs),
  ].join("\n");
}

/**
 * A compact text block for BENCHMARKS.md: the areas on one line, the top `top` frames by self time,
 * and (when there are any) the top `top` src/ frames by inclusive time.
 */
export function compactSummary(profile: Profile, top = 10, skipMs = 0): string {
  const a = analyze(profile, skipMs);
  const areas = a.areas
    .slice(0, 8)
    .map(([k, ms]) => `${k} ${((100 * ms) / a.busyMs).toFixed(1)}%`)
    .join(", ");
  const out = [
    `busy ${(a.busyMs / 1000).toFixed(1)} s of ${(a.totalMs / 1000).toFixed(1)} s profiled; self time by area: ${areas}`,
    "",
    `top ${top} frames by self time (% of busy):`,
    list(a.self, top, a.busyMs),
  ];
  if (a.inclusive.length > 0) {
    out.push("", `top ${top} src/ frames by inclusive time (% of busy):`, list(a.inclusive, top, a.busyMs));
  }
  return out.join("\n");
}

/** The profile in a file, or the largest .cpuprofile in a folder (the main thread's). */
export function loadProfile(path: string): { file: string; profile: Profile } {
  let file = path;
  if (statSync(path).isDirectory()) {
    const largest = readdirSync(path)
      .filter((f) => f.endsWith(".cpuprofile"))
      .map((f) => ({ path: join(path, f), size: statSync(join(path, f)).size }))
      .sort((a, b) => b.size - a.size)[0];
    if (largest === undefined) throw new Error(`no .cpuprofile in ${path}`);
    file = largest.path;
  }
  return { file, profile: JSON.parse(readFileSync(file, "utf8")) as Profile };
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const [arg, topArg, skipArg] = process.argv.slice(2);
  if (arg === undefined) {
    process.stderr.write("usage: profile-summary.ts FILE.cpuprofile|DIR [topN] [skip-ms]\n");
    process.exit(2);
  }
  const { file, profile } = loadProfile(arg);
  process.stdout.write(`${file}\n${summarize(profile, Number(topArg ?? 25), Number(skipArg ?? 0))}\n`);
}
