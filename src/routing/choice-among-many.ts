/**
 * The part every stateless policy shares: with no candidate there is nothing to return, with one
 * there is nothing to choose (counted as `only_candidate`); only two or more reach the policy's own
 * rule. cache_aware does not build on it: it still records where a lone candidate's prompt went.
 */
import type {
  ChoiceCounter,
  RoutingCandidate,
  RoutingObserver,
  RoutingPolicy,
  RoutingRequest,
} from "../contracts/routing-policy.js";

export abstract class ChoiceAmongMany<W extends RoutingCandidate> implements RoutingPolicy<W> {
  private readonly only: ChoiceCounter;

  protected constructor(
    readonly name: string,
    observer: RoutingObserver,
  ) {
    this.only = observer.choices(name, "only_candidate");
  }

  choose(candidates: readonly W[], request: RoutingRequest): W | undefined {
    if (candidates.length <= 1) {
      if (candidates.length === 1) this.only.inc();
      return candidates[0];
    }
    return this.chooseAmong(candidates, request);
  }

  /** The policy's own rule, for two candidates or more. */
  protected abstract chooseAmong(candidates: readonly W[], request: RoutingRequest): W | undefined;

  onWorkerRemoved(_worker: W): void {}
}
