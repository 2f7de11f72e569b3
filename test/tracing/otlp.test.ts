/**
 * OpenTelemetry tracing (docs/tracing.md) against a real OTLP/HTTP receiver on loopback: the spans a
 * request makes, their parents and attributes, the traceparent the worker receives, a rejected
 * request's span, and tracing off (the worker sees the client's traceparent as sent, nothing is
 * exported, and the request path never calls into the tracing code).
 */
import assert from "node:assert/strict";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { describe, type TestContext, test } from "node:test";
import { parseGatewayArgs } from "../../src/cli/flags.js";
import type {
  RoutingCandidate,
  RoutingPolicy,
  RoutingPolicyFactory,
} from "../../src/contracts/routing-policy.js";
import { otlpEndpointProblem, tracesUrl } from "../../src/tracing/endpoint.js";
import { RequestSpans } from "../../src/tracing/request-spans.js";
import { schedulerDoc, startFleet, writeTempFile } from "../helpers/harness.js";
import {
  KIND_CLIENT,
  KIND_INTERNAL,
  KIND_SERVER,
  type Received,
  STATUS_ERROR,
  startReceiver,
} from "./otlp-receiver.js";

/** A client's own trace context. */
const CLIENT_TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736";
const CLIENT_SPAN_ID = "00f067aa0ba902b7";
const CLIENT_TRACEPARENT = `00-${CLIENT_TRACE_ID}-${CLIENT_SPAN_ID}-01`;
const CLIENT_TRACESTATE = "vendor=abc";

function parseTraceparent(value: unknown): { traceId: string; parentId: string; flags: string } {
  assert.equal(typeof value, "string", `a traceparent header, got ${String(value)}`);
  const m = /^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/.exec(value as string);
  assert.ok(m, `a W3C traceparent, got ${String(value)}`);
  return { traceId: m[1]!, parentId: m[2]!, flags: m[3]! };
}

function one(spans: Received[], name: string, where: (s: Received) => boolean = () => true): Received {
  const found = spans.filter((s) => s.name === name && where(s));
  assert.equal(
    found.length,
    1,
    `one ${name} span, got ${found.length}: ${JSON.stringify(spans.map((s) => s.name))}`,
  );
  return found[0]!;
}

/** Counts the calls into the request's span set (every method of RequestSpans), restored after. */
function countSpanCalls(t: TestContext): { readonly calls: number } {
  const proto = RequestSpans.prototype as unknown as Record<string, unknown>;
  let calls = 0;
  for (const name of Object.getOwnPropertyNames(proto)) {
    const original = proto[name];
    if (name === "constructor" || typeof original !== "function") continue;
    proto[name] = function (this: unknown, ...args: unknown[]) {
      calls++;
      return (original as (...a: unknown[]) => unknown).apply(this, args);
    };
    t.after(() => {
      proto[name] = original;
    });
  }
  return {
    get calls() {
      return calls;
    },
  };
}

