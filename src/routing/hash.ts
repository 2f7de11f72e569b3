/**
 * Hashing for the hash-based policies: 32-bit FNV-1a over a short string's UTF-16 code units, murmur3's
 * finalizer for avalanche, and rendezvous (highest-random-weight) hashing, which is consistent:
 * when a worker leaves, only the keys it held move, each to the worker that scored next for it.
 */
import type { RoutingCandidate } from "./policy.js";

/** FNV-1a over `text`'s UTF-16 code units (short keys: session ids, worker URLs). */
export function fnv1a(text: string): number {
  let h = 0x811c9dc5;
  const n = text.length;
  for (let i = 0; i < n; i++) {
    h ^= text.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  return h >>> 0;
}

/** murmur3's 32-bit finalizer. */
export function fmix32(h: number): number {
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  h ^= h >>> 16;
  return h >>> 0;
}

/** The score of `worker` for `key`: the worker with the highest score owns the key. */
export function rendezvousScore(key: number, workerHash: number): number {
  return fmix32(key ^ Math.imul(workerHash, 0x9e3779b1));
}

/** The candidate with the highest score for `key`. */
export function rendezvousPick<W extends RoutingCandidate>(
  candidates: readonly W[],
  key: number,
): W | undefined {
  let best: W | undefined;
  let bestScore = -1;
  for (const w of candidates) {
    const s = rendezvousScore(key, fnv1a(w.url));
    if (s > bestScore) {
      best = w;
      bestScore = s;
    }
  }
  return best;
}
