/**
 * Tracing on: a tracer provider of its own (never registered as the global one, so an embedding
 * application's OpenTelemetry setup is left alone) that batches spans and posts them as OTLP/HTTP
 * JSON to `<endpoint>/v1/traces`; and, unless turned off, GenAI metrics to `<endpoint>/v1/metrics`
 * (genai-metrics.ts, loaded only then). The service name is `sluice` unless OTEL_SERVICE_NAME (or
 * OTEL_RESOURCE_ATTRIBUTES) says otherwise, as the SDK reads them.
 *
 * The gateway imports this module only when `--otlp-endpoint` is set.
 */
import type { IncomingMessage } from "node:http";
import type { Tracer } from "@opentelemetry/api";
import { OTLPTraceExporter } from "@opentelemetry/exporter-trace-otlp-http";
import { detectResources, envDetector, resourceFromAttributes } from "@opentelemetry/resources";
import { BasicTracerProvider, BatchSpanProcessor } from "@opentelemetry/sdk-trace-base";
import { ATTR_SERVICE_NAME } from "@opentelemetry/semantic-conventions";
import { tracesUrl } from "./endpoint.js";
import { latestGenAiOnly } from "./genai-attributes.js";
import type { GenAiMetrics } from "./genai-metrics.js";
import { RequestSpans, type RequestSpansOptions } from "./request-spans.js";

const DEFAULT_SERVICE_NAME = "sluice";
interface TracingOptions {
  /** The collector's OTLP/HTTP base URL, e.g. http://collector:4318. */
  endpoint: string;
  /** GenAI metrics to `<endpoint>/v1/metrics` too (`--otlp-metrics`, on unless turned off). */
  metrics?: boolean | undefined;
}

/** The gateway's tracing: one span set per request, the GenAI metrics, and the flush at close. */
export class GatewayTracing {
  readonly url: string;
  private readonly provider: BasicTracerProvider;
  private readonly tracer: Tracer;
  private readonly spansOptions: RequestSpansOptions;
  private closing: Promise<void> | undefined;

  private constructor(
    options: TracingOptions,
    /** GenAI metrics, when on. */
    readonly metrics: GenAiMetrics | undefined,
    resource: ReturnType<typeof resourceFromAttributes>,
    latestOnly: boolean,
  ) {
    this.url = tracesUrl(options.endpoint);
    this.provider = new BasicTracerProvider({
      resource,
      spanProcessors: [new BatchSpanProcessor(new OTLPTraceExporter({ url: this.url }))],
    });
    this.tracer = this.provider.getTracer("sluice");
    this.spansOptions = { latestGenAiOnly: latestOnly, metrics };
  }

  /** Starts tracing, and GenAI metrics unless `metrics` is false (their SDK is imported only then). */
  static async start(options: TracingOptions): Promise<GatewayTracing> {
    // The environment's resource attributes (OTEL_SERVICE_NAME first) win over the default name.
    const resource = resourceFromAttributes({ [ATTR_SERVICE_NAME]: DEFAULT_SERVICE_NAME }).merge(
      detectResources({ detectors: [envDetector] }),
    );
    const latestOnly = latestGenAiOnly(process.env.OTEL_SEMCONV_STABILITY_OPT_IN);
    const metrics =
      options.metrics === false
        ? undefined
        : new (await import("./genai-metrics.js")).GenAiMetrics({
            endpoint: options.endpoint,
            resource,
            latestGenAiOnly: latestOnly,
          });
    return new GatewayTracing(options, metrics, resource, latestOnly);
  }

  /** The spans of a request that just arrived (its parent: the client's traceparent, if any). */
  startRequest(req: IncomingMessage, requestId: string): RequestSpans {
    return new RequestSpans(this.tracer, req, requestId, this.spansOptions);
  }

  /** Exports every span and metric still held, then stops; later calls wait for the same shutdown. */
  shutdown(): Promise<void> {
    this.closing ??= Promise.all([this.provider.shutdown(), this.metrics?.shutdown()]).then(() => undefined);
    return this.closing;
  }
}
