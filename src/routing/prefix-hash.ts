/**
 * `prefix_hash`: the first PREFIX_HASH_CHARS characters of the prompt, hashed onto the candidates by
 * rendezvous hashing, so requests that share that head (a system prompt, a few-shot preamble) land
 * on one worker with no state kept. When that worker is overloaded (the same gate as cache_aware),
 * the least loaded candidate instead; no prompt, the least loaded.
 *
 * The reference hashes its first 256 tokens (`--prefix-token-count`), four characters per token for
 * text requests: 1024 characters here. The head is hashed with SHA-1 (native: a JavaScript loop over
 * 1024 characters costs several times more), of which 32 bits key the rendezvous.
 */
import { hash } from "node:crypto";
import type {
  ChoiceCounter,
  RoutingCandidate,
  RoutingObserver,
  RoutingRequest,
} from "../contracts/routing-policy.js";
import { ChoiceAmongMany } from "./choice-among-many.js";
import { rendezvousPick } from "./hash.js";
import { isOverloaded, LeastLoaded, meanLoad } from "./load.js";

export const PREFIX_HASH_CHARS = 1024;

export class PrefixHashPolicy<W extends RoutingCandidate> extends ChoiceAmongMany<W> {
  private readonly least = new LeastLoaded();
  private readonly hashed: ChoiceCounter;
  private readonly overloaded: ChoiceCounter;
  private readonly noPrompt: ChoiceCounter;

  constructor(
    private readonly options: { balanceAbsThreshold: number; balanceRelThreshold: number },
    observer: RoutingObserver,
  ) {
    super("prefix_hash", observer);
    this.hashed = observer.choices(this.name, "prefix_hash");
    this.overloaded = observer.choices(this.name, "overloaded");
    this.noPrompt = observer.choices(this.name, "no_prompt");
  }

  protected chooseAmong(candidates: readonly W[], request: RoutingRequest): W | undefined {
    const text = request.promptText();
    if (text.length === 0) {
      this.noPrompt.inc();
      return this.least.pick(candidates);
    }
    const key = Number.parseInt(hash("sha1", text.slice(0, PREFIX_HASH_CHARS)).slice(0, 8), 16);
    const owner = rendezvousPick(candidates, key)!;
    const o = this.options;
    if (!isOverloaded(owner.inflight, meanLoad(candidates), o.balanceAbsThreshold, o.balanceRelThreshold)) {
      this.hashed.inc();
      return owner;
    }
    this.overloaded.inc();
    return this.least.pick(candidates);
  }
}
