/**
 * Tracing on: a tracer provider of its own (never registered as the global one, so an embedding
 * application's OpenTelemetry setup is left alone) that batches spans and posts them as OTLP/HTTP
 * JSON to `<endpoint>/v1/traces`. The service name is `sluice` unless OTEL_SERVICE_NAME (or
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
import { RequestSpans } from "./request-spans.js";

const DEFAULT_SERVICE_NAME = "sluice";
interface TracingOptions {
  /** The collector's OTLP/HTTP base URL, e.g. http://collector:4318. */
  endpoint: string;
}

/** The gateway's tracing: one span set per request, and the flush at close. */
export class GatewayTracing {
  readonly url: string;
  private readonly provider: BasicTracerProvider;
  private readonly tracer: Tracer;
  private closing: Promise<void> | undefined;

  constructor(options: TracingOptions) {
    this.url = tracesUrl(options.endpoint);
    // The environment's resource attributes (OTEL_SERVICE_NAME first) win over the default name.
    const resource = resourceFromAttributes({ [ATTR_SERVICE_NAME]: DEFAULT_SERVICE_NAME }).merge(
      detectResources({ detectors: [envDetector] }),
    );
    this.provider = new BasicTracerProvider({
      resource,
      spanProcessors: [new BatchSpanProcessor(new OTLPTraceExporter({ url: this.url }))],
    });
    this.tracer = this.provider.getTracer("sluice");
  }

  /** The spans of a request that just arrived (its parent: the client's traceparent, if any). */
  startRequest(req: IncomingMessage, requestId: string): RequestSpans {
    return new RequestSpans(this.tracer, req, requestId);
  }

  /** Exports every span still batched, then stops; later calls wait for the same shutdown. */
  shutdown(): Promise<void> {
    this.closing ??= this.provider.shutdown();
    return this.closing;
  }
}
