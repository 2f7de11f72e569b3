/**
 * The OpenTelemetry GenAI semantic conventions sluice follows (docs/genai-telemetry.md): attribute
 * and metric names, the operation each route is, the provider name of a worker, the advised
 * histogram buckets, and what OTEL_SEMCONV_STABILITY_OPT_IN changes. The names come from the
 * conventions package's incubating entry point, so a renamed attribute fails the typecheck here.
 */
import {
  ATTR_GEN_AI_OPERATION_NAME,
  ATTR_GEN_AI_PROVIDER_NAME,
  ATTR_GEN_AI_REQUEST_MAX_TOKENS,
  ATTR_GEN_AI_REQUEST_MODEL,
  ATTR_GEN_AI_RESPONSE_FINISH_REASONS,
  ATTR_GEN_AI_RESPONSE_MODEL,
  ATTR_GEN_AI_SYSTEM,
  ATTR_GEN_AI_TOKEN_TYPE,
  ATTR_GEN_AI_USAGE_INPUT_TOKENS,
  ATTR_GEN_AI_USAGE_OUTPUT_TOKENS,
  GEN_AI_OPERATION_NAME_VALUE_CHAT,
  GEN_AI_OPERATION_NAME_VALUE_EMBEDDINGS,
  GEN_AI_OPERATION_NAME_VALUE_TEXT_COMPLETION,
  GEN_AI_TOKEN_TYPE_VALUE_INPUT,
  GEN_AI_TOKEN_TYPE_VALUE_OUTPUT,
  METRIC_GEN_AI_CLIENT_TOKEN_USAGE,
  METRIC_GEN_AI_SERVER_REQUEST_DURATION,
  METRIC_GEN_AI_SERVER_TIME_PER_OUTPUT_TOKEN,
  METRIC_GEN_AI_SERVER_TIME_TO_FIRST_TOKEN,
} from "@opentelemetry/semantic-conventions/incubating";

export {
  ATTR_GEN_AI_OPERATION_NAME,
  ATTR_GEN_AI_PROVIDER_NAME,
  ATTR_GEN_AI_REQUEST_MAX_TOKENS,
  ATTR_GEN_AI_REQUEST_MODEL,
  ATTR_GEN_AI_RESPONSE_FINISH_REASONS,
  ATTR_GEN_AI_RESPONSE_MODEL,
  ATTR_GEN_AI_SYSTEM,
  ATTR_GEN_AI_TOKEN_TYPE,
  ATTR_GEN_AI_USAGE_INPUT_TOKENS,
  ATTR_GEN_AI_USAGE_OUTPUT_TOKENS,
  GEN_AI_TOKEN_TYPE_VALUE_INPUT,
  GEN_AI_TOKEN_TYPE_VALUE_OUTPUT,
  METRIC_GEN_AI_CLIENT_TOKEN_USAGE,
  METRIC_GEN_AI_SERVER_REQUEST_DURATION,
  METRIC_GEN_AI_SERVER_TIME_PER_OUTPUT_TOKEN,
  METRIC_GEN_AI_SERVER_TIME_TO_FIRST_TOKEN,
};

/** sluice's own histogram beside the GenAI ones: the admission wait, by class and pool. */
export const METRIC_SLUICE_QUEUE_WAIT = "sluice.queue.wait";

export type GenAiOperation =
  | typeof GEN_AI_OPERATION_NAME_VALUE_CHAT
  | typeof GEN_AI_OPERATION_NAME_VALUE_TEXT_COMPLETION
  | typeof GEN_AI_OPERATION_NAME_VALUE_EMBEDDINGS;

/**
 * The GenAI operation a route is, by its last segments (a `/v1` or any other prefix is allowed);
 * undefined for a route that is no inference call the conventions name (scores, tokenizers, ...).
 * SGLang's native `/generate` is a text completion.
 */
export function operationOf(route: string): GenAiOperation | undefined {
  if (route.endsWith("/chat/completions")) return GEN_AI_OPERATION_NAME_VALUE_CHAT;
  if (route.endsWith("/completions") || route.endsWith("/generate"))
    return GEN_AI_OPERATION_NAME_VALUE_TEXT_COMPLETION;
  if (route.endsWith("/embeddings")) return GEN_AI_OPERATION_NAME_VALUE_EMBEDDINGS;
  return undefined;
}

/**
 * `gen_ai.provider.name` of a worker whose engine its probes did not reveal: an OpenAI-compatible
 * server of unknown make. The conventions let instrumentation name providers outside their list.
 */
export const PROVIDER_UNKNOWN = "openai_compatible";

/** Engines whose own name is the provider name; any other (or none known) is PROVIDER_UNKNOWN. */
const NAMED_ENGINES = new Set(["vllm", "sglang"]);

/**
 * `gen_ai.provider.name` for a worker's engine as the gateway recognised it. A generic
 * OpenAI-compatible server is not `openai` (that value means OpenAI's own service).
 */
export function providerOf(engine: string | undefined): string {
  return engine !== undefined && NAMED_ENGINES.has(engine) ? engine : PROVIDER_UNKNOWN;
}

/** The span name the conventions give an inference call: `{operation} {model}`, or the operation alone. */
export function genAiSpanName(operation: GenAiOperation, model: string | undefined): string {
  return model === undefined ? operation : `${operation} ${model}`;
}

/**
 * The conventions' advised explicit bucket boundaries. Durations in seconds: the request's whole
 * duration, the time to the first token, the time per output token after it; and token counts.
 */
export const DURATION_BUCKETS = [
  0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92,
];
export const TIME_TO_FIRST_TOKEN_BUCKETS = [
  0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
];
export const TIME_PER_OUTPUT_TOKEN_BUCKETS = [
  0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5,
];
export const TOKEN_BUCKETS = [
  1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864,
];
/** sluice's queue wait: from a fast admission (well under a millisecond) to a long queue timeout. */
export const QUEUE_WAIT_BUCKETS = [
  0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120,
];

/** The opt-in value that asks GenAI instrumentation for the latest experimental conventions only. */
export const GEN_AI_LATEST_EXPERIMENTAL = "gen_ai_latest_experimental";

/**
 * Whether OTEL_SEMCONV_STABILITY_OPT_IN (a comma-separated list) holds `gen_ai_latest_experimental`.
 * With it, sluice emits the latest names only; without it, it also sets the name the conventions
 * up to 1.36 used for the provider (`gen_ai.system`), so dashboards built on it keep matching.
 */
export function latestGenAiOnly(optIn: string | undefined): boolean {
  if (optIn === undefined) return false;
  return optIn.split(",").some((v) => v.trim().toLowerCase() === GEN_AI_LATEST_EXPERIMENTAL);
}
