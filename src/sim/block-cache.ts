/**
 * A worker's prefix cache by block ids, as vLLM's automatic prefix caching (on by default in V1)
 * and SGLang's radix cache keep it: a prompt is a run of blocks, each named by an id that stands
 * for the whole prefix up to its end (Mooncake's `hash_ids`), so a request's cached prefix is its
 * leading blocks found in the cache. A block is found while a running request holds it (shared,
 * as vLLM shares blocks by reference count) and, once none does, while it stays in the KV memory
 * the running requests leave free: those free blocks go least recently used first when the
 * running requests need the room (evictTo).
 */
export class BlockCache {
  /** Block id -> its tokens and how many running requests hold it. */
  private readonly blocks = new Map<number, { tokens: number; refs: number }>();
  /** Blocks no request holds, least recently used first (a Map iterates in insertion order). */
  private readonly free = new Map<number, number>();
  /** Tokens of the free blocks (those that take KV memory of their own). */
  tokens = 0;
  evicted = 0;

  /** Tokens of the leading blocks of `ids` found (free ones found are refreshed). */
  match(ids: readonly number[], blockTokens: number): number {
    let hit = 0;
    for (const id of ids) {
      const b = this.blocks.get(id);
      if (b === undefined) break;
      if (b.refs === 0) {
        this.free.delete(id);
        this.free.set(id, b.tokens);
      }
      hit += b.tokens;
    }
    return Math.min(hit, ids.length * blockTokens);
  }

  /** A request whose prefill is done holds its prompt's full blocks (returns how many). */
  acquire(ids: readonly number[], blockTokens: number, promptTokens: number): number {
    const full = Math.min(ids.length, Math.floor(promptTokens / blockTokens));
    for (let i = 0; i < full; i++) {
      const id = ids[i]!;
      const b = this.blocks.get(id);
      if (b === undefined) this.blocks.set(id, { tokens: blockTokens, refs: 1 });
      else {
        if (b.refs === 0) {
          this.free.delete(id);
          this.tokens -= b.tokens;
        }
        b.refs++;
      }
    }
    return full;
  }

  /** The request left the worker: its first `count` blocks stay cached while free memory allows. */
  release(ids: readonly number[], count: number): void {
    for (let i = 0; i < count; i++) {
      const id = ids[i]!;
      const b = this.blocks.get(id);
      if (b === undefined || b.refs === 0) continue;
      if (--b.refs === 0) {
        this.free.set(id, b.tokens);
        this.tokens += b.tokens;
      }
    }
  }

  /** Evicts free blocks, least recently used first, until they hold at most `limit` tokens. */
  evictTo(limit: number): void {
    if (this.tokens <= limit) return;
    for (const [id, t] of this.free) {
      if (this.tokens <= limit) break;
      this.free.delete(id);
      this.blocks.delete(id);
      this.tokens -= t;
      this.evicted++;
    }
  }

  clear(): void {
    this.blocks.clear();
    this.free.clear();
    this.tokens = 0;
  }
}
