/**
 * A real OTLP/HTTP receiver on loopback for the tracing tests: it decodes the JSON the exporters
 * post to /v1/traces and /v1/metrics, keeps every raw payload (to search for what must never be
 * exported), and answers 200.
 */
import assert from "node:assert/strict";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import type { TestContext } from "node:test";

export type AnyValue = {
  stringValue?: string;
  intValue?: number | string;
  boolValue?: boolean;
  doubleValue?: number;
  arrayValue?: { values?: AnyValue[] };
};

type KeyValues = Array<{ key: string; value: AnyValue }>;

interface OtlpSpan {
  traceId: string;
  spanId: string;
  parentSpanId?: string;
  name: string;
  kind: number;
  attributes?: KeyValues;
  status?: { code?: number; message?: string };
}

interface OtlpTraces {
  resourceSpans: Array<{ resource?: { attributes?: KeyValues }; scopeSpans: Array<{ spans: OtlpSpan[] }> }>;
}

interface OtlpHistogramPoint {
  attributes?: KeyValues;
  count: number | string;
  sum?: number;
  bucketCounts?: Array<number | string>;
  explicitBounds?: number[];
}

interface OtlpMetrics {
  resourceMetrics: Array<{
    resource?: { attributes?: KeyValues };
    scopeMetrics: Array<{
      metrics: Array<{ name: string; unit?: string; histogram?: { dataPoints: OtlpHistogramPoint[] } }>;
    }>;
  }>;
}

export type Plain = string | number | boolean | Plain[] | undefined;

/** A span as the tests read it: ids in hex, attributes as plain values. */
export interface Received {
  traceId: string;
  spanId: string;
  parentSpanId: string | undefined;
  name: string;
  kind: number;
  attrs: Record<string, Plain>;
  /** Each attribute's OTLP value type (stringValue, intValue, arrayValue, ...). */
  types: Record<string, string>;
  statusCode: number;
  serviceName: string | undefined;
}

/** One histogram data point as the tests read it. */
export interface HistogramPoint {
  metric: string;
  unit: string | undefined;
  attrs: Record<string, Plain>;
  types: Record<string, string>;
  count: number;
  sum: number | undefined;
  bounds: number[];
  serviceName: string | undefined;
}

// OTLP's SpanKind and StatusCode numbers.
export const KIND_INTERNAL = 1;
export const KIND_SERVER = 2;
export const KIND_CLIENT = 3;
export const STATUS_ERROR = 2;

export function plain(value: AnyValue): Plain {
  if (value.stringValue !== undefined) return value.stringValue;
  if (value.intValue !== undefined) return Number(value.intValue);
  if (value.doubleValue !== undefined) return value.doubleValue;
  if (value.arrayValue !== undefined) return (value.arrayValue.values ?? []).map(plain);
  return value.boolValue;
}

function read(attributes: KeyValues | undefined): {
  attrs: Record<string, Plain>;
  types: Record<string, string>;
} {
  const attrs: Record<string, Plain> = {};
  const types: Record<string, string> = {};
  for (const a of attributes ?? []) {
    attrs[a.key] = plain(a.value);
    types[a.key] = Object.keys(a.value)[0] ?? "";
  }
  return { attrs, types };
}

function serviceOf(attributes: KeyValues | undefined): string | undefined {
  const service = attributes?.find((a) => a.key === "service.name");
  return service === undefined ? undefined : (plain(service.value) as string);
}

export interface Receiver {
  readonly endpoint: string;
  readonly spans: Received[];
  readonly points: HistogramPoint[];
  /** Every body posted, as text. */
  readonly payloads: string[];
  /** POSTs received, whatever their path. */
  readonly posts: number;
  readonly paths: string[];
}

export async function startReceiver(t: TestContext): Promise<Receiver> {
  const spans: Received[] = [];
  const points: HistogramPoint[] = [];
  const payloads: string[] = [];
  const paths: string[] = [];
  let posts = 0;
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      posts++;
      paths.push(req.url ?? "");
      assert.equal(req.method, "POST");
      assert.match(String(req.headers["content-type"]), /application\/json/);
      const text = Buffer.concat(chunks).toString("utf8");
      payloads.push(text);
      if (req.url === "/v1/metrics") {
        const doc = JSON.parse(text) as OtlpMetrics;
        for (const rm of doc.resourceMetrics) {
          const serviceName = serviceOf(rm.resource?.attributes);
          for (const sm of rm.scopeMetrics) {
            for (const m of sm.metrics) {
              for (const p of m.histogram?.dataPoints ?? []) {
                points.push({
                  metric: m.name,
                  unit: m.unit,
                  ...read(p.attributes),
                  count: Number(p.count),
                  sum: p.sum,
                  bounds: p.explicitBounds ?? [],
                  serviceName,
                });
              }
            }
          }
        }
      } else {
        const doc = JSON.parse(text) as OtlpTraces;
        for (const rs of doc.resourceSpans) {
          const serviceName = serviceOf(rs.resource?.attributes);
          for (const ss of rs.scopeSpans) {
            for (const s of ss.spans) {
              spans.push({
                traceId: s.traceId,
                spanId: s.spanId,
                parentSpanId: s.parentSpanId === "" ? undefined : s.parentSpanId,
                name: s.name,
                kind: s.kind,
                ...read(s.attributes),
                statusCode: s.status?.code ?? 0,
                serviceName,
              });
            }
          }
        }
      }
      res.writeHead(200, { "content-type": "application/json" }).end("{}");
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  t.after(() => new Promise<void>((resolve) => server.close(() => resolve())));
  const port = (server.address() as AddressInfo).port;
  return {
    endpoint: `http://127.0.0.1:${port}`,
    spans,
    points,
    payloads,
    get posts() {
      return posts;
    },
    paths,
  };
}