/** A worker that is healthy and reports its model, but answers every request 503 (a retryable failure). */
async function unavailableWorker(
  t: TestContext,
): Promise<{ url: string; received(): number; lastTraceparent(): unknown }> {
  let received = 0;
  let traceparent: unknown;
  const server = createServer((req, res) => {
    req.resume();
    req.on("end", () => {
      const json = (status: number, body: unknown) =>
        res.writeHead(status, { "content-type": "application/json" }).end(JSON.stringify(body));
      if (req.method === "GET" && req.url === "/get_server_info")
        return json(200, { max_running_requests: 4 });
      if (req.method === "GET" && req.url === "/v1/models")
        return json(200, { object: "list", data: [{ id: "mock-llm", object: "model" }] });
      if (req.method === "GET") return json(req.url === "/health" ? 200 : 404, {});
      received++;
      traceparent = req.headers.traceparent;
      json(503, { error: { message: "busy", type: "server_error", code: null } });
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  t.after(
    () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  );
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    received: () => received,
    lastTraceparent: () => traceparent,
  };
}

/** A routing policy that tries the workers in this order (so the first attempt's worker is known). */
function preferring(order: string[]): RoutingPolicyFactory {
  return <W extends RoutingCandidate>(): RoutingPolicy<W> => ({
    name: "test_order",
    choose(candidates) {
      for (const url of order) {
        const w = candidates.find((c) => c.url === url);
        if (w !== undefined) return w;
      }
      return candidates[0];
    },
    onWorkerRemoved() {},
  });
}

describe("OpenTelemetry tracing", () => {
  test("a request's spans reach the receiver with their parents, attributes and the worker's traceparent", async (t) => {
    const receiver = await startReceiver(t);
    // The priority scheduler (a YAML of its own: without one the harness's capacity is too small for
    // the built-in reservations), so the request has classes.
    const fleet = await startFleet(t, {
      tenants: ["acme"],
      schedulerYaml: schedulerDoc(),
      gateway: { otlpEndpoint: receiver.endpoint },
    });

    const reply = await fleet.chatAs(
      "acme",
      { max_tokens: 5 },
      { traceparent: CLIENT_TRACEPARENT, tracestate: CLIENT_TRACESTATE, "x-smg-priority": "interactive" },
    );
    assert.equal(reply.status, 200, reply.text);
    const seenByWorker = fleet.workers[0]!.stats().lastRequestHeaders;
    assert.ok(seenByWorker, "the worker recorded the request's headers");
    // The flush at close sends what the batch holds.
    await fleet.gateway.close();

    assert.ok(receiver.posts >= 1, "spans were posted");
    assert.ok(
      receiver.paths.includes("/v1/traces") &&
        receiver.paths.every((p) => p === "/v1/traces" || p === "/v1/metrics"),
      `posted to /v1/traces (and metrics to /v1/metrics): ${receiver.paths}`,
    );
    const spans = receiver.spans;
    const request = one(spans, "sluice.request");
    assert.equal(request.kind, KIND_SERVER);
    assert.equal(request.serviceName, "sluice");
    // The client's traceparent is the parent.
    assert.equal(request.traceId, CLIENT_TRACE_ID);
    assert.equal(request.parentSpanId, CLIENT_SPAN_ID);
    assert.equal(request.attrs["sluice.tenant"], "auth:acme");
    assert.equal(request.attrs["sluice.admission"], "fast");
    assert.equal(request.attrs["sluice.outcome"], "ok");
    assert.equal(request.attrs["sluice.class.requested"], "interactive");
    assert.equal(typeof request.attrs["sluice.class.effective"], "string");
    assert.equal(request.attrs["sluice.error_code"], undefined);
    assert.equal(request.attrs["http.request.method"], "POST");
    assert.equal(request.attrs["http.route"], "/v1/chat/completions");
    assert.equal(request.attrs["http.response.status_code"], 200);
    assert.equal(request.attrs["sluice.worker"], fleet.workers[0]!.url);
    assert.equal(typeof request.attrs["sluice.pool"], "string");
    assert.equal(request.attrs["sluice.tokens.input"], 3);
    assert.equal(request.attrs["sluice.tokens.output"], 5);
    assert.equal(request.attrs["sluice.attempts"], 1);
    assert.equal(request.attrs["sluice.request_id"], reply.headers["x-request-id"]);

    // Children of the request span, in the same trace.
    const queue = one(spans, "sluice.queue");
    const upstream = one(spans, "chat mock-llm");
    const stream = one(spans, "sluice.stream");
    for (const child of [queue, upstream, stream]) {
      assert.equal(child.traceId, CLIENT_TRACE_ID, child.name);
      assert.equal(child.parentSpanId, request.spanId, `${child.name} is a child of the request span`);
    }
    assert.equal(queue.kind, KIND_INTERNAL);
    assert.equal(queue.attrs["sluice.admission"], "fast");
    assert.equal(upstream.kind, KIND_CLIENT);
    assert.equal(upstream.attrs["sluice.worker"], fleet.workers[0]!.url);
    assert.equal(upstream.attrs["sluice.attempt"], 1);
    assert.equal(upstream.attrs["http.response.status_code"], 200);
    assert.equal(upstream.attrs["url.full"], `${fleet.workers[0]!.url}/v1/chat/completions`);
    assert.equal(stream.kind, KIND_INTERNAL);
    assert.notEqual(stream.statusCode, STATUS_ERROR);

    // The worker's parent is the upstream attempt's span, not the client's.
    const sent = parseTraceparent(seenByWorker.traceparent);
    assert.equal(sent.traceId, CLIENT_TRACE_ID);
    assert.equal(sent.parentId, upstream.spanId);
    assert.equal(sent.flags, "01");
    assert.equal(
      seenByWorker.tracestate,
      CLIENT_TRACESTATE,
      "the client's tracestate travels with the trace",
    );
  });

  test("a retried request has one upstream span per attempt; the worker's parent is the last one", async (t) => {
    const receiver = await startReceiver(t);
    const busy = await unavailableWorker(t);
    const fleet = await startFleet(t, {
      extraWorkers: [{ url: busy.url }],
      gateway: {
        otlpEndpoint: receiver.endpoint,
        routingPolicy: preferring([busy.url]),
        maxRetries: 2,
      },
    });
    const reply = await fleet.chat({}, { traceparent: CLIENT_TRACEPARENT });
    assert.equal(reply.status, 200, reply.text);
    assert.equal(busy.received(), 1, "the first attempt went to the worker answering 503");
    const seenByWorker = fleet.workers[0]!.stats().lastRequestHeaders!;
    await fleet.gateway.close();

    const request = one(receiver.spans, "sluice.request");
    assert.equal(request.attrs["sluice.attempts"], 2);
    assert.equal(request.attrs["sluice.worker"], fleet.workers[0]!.url);
    const first = one(receiver.spans, "chat mock-llm", (s) => s.attrs["sluice.attempt"] === 1);
    const second = one(receiver.spans, "chat mock-llm", (s) => s.attrs["sluice.attempt"] === 2);
    for (const attempt of [first, second]) assert.equal(attempt.parentSpanId, request.spanId);
    assert.equal(first.attrs["sluice.worker"], busy.url);
    assert.equal(first.attrs["http.response.status_code"], 503);
    assert.equal(first.statusCode, STATUS_ERROR);
    assert.equal(second.attrs["sluice.worker"], fleet.workers[0]!.url);
    assert.equal(second.attrs["http.response.status_code"], 200);
    // Each attempt told its worker its own span: the first worker saw the first attempt's.
    assert.equal(parseTraceparent(busy.lastTraceparent()).parentId, first.spanId);
    assert.equal(parseTraceparent(seenByWorker.traceparent).parentId, second.spanId);
  });

  test("a request without a traceparent starts a trace of its own", async (t) => {
    const receiver = await startReceiver(t);
    const fleet = await startFleet(t, { gateway: { otlpEndpoint: receiver.endpoint } });
    // A tracestate without a traceparent is not forwarded beside the gateway's traceparent.
    const reply = await fleet.chat({}, { tracestate: "stray=1" });
    assert.equal(reply.status, 200, reply.text);
    const seenByWorker = fleet.workers[0]!.stats().lastRequestHeaders!;
    await fleet.gateway.close();

    const request = one(receiver.spans, "sluice.request");
    assert.equal(request.parentSpanId, undefined, "a root span");
    assert.equal(request.attrs["sluice.tenant"], "anonymous");
    const upstream = one(receiver.spans, "chat mock-llm");
    const sent = parseTraceparent(seenByWorker.traceparent);
    assert.equal(sent.traceId, request.traceId);
    assert.equal(sent.parentId, upstream.spanId);
    assert.equal(seenByWorker.tracestate, undefined);
  });

  test("a rejected request still gets its request span, with the error code and no upstream span", async (t) => {
    const receiver = await startReceiver(t);
    const fleet = await startFleet(t, {
      tenants: ["acme"],
      gateway: { otlpEndpoint: receiver.endpoint, requireAuth: true },
    });
    const reply = await fleet.chatAs(undefined, {}, { traceparent: CLIENT_TRACEPARENT });
    assert.equal(reply.status, 401, reply.text);
    await fleet.gateway.close();

    const request = one(receiver.spans, "sluice.request");
    assert.equal(request.traceId, CLIENT_TRACE_ID);
    assert.equal(request.parentSpanId, CLIENT_SPAN_ID);
    assert.equal(request.attrs["sluice.error_code"], "missing_api_key");
    assert.equal(request.attrs["error.type"], "missing_api_key");
    assert.equal(request.attrs["sluice.admission"], "rejected");
    assert.equal(request.attrs["sluice.outcome"], "rejected");
    assert.equal(request.attrs["http.response.status_code"], 401);
    // A client error leaves the server span's status unset (HTTP semantic conventions).
    assert.notEqual(request.statusCode, STATUS_ERROR);
    assert.deepEqual(
      receiver.spans.filter((s) => s.name !== "sluice.request").map((s) => s.name),
      [],
      "no queue, upstream or stream span for a request rejected before admission",
    );
  });

  test("a request turned away by a full queue (429) ends its queue span as rejected", async (t) => {
    const receiver = await startReceiver(t);
    const fleet = await startFleet(t, {
      workers: [{ ttftMs: 400 }],
      workerCapacity: [1],
      priorityScheduler: { enabled: false },
      legacy: { maxConcurrentRequests: 1, queueSize: 0 },
      gateway: { otlpEndpoint: receiver.endpoint },
    });
    const held = fleet.hold();
    // The first request holds the one slot; a queue of 0 turns the second away (429).
    let second = await fleet.chat();
    for (let i = 0; i < 50 && second.status === 200; i++) second = await fleet.chat();
    assert.equal(second.status, 429, second.text);
    await held.result;
    await fleet.gateway.close();

    const rejected = one(
      receiver.spans,
      "sluice.request",
      (s) => s.attrs["http.response.status_code"] === 429,
    );
    assert.equal(rejected.attrs["sluice.admission"], "rejected");
    assert.equal(typeof rejected.attrs["sluice.error_code"], "string");
    const queue = one(receiver.spans, "sluice.queue", (s) => s.parentSpanId === rejected.spanId);
    assert.equal(queue.attrs["sluice.admission"], "rejected");
    assert.equal(queue.attrs["sluice.error_code"], rejected.attrs["sluice.error_code"]);
  });

  test("tracing off: the worker gets the client's traceparent as sent, nothing is exported, no span code runs", async (t) => {
    const receiver = await startReceiver(t);
    const spanCalls = countSpanCalls(t);
    const off = await startFleet(t, { tenants: ["acme"] });
    const reply = await off.chatAs(
      "acme",
      {},
      { traceparent: CLIENT_TRACEPARENT, tracestate: CLIENT_TRACESTATE },
    );
    assert.equal(reply.status, 200, reply.text);
    const seen = off.workers[0]!.stats().lastRequestHeaders!;
    assert.equal(seen.traceparent, CLIENT_TRACEPARENT);
    assert.equal(seen.tracestate, CLIENT_TRACESTATE);
    await off.gateway.close();
    assert.equal(spanCalls.calls, 0, "the request path never called into the span set");
    assert.equal(receiver.posts, 0);

    // The same request with tracing on goes through the span set: the count above can fail.
    const on = await startFleet(t, { tenants: ["acme"], gateway: { otlpEndpoint: receiver.endpoint } });
    assert.equal((await on.chatAs("acme", {}, { traceparent: CLIENT_TRACEPARENT })).status, 200);
    await on.gateway.close();
    assert.ok(spanCalls.calls > 0, "tracing on calls into the span set");
    assert.ok(receiver.posts > 0);
  });

  test("OTEL_SERVICE_NAME overrides the service name", async (t) => {
    const receiver = await startReceiver(t);
    const before = process.env.OTEL_SERVICE_NAME;
    process.env.OTEL_SERVICE_NAME = "sluice-edge";
    t.after(() => {
      if (before === undefined) delete process.env.OTEL_SERVICE_NAME;
      else process.env.OTEL_SERVICE_NAME = before;
    });
    const fleet = await startFleet(t, { gateway: { otlpEndpoint: receiver.endpoint } });
    assert.equal((await fleet.chat()).status, 200);
    await fleet.gateway.close();
    assert.equal(one(receiver.spans, "sluice.request").serviceName, "sluice-edge");
  });
});

describe("--otlp-endpoint", () => {
  const WORKERS = ["--worker-urls", "http://w1:8000"];

  test("off by default; the flag and the YAML key set it; the flag wins over the file", async (t) => {
    assert.equal(parseGatewayArgs(WORKERS).otlpEndpoint, undefined);
    assert.equal(
      parseGatewayArgs([...WORKERS, "--otlp-endpoint", "http://collector:4318"]).otlpEndpoint,
      "http://collector:4318",
    );
    const file = await writeTempFile(t, "gateway.yaml", "otlp_endpoint: https://otel.example:4318\n");
    assert.equal(parseGatewayArgs([...WORKERS, "--config", file]).otlpEndpoint, "https://otel.example:4318");
    assert.equal(
      parseGatewayArgs([...WORKERS, "--config", file, "--otlp-endpoint", "http://c:4318"]).otlpEndpoint,
      "http://c:4318",
    );
  });

  test("a bad value fails naming the flag, or the YAML key", async (t) => {
    assert.throws(
      () => parseGatewayArgs([...WORKERS, "--otlp-endpoint", "collector:4318/x y"]),
      /--otlp-endpoint.*http:\/\/ or https:\/\//,
    );
    assert.throws(
      () => parseGatewayArgs([...WORKERS, "--otlp-endpoint", "grpc://collector:4317"]),
      /--otlp-endpoint/,
    );
    const file = await writeTempFile(t, "gateway.yaml", "otlp_endpoint: not a url\n");
    assert.throws(() => parseGatewayArgs([...WORKERS, "--config", file]), /otlp_endpoint/);
  });

  test("the endpoint's checks and its traces URL", () => {
    assert.equal(otlpEndpointProblem("http://collector:4318"), undefined);
    assert.equal(otlpEndpointProblem("https://collector"), undefined);
    assert.match(otlpEndpointProblem("ftp://collector") ?? "", /http:\/\/ or https:\/\//);
    assert.match(otlpEndpointProblem("http://collector:4318?x=1") ?? "", /query/);
    assert.equal(tracesUrl("http://collector:4318"), "http://collector:4318/v1/traces");
    assert.equal(tracesUrl("http://collector:4318/"), "http://collector:4318/v1/traces");
    assert.equal(tracesUrl("http://gw/otel"), "http://gw/otel/v1/traces");
    assert.equal(tracesUrl("http://collector:4318/v1/traces"), "http://collector:4318/v1/traces");
  });
});
