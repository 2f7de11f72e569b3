/** `round_robin`: the candidates in turn. */
import type {
  ChoiceCounter,
  RoutingCandidate,
  RoutingObserver,
  RoutingPolicy,
} from "../contracts/routing-policy.js";

export class RoundRobinPolicy<W extends RoutingCandidate> implements RoutingPolicy<W> {
  readonly name = "round_robin";
  private next = 0;
  private readonly rotation: ChoiceCounter;
  private readonly only: ChoiceCounter;

  constructor(observer: RoutingObserver) {
    this.rotation = observer.choices(this.name, "rotation");
    this.only = observer.choices(this.name, "only_candidate");
  }

  choose(candidates: readonly W[]): W | undefined {
    const n = candidates.length;
    if (n <= 1) {
      if (n === 1) this.only.inc();
      return candidates[0];
    }
    this.next = (this.next + 1) % n;
    this.rotation.inc();
    return candidates[this.next];
  }

  onWorkerRemoved(): void {}
}
