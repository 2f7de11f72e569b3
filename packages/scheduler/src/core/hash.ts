/**
 * The project's one string hash and bit mixer, for deterministic choices that must agree across
 * processes (keyed shedding's buckets, session and prefix routing): 32-bit FNV-1a over a short
 * string's UTF-16 code units, and MurmurHash3's 32-bit finalizer for avalanche.
 */

/** FNV-1a over `text`'s UTF-16 code units: spreads short, similar keys (session ids, URLs) apart. */
export function fnv1a(text: string): number {
  let h = 0x811c9dc5;
  const n = text.length;
  for (let i = 0; i < n; i++) {
    h ^= text.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  return h >>> 0;
}

/** MurmurHash3's 32-bit finalizer: every input bit flips each output bit with probability ~1/2. */
export function fmix32(value: number): number {
  let h = value >>> 0;
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  h ^= h >>> 16;
  return h >>> 0;
}
