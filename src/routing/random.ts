/** `random`: a uniformly random candidate. */
import type {
  ChoiceCounter,
  RoutingCandidate,
  RoutingObserver,
  RoutingPolicy,
} from "../contracts/routing-policy.js";

export class RandomPolicy<W extends RoutingCandidate> implements RoutingPolicy<W> {
  readonly name = "random";
  private readonly counted: ChoiceCounter;
  private readonly only: ChoiceCounter;

  constructor(
    observer: RoutingObserver,
    private readonly random: () => number = Math.random,
  ) {
    this.counted = observer.choices(this.name, "random");
    this.only = observer.choices(this.name, "only_candidate");
  }

  choose(candidates: readonly W[]): W | undefined {
    const n = candidates.length;
    if (n <= 1) {
      if (n === 1) this.only.inc();
      return candidates[0];
    }
    this.counted.inc();
    return candidates[Math.floor(this.random() * n)];
  }

  onWorkerRemoved(): void {}
}
