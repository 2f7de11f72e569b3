/**
 * GenAI metrics over OTLP/HTTP (docs/genai-telemetry.md): the conventions' server histograms
 * (request duration, time to first token, time per output token), token usage, and sluice's own
 * queue wait, exported as OTLP JSON to `<endpoint>/v1/metrics` every OTEL_METRIC_EXPORT_INTERVAL ms
 * (60 s by default) and once more at shutdown. A meter provider of its own, never the global one.
 *
 * The gateway imports this module only when metrics export is on (`--otlp-endpoint` set and
 * `--otlp-metrics on`): with it off, the metrics SDK is never loaded.
 */
import type { Attributes, Histogram } from "@opentelemetry/api";
import { OTLPMetricExporter } from "@opentelemetry/exporter-metrics-otlp-http";
import type { Resource } from "@opentelemetry/resources";
import { MeterProvider, PeriodicExportingMetricReader } from "@opentelemetry/sdk-metrics";
import {
  ATTR_ADMISSION,
  ATTR_CLASS_EFFECTIVE,
  ATTR_ERROR_TYPE,
  ATTR_POOL,
  ATTR_SERVER_ADDRESS,
  ATTR_SERVER_PORT,
} from "./attributes.js";
import { metricsUrl } from "./endpoint.js";
import {
  ATTR_GEN_AI_OPERATION_NAME,
  ATTR_GEN_AI_PROVIDER_NAME,
  ATTR_GEN_AI_REQUEST_MODEL,
  ATTR_GEN_AI_RESPONSE_MODEL,
  ATTR_GEN_AI_SYSTEM,
  ATTR_GEN_AI_TOKEN_TYPE,
  DURATION_BUCKETS,
  GEN_AI_TOKEN_TYPE_VALUE_INPUT,
  GEN_AI_TOKEN_TYPE_VALUE_OUTPUT,
  METRIC_GEN_AI_CLIENT_TOKEN_USAGE,
  METRIC_GEN_AI_SERVER_REQUEST_DURATION,
  METRIC_GEN_AI_SERVER_TIME_PER_OUTPUT_TOKEN,
  METRIC_GEN_AI_SERVER_TIME_TO_FIRST_TOKEN,
  METRIC_SLUICE_QUEUE_WAIT,
  QUEUE_WAIT_BUCKETS,
  TIME_PER_OUTPUT_TOKEN_BUCKETS,
  TIME_TO_FIRST_TOKEN_BUCKETS,
  TOKEN_BUCKETS,
} from "./genai-attributes.js";
import type { FinishedCall, FinishedCallSink } from "./genai-call.js";

const DEFAULT_EXPORT_INTERVAL_MS = 60_000;
const DEFAULT_EXPORT_TIMEOUT_MS = 30_000;

/** A positive integer of milliseconds from the environment, else the default (the SDK's variables). */
function envMs(name: string, fallback: number): number {
  const raw = process.env[name];
  if (raw === undefined || raw.trim() === "") return fallback;
  const ms = Number(raw);
  return Number.isInteger(ms) && ms > 0 ? ms : fallback;
}

export interface GenAiMetricsOptions {
  /** The collector's OTLP/HTTP base URL. */
  readonly endpoint: string;
  readonly resource: Resource;
  /** OTEL_SEMCONV_STABILITY_OPT_IN holds gen_ai_latest_experimental: no `gen_ai.system`. */
  readonly latestGenAiOnly: boolean;
}

export class GenAiMetrics implements FinishedCallSink {
  readonly url: string;
  private readonly provider: MeterProvider;
  private readonly duration: Histogram;
  private readonly firstToken: Histogram;
  private readonly perOutputToken: Histogram;
  private readonly tokens: Histogram;
  private readonly queueWait: Histogram;
  private readonly latestOnly: boolean;
  private closing: Promise<void> | undefined;

