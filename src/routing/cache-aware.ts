/**
 * `cache_aware`: send a prompt where its prefix was served before, so the worker's KV cache skips
 * most of the prefill, unless that worker is overloaded; otherwise the least loaded worker.
 *
 * The approximate prefix tree (prefix-tree.ts) records which workers served which prompt prefixes.
 * For each request: the deepest node of the prompt's path that a candidate holds gives the matched
 * share (matched characters / prompt characters). At or above `cacheThreshold`, the least loaded
 * candidate holding that node is chosen, unless it is overloaded (the reference's gate: above the
 * candidates' mean load by more than `balanceAbsThreshold` and more than `balanceRelThreshold`
 * times); then, and below the threshold, the least loaded candidate. Either way the chosen worker
 * now holds the prompt: a hot prefix whose home is overloaded gains a second home.
 *
 * Characters, not tokens: the gateway has no tokenizer for the model behind it, and a prefix of the
 * text is a prefix of its tokens (up to the one token that straddles the boundary), so the share of
 * matched characters approximates the share of cached tokens at no tokenization cost.
 */

import type {
  ChoiceCounter,
  RoutingCandidate,
  RoutingObserver,
  RoutingPolicy,
  RoutingRequest,
} from "../contracts/routing-policy.js";
import { isOverloaded, LeastLoaded, meanLoad } from "./load.js";
import { PrefixTree, type TreeNode } from "./prefix-tree.js";

interface CacheAwareOptions {
  cacheThreshold: number;
  balanceAbsThreshold: number;
  balanceRelThreshold: number;
  /** Characters the tree holds at most. */
  maxTreeSize: number;
}

export class CacheAwarePolicy<W extends RoutingCandidate> implements RoutingPolicy<W> {
  readonly name = "cache_aware";
  private readonly tree: PrefixTree<W>;
  private readonly least = new LeastLoaded();
  private readonly hit: ChoiceCounter;
  private readonly miss: ChoiceCounter;
  private readonly overloaded: ChoiceCounter;
  private readonly noPrompt: ChoiceCounter;
  private readonly only: ChoiceCounter;

  constructor(
    private readonly options: CacheAwareOptions,
    private readonly observer: RoutingObserver,
  ) {
    this.tree = new PrefixTree<W>(options.maxTreeSize);
    this.hit = observer.choices(this.name, "cache_hit");
    this.miss = observer.choices(this.name, "cache_miss");
    this.overloaded = observer.choices(this.name, "overloaded");
    this.noPrompt = observer.choices(this.name, "no_prompt");
    this.only = observer.choices(this.name, "only_candidate");
  }

  get treeChars(): number {
    return this.tree.size;
  }

  choose(candidates: readonly W[], request: RoutingRequest): W | undefined {
    const n = candidates.length;
    if (n === 0) return undefined;
    const text = request.promptText();
    if (text.length === 0) {
      this.noPrompt.inc();
      return this.least.pick(candidates);
    }
    let chosen: W;
    if (n === 1) {
      // Nothing to choose, but the tree learns where this prompt went.
      this.only.inc();
      chosen = candidates[0]!;
    } else chosen = this.decide(candidates, text);
    this.tree.insert(text, chosen);
    return chosen;
  }

  onWorkerRemoved(worker: W): void {
    this.tree.removeWorker(worker);
  }

  private decide(candidates: readonly W[], text: string): W {
    const tree = this.tree;
    tree.match(text);
    // The deepest node on the prompt's path that a candidate holds: when the workers holding the
    // whole match are not candidates (full, or gone), a shorter match may still be worth having.
    let node: TreeNode<W> = tree.matchedNode;
    let matched = tree.matchedChars;
    let holder: W | undefined;
    while (node !== tree.root) {
      holder = leastLoadedHolder(node, candidates);
      if (holder !== undefined) break;
      node = node.parent!;
      matched = node.depth;
    }
    const ratio = holder === undefined ? 0 : matched / text.length;
    this.observer.matchRatio(ratio);
    const o = this.options;
    if (holder !== undefined && ratio >= o.cacheThreshold) {
      if (
        !isOverloaded(holder.inflight, meanLoad(candidates), o.balanceAbsThreshold, o.balanceRelThreshold)
      ) {
        this.hit.inc();
        return holder;
      }
      this.overloaded.inc();
    } else this.miss.inc();
    return this.least.pick(candidates)!;
  }
}

function leastLoadedHolder<W extends RoutingCandidate>(
  node: TreeNode<W>,
  candidates: readonly W[],
): W | undefined {
  let best: W | undefined;
  for (const c of candidates) {
    if (node.heldBy(c) && (best === undefined || c.inflight < best.inflight)) best = c;
  }
  return best;
}
