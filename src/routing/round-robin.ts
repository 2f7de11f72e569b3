/** `round_robin`: the candidates in turn. */
import type { ChoiceCounter, RoutingCandidate, RoutingObserver } from "../contracts/routing-policy.js";
import { ChoiceAmongMany } from "./choice-among-many.js";

export class RoundRobinPolicy<W extends RoutingCandidate> extends ChoiceAmongMany<W> {
  private next = 0;
  private readonly rotation: ChoiceCounter;

  constructor(observer: RoutingObserver) {
    super("round_robin", observer);
    this.rotation = observer.choices(this.name, "rotation");
  }

  protected chooseAmong(candidates: readonly W[]): W | undefined {
    this.next = (this.next + 1) % candidates.length;
    this.rotation.inc();
    return candidates[this.next];
  }
}
