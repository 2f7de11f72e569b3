/**
 * Hashing for the hash-based policies (the one FNV-1a and finalizer of src/core/hash.ts), and
 * rendezvous (highest-random-weight) hashing, which is consistent:
 * when a worker leaves, only the keys it held move, each to the worker that scored next for it.
 */
import { fmix32, fnv1a } from "@sluice/scheduler/core/hash.js";
import type { RoutingCandidate } from "../contracts/routing-policy.js";

/** The score of `worker` for `key`: the worker with the highest score owns the key. */
function rendezvousScore(key: number, workerHash: number): number {
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
