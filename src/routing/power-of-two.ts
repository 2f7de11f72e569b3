/** `power_of_two`: the less loaded of two distinct random candidates. */
import type { ChoiceCounter, RoutingCandidate, RoutingObserver } from "../contracts/routing-policy.js";
import { ChoiceAmongMany } from "./choice-among-many.js";

/** The less loaded of two distinct random candidates (n >= 2). */
export function lessLoadedOfTwo<W extends RoutingCandidate>(
  candidates: readonly W[],
  random: () => number,
): W {
  const n = candidates.length;
  const i = Math.floor(random() * n);
  let j = Math.floor(random() * (n - 1));
  if (j >= i) j++;
  const a = candidates[i]!;
  const b = candidates[j]!;
  return a.inflight <= b.inflight ? a : b;
}

export class PowerOfTwoPolicy<W extends RoutingCandidate> extends ChoiceAmongMany<W> {
  private readonly counted: ChoiceCounter;

  constructor(
    observer: RoutingObserver,
    private readonly random: () => number = Math.random,
  ) {
    super("power_of_two", observer);
    this.counted = observer.choices(this.name, "two_choices");
  }

  protected chooseAmong(candidates: readonly W[]): W {
    this.counted.inc();
    return lessLoadedOfTwo(candidates, this.random);
  }
}
