/** `random`: a uniformly random candidate. */
import type { ChoiceCounter, RoutingCandidate, RoutingObserver } from "../contracts/routing-policy.js";
import { ChoiceAmongMany } from "./choice-among-many.js";

export class RandomPolicy<W extends RoutingCandidate> extends ChoiceAmongMany<W> {
  private readonly counted: ChoiceCounter;

  constructor(
    observer: RoutingObserver,
    private readonly random: () => number = Math.random,
  ) {
    super("random", observer);
    this.counted = observer.choices(this.name, "random");
  }

  protected chooseAmong(candidates: readonly W[]): W | undefined {
    this.counted.inc();
    return candidates[Math.floor(this.random() * candidates.length)];
  }
}
