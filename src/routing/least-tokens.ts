/**
 * `least_tokens`: the candidate with the fewest tokens outstanding from this gateway, the prompt
 * and the predicted output of each request in flight there (outstanding-work.ts). A worker with
 * two short chats in flight takes the next request before one busy with a long generation, which
 * in-flight counts would rank the other way. Ties go to the candidates in turn. A request that
 * brings no token count (an embedder's own RoutingRequest) is routed by in-flight requests.
 */
import type {
  ChoiceCounter,
  RoutingCandidate,
  RoutingObserver,
  RoutingRequest,
} from "../contracts/routing-policy.js";
import { ChoiceAmongMany } from "./choice-among-many.js";
import { LeastLoaded } from "./load.js";

export class LeastTokensPolicy<W extends RoutingCandidate> extends ChoiceAmongMany<W> {
  private start = 0;
  private readonly byTokens: ChoiceCounter;
  private readonly byRequests: ChoiceCounter;
  private readonly leastLoaded = new LeastLoaded();

  constructor(observer: RoutingObserver) {
    super("least_tokens", observer);
    this.byTokens = observer.choices(this.name, "least_tokens");
    this.byRequests = observer.choices(this.name, "least_inflight");
  }

  protected chooseAmong(candidates: readonly W[], request: RoutingRequest): W | undefined {
    const outstanding = request.outstandingTokens;
    if (outstanding === undefined) {
      this.byRequests.inc();
      return this.leastLoaded.pick(candidates);
    }
    this.byTokens.inc();
    const n = candidates.length;
    const start = this.start++ % n;
    if (this.start >= 0x40000000) this.start = 0;
    let best = candidates[start]!;
    let least = outstanding.call(request, best.url);
    for (let k = 1; k < n; k++) {
      const c = candidates[(start + k) % n]!;
      const tokens = outstanding.call(request, c.url);
      // Equal tokens (an idle fleet): fewer requests in flight first.
      if (tokens < least || (tokens === least && c.inflight < best.inflight)) {
        best = c;
        least = tokens;
      }
    }
    return best;
  }
}
