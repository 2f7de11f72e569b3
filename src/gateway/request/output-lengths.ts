/**
 * The gateway's output-length predictor: the pure one (accounting/output-prediction.ts) on the
 * process's monotonic clock, plus what a budget reserves for the output of a request that sets no
 * output limit (`max_tokens`, `max_completion_tokens`, `sampling_params.max_new_tokens`). Counting
 * 0 for it let any number of concurrent requests in on the last few tokens of a hard budget; the
 * reservation is the prediction, in the order docs/tenants.md ("Token accounting") gives: tenant,
 * model, `default_output_tokens`, the model's context less the prompt.
 *
 * Each replica learns from its own answers.
 */
import { type OutputPrediction, OutputPredictor } from "../../accounting/output-prediction.js";

export { MAX_AGE_MS, MAX_KEYS, MIN_SAMPLES, WINDOW } from "../../accounting/output-prediction.js";

export class OutputLengths extends OutputPredictor {
  constructor(now: () => number = () => performance.now()) {
    super(now);
  }

  /**
   * The output tokens to reserve for one answer of a request without a limit. `contextTokens`: what
   * the model's context leaves after the prompt (the last resort).
   */
  reservation(
    tenant: string,
    model: string | undefined,
    defaultOutputTokens: number | undefined,
    contextTokens: number,
  ): Pick<OutputPrediction, "tokens" | "source"> {
    const { tokens, source } = this.uncapped(tenant, model, defaultOutputTokens, contextTokens);
    return { tokens, source };
  }
}
