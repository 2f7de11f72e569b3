/**
 * mulberry32: a tiny, fast, seedable 32-bit PRNG, uniform in [0, 1). For deterministic sampling
 * (the adaptive limit's reservoirs) and for tests and benches that must replay; not for secrets.
 */
export function mulberry32(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/**
 * 1 / golden ratio. The fractional parts of k x this (k = 0, 1, 2, ...) are as evenly spread over
 * [0, 1) as any sequence can be: a deterministic stand-in for uniform draws, and offsets that stay
 * apart for any count.
 */
export const GOLDEN_FRACTION = 0.6180339887498949;
