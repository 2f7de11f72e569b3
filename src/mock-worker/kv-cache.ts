/**
 * The worker's KV cache, counted in blocks as vLLM's paged allocator counts it: capacity is
 * `totalBlocks` blocks of `blockSize` tokens, and a sequence holding `t` tokens (prompt plus output
 * so far) occupies ceil(t / blockSize) of them. SGLang allocates token by token, which is the same
 * model with a block size of 1.
 *
 * It only counts; the Batcher decides who waits and who is preempted when a sequence does not fit.
 */

export class KvCache {
  readonly totalBlocks: number;
  private readonly held = new Map<object, number>();
  private blocksInUse = 0;
  private tokensInUse = 0;

  constructor(
    /** Tokens the cache holds at most (rounded down to whole blocks). */
    capacityTokens: number,
    readonly blockSize: number,
  ) {
    if (!Number.isInteger(blockSize) || blockSize < 1) {
      throw new RangeError(`blockSize must be a positive integer, got ${blockSize}`);
    }
    this.totalBlocks = Math.floor(capacityTokens / blockSize);
  }

  /** Tokens the cache can hold: whole blocks only. */
  get capacityTokens(): number {
    return this.totalBlocks * this.blockSize;
  }

  get usedBlocks(): number {
    return this.blocksInUse;
  }

  /** Tokens held by sequences (a partly filled block counts only its tokens). */
  get usedTokens(): number {
    return this.tokensInUse;
  }

  /** Fraction of blocks in use, 0..1 (vLLM's kv_cache_usage_perc; SGLang's token_usage with blocks of 1). */
  get usage(): number {
    return this.totalBlocks === 0 ? 0 : this.blocksInUse / this.totalBlocks;
  }

  blocksFor(tokens: number): number {
    return Math.ceil(tokens / this.blockSize);
  }

  /** Whether `owner` can hold `tokens` in all (growing from what it holds now). */
  fits(owner: object, tokens: number): boolean {
    const now = this.held.get(owner) ?? 0;
    return this.blocksFor(tokens) - this.blocksFor(now) <= this.totalBlocks - this.blocksInUse;
  }

  /** Sets what `owner` holds to `tokens`; the caller has checked that it fits. */
  hold(owner: object, tokens: number): void {
    const now = this.held.get(owner) ?? 0;
    this.blocksInUse += this.blocksFor(tokens) - this.blocksFor(now);
    this.tokensInUse += tokens - now;
    this.held.set(owner, tokens);
  }

  /** Frees everything `owner` holds (finished, aborted or preempted). */
  release(owner: object): void {
    const now = this.held.get(owner);
    if (now === undefined) return;
    this.blocksInUse -= this.blocksFor(now);
    this.tokensInUse -= now;
    this.held.delete(owner);
  }
}
