/**
 * `sluice_output_prediction_error_ratio{pool,source}`: how far each answer's output-length
 * prediction was from the answer, |predicted − actual| / actual per choice (docs/output-prediction.md).
 * Answers that stopped at their own max_tokens, and answers without output, are not observed: their
 * true length is unknown or the ratio undefined.
 */
import { Histogram, type Registry } from "prom-client";
import type { PredictionSource } from "../accounting/output-prediction.js";

export const OUTPUT_PREDICTION_ERROR_METRIC = "sluice_output_prediction_error_ratio";

/**
 * Buckets of the error ratio: within 5 %, 10 %, 25 %, 50 %, off by the answer itself (1), twice,
 * four times, ten times (a high quantile over short answers is often several times the answer).
 */
const ERROR_RATIO_BUCKETS: readonly number[] = Object.freeze([0.05, 0.1, 0.25, 0.5, 1, 2, 4, 10]);

export interface PredictionErrorObserver {
  observe(pool: string, source: PredictionSource, ratio: number): void;
}

export function registerOutputPredictionMetrics(registry: Registry): PredictionErrorObserver {
  const histogram = new Histogram({
    name: OUTPUT_PREDICTION_ERROR_METRIC,
    help: "Output-length prediction error per answer, |predicted - actual| / actual output tokens per choice, by model pool and the prediction's source (tenant, model, default, context, max_tokens); answers that stopped at their max_tokens are left out.",
    labelNames: ["pool", "source"] as const,
    buckets: [...ERROR_RATIO_BUCKETS],
    registers: [registry],
  });
  return {
    observe(pool, source, ratio) {
      histogram.observe({ pool, source }, ratio);
    },
  };
}
