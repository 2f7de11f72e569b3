/**
 * The work this gateway has outstanding on each worker, in tokens: the prompt and the predicted
 * output (accounting/output-prediction.ts) of every request dispatched to it and not yet back. In
 * flight counts treat a 10-token answer and a 4000-token one alike; a worker's decode time goes by
 * the tokens, so this is the load `least_tokens` balances. Keyed by worker URL; an entry leaves at 0.
 */
export class OutstandingWork {
  private readonly tokens = new Map<string, number>();

  /** A request of `tokens` went to the worker at `url`. */
  add(url: string, tokens: number): void {
    if (!(tokens > 0) || !Number.isFinite(tokens)) return;
    this.tokens.set(url, (this.tokens.get(url) ?? 0) + tokens);
  }

  /** The request left the worker (answered, failed, retried elsewhere): its `tokens` come off. */
  remove(url: string, tokens: number): void {
    if (!(tokens > 0) || !Number.isFinite(tokens)) return;
    const left = (this.tokens.get(url) ?? 0) - tokens;
    // Floating sums of whole tokens are exact; below 1 is nothing left.
    if (left < 1) this.tokens.delete(url);
    else this.tokens.set(url, left);
  }

  /** Tokens outstanding on the worker at `url` (0 when none). */
  of(url: string): number {
    return this.tokens.get(url) ?? 0;
  }

  /** Workers with work outstanding (tests, status). */
  get size(): number {
    return this.tokens.size;
  }
}
