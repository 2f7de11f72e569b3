/** `power_of_two`: the less loaded of two distinct random candidates. */
import type {
  ChoiceCounter,
  RoutingCandidate,
  RoutingObserver,
  RoutingPolicy,
} from "../contracts/routing-policy.js";

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

export class PowerOfTwoPolicy<W extends RoutingCandidate> implements RoutingPolicy<W> {
  readonly name = "power_of_two";
  private readonly counted: ChoiceCounter;
  private readonly only: ChoiceCounter;

  constructor(
    observer: RoutingObserver,
    private readonly random: () => number = Math.random,
  ) {
    this.counted = observer.choices(this.name, "two_choices");
    this.only = observer.choices(this.name, "only_candidate");
  }

  choose(candidates: readonly W[]): W | undefined {
    if (candidates.length <= 1) {
      if (candidates.length === 1) this.only.inc();
      return candidates[0];
    }
    this.counted.inc();
    return lessLoadedOfTwo(candidates, this.random);
  }

  onWorkerRemoved(): void {}
}
