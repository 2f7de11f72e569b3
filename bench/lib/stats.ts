/** Small numeric helpers shared by the benches. */

export function median(values: readonly number[]): number {
  if (values.length === 0) return Number.NaN;
  const sorted = [...values].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length % 2 === 1 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
}

/** 1234567 -> "1,234,567". */
export function fmtInt(n: number): string {
  return Math.round(n).toLocaleString("en-US");
}

export function fmtFixed(n: number, digits: number): string {
  return Number.isFinite(n) ? n.toFixed(digits) : "n/a";
}

export function yesNo(ok: boolean): string {
  return ok ? "yes" : "NO";
}

/** Lets pending promise jobs and I/O callbacks run (a macrotask boundary). */
export function tick(): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve));
}

/** Whether the process was started with --expose-gc (npm run bench is). */
export function canCollect(): boolean {
  return typeof globalThis.gc === "function";
}

/**
 * Full collection, twice so that objects freed by finalizers of the first pass go too. Without
 * --expose-gc (e.g. a quick `node --cpu-prof --import tsx bench/core.bench.ts`) it only yields.
 */
export async function settleHeap(): Promise<void> {
  await tick();
  const gc = globalThis.gc;
  if (gc === undefined) return;
  gc();
  await tick();
  gc();
}