  constructor(options: GenAiMetricsOptions) {
    this.url = metricsUrl(options.endpoint);
    this.latestOnly = options.latestGenAiOnly;
    const interval = envMs("OTEL_METRIC_EXPORT_INTERVAL", DEFAULT_EXPORT_INTERVAL_MS);
    const reader = new PeriodicExportingMetricReader({
      exporter: new OTLPMetricExporter({ url: this.url }),
      exportIntervalMillis: interval,
      exportTimeoutMillis: Math.min(envMs("OTEL_METRIC_EXPORT_TIMEOUT", DEFAULT_EXPORT_TIMEOUT_MS), interval),
    });
    this.provider = new MeterProvider({ resource: options.resource, readers: [reader] });
    const meter = this.provider.getMeter("sluice");
    const seconds = (name: string, description: string, buckets: number[]) =>
      meter.createHistogram(name, { unit: "s", description, advice: { explicitBucketBoundaries: buckets } });
    this.duration = seconds(
      METRIC_GEN_AI_SERVER_REQUEST_DURATION,
      "Generative AI server request duration: arrival at the gateway to the answer's last byte",
      DURATION_BUCKETS,
    );
    this.firstToken = seconds(
      METRIC_GEN_AI_SERVER_TIME_TO_FIRST_TOKEN,
      "Time to the first token of successful streamed answers, queue wait included",
      TIME_TO_FIRST_TOKEN_BUCKETS,
    );
    this.perOutputToken = seconds(
      METRIC_GEN_AI_SERVER_TIME_PER_OUTPUT_TOKEN,
      "Time per output token after the first, of successful streamed answers",
      TIME_PER_OUTPUT_TOKEN_BUCKETS,
    );
    this.tokens = meter.createHistogram(METRIC_GEN_AI_CLIENT_TOKEN_USAGE, {
      unit: "{token}",
      description: "Input and output tokens the workers reported",
      advice: { explicitBucketBoundaries: TOKEN_BUCKETS },
    });
    this.queueWait = seconds(
      METRIC_SLUICE_QUEUE_WAIT,
      "Time a request waited for an admission slot, by priority class and model pool",
      QUEUE_WAIT_BUCKETS,
    );
  }

  record(call: FinishedCall): void {
    if (call.queueWaitS !== undefined) {
      const attributes: Attributes = { [ATTR_ADMISSION]: call.admission };
      if (call.effectiveClass !== undefined) attributes[ATTR_CLASS_EFFECTIVE] = call.effectiveClass;
      if (call.pool !== undefined) attributes[ATTR_POOL] = call.pool;
      this.queueWait.record(call.queueWaitS, attributes);
    }
    if (call.operation === undefined) return;
    const attributes: Attributes = {
      [ATTR_GEN_AI_OPERATION_NAME]: call.operation,
      [ATTR_GEN_AI_PROVIDER_NAME]: call.provider,
    };
    if (!this.latestOnly) attributes[ATTR_GEN_AI_SYSTEM] = call.provider;
    if (call.requestModel !== undefined) attributes[ATTR_GEN_AI_REQUEST_MODEL] = call.requestModel;
    if (call.responseModel !== undefined) attributes[ATTR_GEN_AI_RESPONSE_MODEL] = call.responseModel;
    if (call.serverAddress !== undefined) attributes[ATTR_SERVER_ADDRESS] = call.serverAddress;
    if (call.serverPort !== undefined) attributes[ATTR_SERVER_PORT] = call.serverPort;
    // The token histogram has no error.type: it counts what was used, whatever the ending.
    if (call.inputTokens !== undefined)
      this.tokens.record(call.inputTokens, {
        ...attributes,
        [ATTR_GEN_AI_TOKEN_TYPE]: GEN_AI_TOKEN_TYPE_VALUE_INPUT,
      });
    if (call.outputTokens !== undefined)
      this.tokens.record(call.outputTokens, {
        ...attributes,
        [ATTR_GEN_AI_TOKEN_TYPE]: GEN_AI_TOKEN_TYPE_VALUE_OUTPUT,
      });
    if (call.timeToFirstTokenS !== undefined) this.firstToken.record(call.timeToFirstTokenS, attributes);
    if (call.timePerOutputTokenS !== undefined)
      this.perOutputToken.record(call.timePerOutputTokenS, attributes);
    if (call.errorType !== undefined) attributes[ATTR_ERROR_TYPE] = call.errorType;
    this.duration.record(call.durationS, attributes);
  }

  /** Exports what was recorded since the last export, then stops; later calls wait for the same. */
  shutdown(): Promise<void> {
    this.closing ??= this.provider.shutdown();
    return this.closing;
  }
}
