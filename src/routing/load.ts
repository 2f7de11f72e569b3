/**
 * Load rules shared by the policies: the least-loaded choice and the reference gateway's overload
 * gate. Load is a worker's in-flight requests from this gateway.
 */
import type { RoutingCandidate } from "../contracts/routing-policy.js";

/** Mean in-flight requests over `candidates` (0 for none). */
export function meanLoad(candidates: readonly RoutingCandidate[]): number {
  let sum = 0;
  for (const c of candidates) sum += c.inflight;
  return candidates.length === 0 ? 0 : sum / candidates.length;
}

/**
 * The reference's overload gate (smg `gate_selected_candidate`): a worker is overloaded when its load
 * exceeds the mean by more than `abs` requests AND by more than `rel` times. Both margins must clear:
 * the relative one alone would fire on noise at low load, the absolute one alone would not see a
 * deep queue at high load.
 */
export function isOverloaded(load: number, mean: number, abs: number, rel: number): boolean {
  return load > mean * rel && load > mean + abs;
}

/**
 * The least-loaded candidate. Ties go to the candidates in turn (the scan starts one further each
 * call), so an idle fleet spreads new work instead of giving it all to the first worker.
 */
export class LeastLoaded {
  private start = 0;

  pick<W extends RoutingCandidate>(candidates: readonly W[]): W | undefined {
    const n = candidates.length;
    if (n === 0) return undefined;
    const start = this.start++ % n;
    if (this.start >= 0x40000000) this.start = 0;
    let best = candidates[start]!;
    for (let k = 1; k < n; k++) {
      const c = candidates[(start + k) % n]!;
      if (c.inflight < best.inflight) best = c;
    }
    return best;
  }
}
