/**
 * The OpenTelemetry GenAI semantic conventions (docs/genai-telemetry.md) against a real OTLP/HTTP
 * receiver on loopback: the gen_ai.* attributes of the request and upstream spans (names from the
 * conventions package, value types checked), the GenAI metrics posted to /v1/metrics with the
 * advised buckets, OTEL_SEMCONV_STABILITY_OPT_IN, prompts and answers never exported, and the
 * metrics SDK never loaded when metrics are off.
 */
import assert from "node:assert/strict";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { join } from "node:path";
import { describe, type TestContext, test } from "node:test";
import { ATTR_ERROR_TYPE, ATTR_SERVER_ADDRESS, ATTR_SERVER_PORT } from "@opentelemetry/semantic-conventions";
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
  METRIC_GEN_AI_CLIENT_TOKEN_USAGE,
  METRIC_GEN_AI_SERVER_REQUEST_DURATION,
  METRIC_GEN_AI_SERVER_TIME_PER_OUTPUT_TOKEN,
  METRIC_GEN_AI_SERVER_TIME_TO_FIRST_TOKEN,
} from "@opentelemetry/semantic-conventions/incubating";
import { parseGatewayArgs } from "../../src/cli/flags.js";
import type {
  RoutingCandidate,
  RoutingPolicy,
  RoutingPolicyFactory,
} from "../../src/contracts/routing-policy.js";
import { metricsUrl } from "../../src/tracing/endpoint.js";
import {
  DURATION_BUCKETS,
  latestGenAiOnly,
  METRIC_SLUICE_QUEUE_WAIT,
  operationOf,
  providerOf,
  QUEUE_WAIT_BUCKETS,
  TIME_PER_OUTPUT_TOKEN_BUCKETS,
  TIME_TO_FIRST_TOKEN_BUCKETS,
  TOKEN_BUCKETS,
} from "../../src/tracing/genai-attributes.js";
import { exited, REPO_ROOT, startProcess } from "../helpers/cli-process.js";
import { schedulerDoc, startFleet, writeTempFile } from "../helpers/harness.js";
import {
  type HistogramPoint,
  KIND_CLIENT,
  KIND_SERVER,
  type Received,
  STATUS_ERROR,
  startReceiver,
} from "./otlp-receiver.js";

const MARKER = "zebra-marmalade-7731";
const MODEL = "mock-llm";

function one(spans: Received[], where: (s: Received) => boolean, what: string): Received {
  const found = spans.filter(where);
  assert.equal(
    found.length,
    1,
    `one ${what}, got ${found.length}: ${JSON.stringify(spans.map((s) => s.name))}`,
  );
  return found[0]!;
}

function points(all: HistogramPoint[], metric: string, where: (p: HistogramPoint) => boolean = () => true) {
  return all.filter((p) => p.metric === metric && where(p));
}

/** Sets an environment variable for the test, restored after. */
function setEnv(t: TestContext, name: string, value: string): void {
  const before = process.env[name];
  process.env[name] = value;
  t.after(() => {
    if (before === undefined) delete process.env[name];
    else process.env[name] = before;
  });
}

/** The GenAI attributes every inference span and metric point carries, with their OTLP types. */
function assertCallAttributes(
  attrs: Record<string, unknown>,
  types: Record<string, string>,
  workerUrl: string,
  what: string,
): void {
  const worker = new URL(workerUrl);
  assert.equal(attrs[ATTR_GEN_AI_OPERATION_NAME], GEN_AI_OPERATION_NAME_VALUE_CHAT, what);
  assert.equal(attrs[ATTR_GEN_AI_PROVIDER_NAME], "sglang", `${what}: the mock answers /get_server_info`);
  assert.equal(attrs[ATTR_GEN_AI_REQUEST_MODEL], MODEL, what);
  assert.equal(attrs[ATTR_SERVER_ADDRESS], worker.hostname, what);
  assert.equal(attrs[ATTR_SERVER_PORT], Number(worker.port), what);
  for (const key of [
    ATTR_GEN_AI_OPERATION_NAME,
    ATTR_GEN_AI_PROVIDER_NAME,
    ATTR_GEN_AI_REQUEST_MODEL,
    ATTR_SERVER_ADDRESS,
  ])
    assert.equal(types[key], "stringValue", `${what}: ${key} is a string`);
  assert.equal(types[ATTR_SERVER_PORT], "intValue", `${what}: server.port is an int`);
}

/**
 * A worker that looks like vLLM to the gateway's probes (no /get_server_info; its models are
 * `owned_by: "vllm"`), or like no known engine (`owned_by` something else), and answers chats whole.
 */
async function engineWorker(t: TestContext, ownedBy: string): Promise<string> {
  const server = createServer((req, res) => {
    req.resume();
    req.on("end", () => {
      const json = (status: number, body: unknown) =>
        res.writeHead(status, { "content-type": "application/json" }).end(JSON.stringify(body));
      if (req.method === "GET" && req.url === "/v1/models")
        return json(200, { object: "list", data: [{ id: MODEL, object: "model", owned_by: ownedBy }] });
      if (req.method === "GET") return json(req.url === "/health" ? 200 : 404, {});
      json(200, {
        id: "chatcmpl-1",
        object: "chat.completion",
        model: `${MODEL}-served`,
        choices: [{ index: 0, message: { role: "assistant", content: "ok" }, finish_reason: "stop" }],
        usage: { prompt_tokens: 7, completion_tokens: 1, total_tokens: 8 },
      });
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
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

/** A worker that starts a stream (one event naming its model) and then drops the connection. */
async function cuttingWorker(t: TestContext): Promise<string> {
  const server = createServer((req, res) => {
    req.resume();
    req.on("end", () => {
      if (req.method === "GET") {
        const found = req.url === "/health" || req.url === "/v1/models";
        res.writeHead(found ? 200 : 404, { "content-type": "application/json" });
        return res.end(
          JSON.stringify(req.url === "/v1/models" ? { data: [{ id: MODEL, owned_by: "vllm" }] } : {}),
        );
      }
      res.writeHead(200, { "content-type": "text/event-stream" });
      const event = {
        model: `${MODEL}-cut`,
        choices: [{ index: 0, delta: { content: "a" }, finish_reason: null }],
      };
      res.write(`data: ${JSON.stringify(event)}\n\n`, () => setTimeout(() => res.destroy(), 20));
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
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

/** A routing policy that always picks this worker when it can. */
function preferring(url: string): RoutingPolicyFactory {
  return <W extends RoutingCandidate>(): RoutingPolicy<W> => ({
    name: "test_prefer",
    choose: (candidates) => candidates.find((c) => c.url === url) ?? candidates[0],
    onWorkerRemoved() {},
  });
}

describe("GenAI semantic conventions", () => {
  test("a chat request's spans and metrics carry the GenAI attributes; the prompt and answer are never exported", async (t) => {
    const receiver = await startReceiver(t);
    const fleet = await startFleet(t, {
      tenants: ["acme"],
      schedulerYaml: schedulerDoc(),
      gateway: { otlpEndpoint: receiver.endpoint },
    });
    const reply = await fleet.chatAs(
      "acme",
      { max_tokens: 5, messages: [{ role: "user", content: `say ${MARKER} back` }] },
      { "x-smg-priority": "interactive" },
    );
    assert.equal(reply.status, 200, reply.text);
    const workerUrl = fleet.workers[0]!.url;
    await fleet.gateway.close();

    // Spans: the request (SERVER) and the upstream call (CLIENT, named "{operation} {model}").
    const request = one(receiver.spans, (s) => s.name === "sluice.request", "request span");
    assert.equal(request.kind, KIND_SERVER);
    const upstream = one(receiver.spans, (s) => s.kind === KIND_CLIENT, "upstream span");
    assert.equal(upstream.name, `${GEN_AI_OPERATION_NAME_VALUE_CHAT} ${MODEL}`);
    for (const span of [request, upstream]) {
      const what = span.name;
      assertCallAttributes(span.attrs, span.types, workerUrl, what);
      assert.equal(span.attrs[ATTR_GEN_AI_REQUEST_MAX_TOKENS], 5, what);
      assert.equal(span.types[ATTR_GEN_AI_REQUEST_MAX_TOKENS], "intValue", what);
      assert.equal(span.attrs[ATTR_GEN_AI_RESPONSE_MODEL], MODEL, what);
      assert.equal(span.types[ATTR_GEN_AI_RESPONSE_MODEL], "stringValue", what);
      assert.equal(span.types[ATTR_GEN_AI_RESPONSE_FINISH_REASONS], "arrayValue", `${what}: a string array`);
      assert.deepEqual(span.attrs[ATTR_GEN_AI_RESPONSE_FINISH_REASONS], ["length"], what);
      assert.equal(span.attrs[ATTR_GEN_AI_USAGE_INPUT_TOKENS], request.attrs["sluice.tokens.input"], what);
      assert.equal(span.attrs[ATTR_GEN_AI_USAGE_OUTPUT_TOKENS], 5, what);
      assert.equal(span.types[ATTR_GEN_AI_USAGE_INPUT_TOKENS], "intValue", what);
      assert.equal(span.types[ATTR_GEN_AI_USAGE_OUTPUT_TOKENS], "intValue", what);
      // Without the opt-in, the provider's name up to conventions 1.36 is set beside it.
      assert.equal(span.attrs[ATTR_GEN_AI_SYSTEM], "sglang", what);
    }
    // sluice's own stay sluice.*.
    assert.equal(request.attrs["sluice.class.effective"], "interactive");
    assert.equal(typeof request.attrs["sluice.pool"], "string");
    assert.equal(typeof request.attrs["sluice.queue_wait_ms"], "number");

    // Metrics, posted to /v1/metrics at close.
    assert.ok(receiver.paths.includes("/v1/metrics"), `metrics posted: ${receiver.paths}`);
    const [duration, ...moreDurations] = points(receiver.points, METRIC_GEN_AI_SERVER_REQUEST_DURATION);
    assert.ok(duration !== undefined && moreDurations.length === 0, "one duration series");
    assert.equal(duration.count, 1);
    assert.equal(duration.unit, "s");
    assert.deepEqual(duration.bounds, DURATION_BUCKETS);
    assert.equal(duration.serviceName, "sluice");
    assertCallAttributes(duration.attrs, duration.types, workerUrl, "duration");
    assert.equal(duration.attrs[ATTR_GEN_AI_RESPONSE_MODEL], MODEL);
    assert.equal(duration.attrs[ATTR_ERROR_TYPE], undefined, "a success has no error.type");
    const tokens = points(receiver.points, METRIC_GEN_AI_CLIENT_TOKEN_USAGE);
    assert.deepEqual(tokens.map((p) => p.attrs[ATTR_GEN_AI_TOKEN_TYPE]).sort(), ["input", "output"]);
    for (const p of tokens) {
      assert.deepEqual(p.bounds, TOKEN_BUCKETS);
      assert.equal(p.count, 1);
      assertCallAttributes(p.attrs, p.types, workerUrl, `tokens ${p.attrs[ATTR_GEN_AI_TOKEN_TYPE]}`);
    }
    assert.equal(tokens.find((p) => p.attrs[ATTR_GEN_AI_TOKEN_TYPE] === "output")!.sum, 5);
    // A whole (non-streamed) answer has no time to first token.
    assert.deepEqual(points(receiver.points, METRIC_GEN_AI_SERVER_TIME_TO_FIRST_TOKEN), []);
    const [wait] = points(receiver.points, METRIC_SLUICE_QUEUE_WAIT);
    assert.ok(wait !== undefined, "the queue wait is recorded");
    assert.deepEqual(wait.bounds, QUEUE_WAIT_BUCKETS);
    assert.equal(wait.attrs["sluice.class.effective"], "interactive");
    assert.equal(wait.attrs["sluice.pool"], request.attrs["sluice.pool"]);
    assert.equal(wait.attrs["sluice.admission"], "fast");

    // Neither the prompt nor the answer's text is in anything exported.
    assert.ok(receiver.payloads.length >= 2);
    const exported = receiver.payloads.join("\n");
    assert.ok(!exported.includes(MARKER), "the prompt's marker is in no exported payload");
    assert.ok(!exported.includes("zebra"), "nor any part of it the mock might echo");
  });

  test("a streamed chat: TTFT and time per output token, finish reasons read from the stream", async (t) => {
    const receiver = await startReceiver(t);
    const fleet = await startFleet(t, { gateway: { otlpEndpoint: receiver.endpoint } });
    const reply = await fleet.chat({
      stream: true,
      max_tokens: 6,
      messages: [{ role: "user", content: `stream ${MARKER}` }],
    });
    assert.equal(reply.status, 200, reply.text);
    await fleet.gateway.close();

    const upstream = one(receiver.spans, (s) => s.kind === KIND_CLIENT, "upstream span");
    assert.deepEqual(upstream.attrs[ATTR_GEN_AI_RESPONSE_FINISH_REASONS], ["length"]);
    assert.equal(upstream.attrs[ATTR_GEN_AI_RESPONSE_MODEL], MODEL);
    assert.equal(upstream.attrs[ATTR_GEN_AI_USAGE_OUTPUT_TOKENS], 6);
    const [ttft] = points(receiver.points, METRIC_GEN_AI_SERVER_TIME_TO_FIRST_TOKEN);
    assert.ok(ttft !== undefined, "a time to first token");
    assert.equal(ttft.count, 1);
    assert.deepEqual(ttft.bounds, TIME_TO_FIRST_TOKEN_BUCKETS);
    const [tpot] = points(receiver.points, METRIC_GEN_AI_SERVER_TIME_PER_OUTPUT_TOKEN);
    assert.ok(tpot !== undefined, "a time per output token");
    assert.deepEqual(tpot.bounds, TIME_PER_OUTPUT_TOKEN_BUCKETS);
    assert.equal(tpot.attrs[ATTR_GEN_AI_OPERATION_NAME], GEN_AI_OPERATION_NAME_VALUE_CHAT);
    assert.ok(!receiver.payloads.join("\n").includes(MARKER));
  });

  test("text completions: OpenAI's /v1/completions and SGLang's /generate (max_new_tokens, meta_info)", async (t) => {
    const receiver = await startReceiver(t);
    const fleet = await startFleet(t, { gateway: { otlpEndpoint: receiver.endpoint } });
    const completion = await fleet.send("/v1/completions", {
      body: { model: MODEL, prompt: `complete ${MARKER}`, max_tokens: 3 },
    });
    assert.equal(completion.status, 200, completion.text);
    const generate = await fleet.send("/generate", {
      body: { model: MODEL, text: `generate ${MARKER}`, sampling_params: { max_new_tokens: 2 } },
    });
    assert.equal(generate.status, 200, generate.text);
    await fleet.gateway.close();

    const upstreams = receiver.spans.filter((s) => s.kind === KIND_CLIENT);
    assert.deepEqual(upstreams.map((s) => s.name).sort(), [
      `text_completion ${MODEL}`,
      `text_completion ${MODEL}`,
    ]);
    const byRoute = (path: string) => one(upstreams, (s) => String(s.attrs["url.full"]).endsWith(path), path);
    const openai = byRoute("/v1/completions");
    assert.equal(openai.attrs[ATTR_GEN_AI_OPERATION_NAME], "text_completion");
    assert.equal(openai.attrs[ATTR_GEN_AI_REQUEST_MAX_TOKENS], 3);
    assert.deepEqual(openai.attrs[ATTR_GEN_AI_RESPONSE_FINISH_REASONS], ["length"]);
    const sglang = byRoute("/generate");
    assert.equal(sglang.attrs[ATTR_GEN_AI_REQUEST_MAX_TOKENS], 2);
    assert.equal(sglang.types[ATTR_GEN_AI_RESPONSE_FINISH_REASONS], "arrayValue");
    assert.equal((sglang.attrs[ATTR_GEN_AI_RESPONSE_FINISH_REASONS] as string[]).length, 1);
    // SGLang's native answer names no model: its series has no gen_ai.response.model.
    const durations = points(receiver.points, METRIC_GEN_AI_SERVER_REQUEST_DURATION);
    assert.deepEqual(
      durations
        .map((p) => [p.attrs[ATTR_GEN_AI_OPERATION_NAME], p.attrs[ATTR_GEN_AI_RESPONSE_MODEL], p.count])
        .sort(),
      [
        ["text_completion", undefined, 1],
        ["text_completion", MODEL, 1],
      ],
    );
    assert.ok(!receiver.payloads.join("\n").includes(MARKER));
  });

  test("a failed request's duration carries error.type; gen_ai_latest_experimental drops gen_ai.system", async (t) => {
    setEnv(t, "OTEL_SEMCONV_STABILITY_OPT_IN", "http, gen_ai_latest_experimental");
    const receiver = await startReceiver(t);
    const fleet = await startFleet(t, {
      tenants: ["acme"],
      gateway: { otlpEndpoint: receiver.endpoint, requireAuth: true },
    });
    assert.equal((await fleet.chatAs(undefined, {})).status, 401);
    assert.equal((await fleet.chatAs("acme", {})).status, 200);
    await fleet.gateway.close();

    const failed = points(
      receiver.points,
      METRIC_GEN_AI_SERVER_REQUEST_DURATION,
      (p) => p.attrs[ATTR_ERROR_TYPE] !== undefined,
    );
    assert.equal(failed.length, 1);
    assert.equal(failed[0]!.attrs[ATTR_ERROR_TYPE], "missing_api_key");
    assert.equal(failed[0]!.attrs[ATTR_GEN_AI_OPERATION_NAME], GEN_AI_OPERATION_NAME_VALUE_CHAT);
    assert.equal(failed[0]!.attrs[ATTR_SERVER_ADDRESS], undefined, "it never reached a worker");
    for (const p of receiver.points) assert.equal(p.attrs[ATTR_GEN_AI_SYSTEM], undefined, p.metric);
    for (const s of receiver.spans) assert.equal(s.attrs[ATTR_GEN_AI_SYSTEM], undefined, s.name);
    const served = one(receiver.spans, (s) => s.kind === KIND_CLIENT, "upstream span");
    assert.equal(served.attrs[ATTR_GEN_AI_PROVIDER_NAME], "sglang");
  });

  test("gen_ai.provider.name: vllm from its model list, openai_compatible for a server of unknown make", async (t) => {
    for (const [ownedBy, provider] of [
      ["vllm", "vllm"],
      ["someone", "openai_compatible"],
    ] as const) {
      const receiver = await startReceiver(t);
      const url = await engineWorker(t, ownedBy);
      const fleet = await startFleet(t, {
        extraWorkers: [{ url }],
        gateway: { otlpEndpoint: receiver.endpoint, routingPolicy: preferring(url) },
      });
      assert.equal((await fleet.chat()).status, 200);
      await fleet.gateway.close();
      const upstream = one(receiver.spans, (s) => s.kind === KIND_CLIENT, "upstream span");
      assert.equal(upstream.attrs["sluice.worker"], url);
      assert.equal(upstream.attrs[ATTR_GEN_AI_PROVIDER_NAME], provider, ownedBy);
      // The answer named a model of its own: the response model is the answer's, not the request's.
      assert.equal(upstream.attrs[ATTR_GEN_AI_RESPONSE_MODEL], `${MODEL}-served`);
      assert.equal(upstream.attrs[ATTR_GEN_AI_REQUEST_MODEL], MODEL);
      const [duration] = points(receiver.points, METRIC_GEN_AI_SERVER_REQUEST_DURATION);
      assert.equal(duration?.attrs[ATTR_GEN_AI_PROVIDER_NAME], provider);
      assert.equal(duration?.attrs[ATTR_GEN_AI_RESPONSE_MODEL], `${MODEL}-served`);
    }
  });

  test("a stream cut part-way: the attempt is an error with the model its events named; the duration has error.type", async (t) => {
    const receiver = await startReceiver(t);
    const url = await cuttingWorker(t);
    const fleet = await startFleet(t, {
      extraWorkers: [{ url }],
      gateway: { otlpEndpoint: receiver.endpoint, routingPolicy: preferring(url) },
    });
    await fleet.chat({ stream: true }).catch(() => undefined);
    await fleet.gateway.close();
    const upstream = one(receiver.spans, (s) => s.kind === KIND_CLIENT, "upstream span");
    assert.equal(upstream.attrs["sluice.worker"], url);
    assert.equal(upstream.statusCode, STATUS_ERROR);
    assert.equal(upstream.attrs[ATTR_GEN_AI_RESPONSE_MODEL], `${MODEL}-cut`);
    assert.equal(upstream.attrs[ATTR_GEN_AI_RESPONSE_FINISH_REASONS], undefined, "no choice finished");
    assert.equal(upstream.attrs[ATTR_GEN_AI_PROVIDER_NAME], "vllm");
    const [duration] = points(receiver.points, METRIC_GEN_AI_SERVER_REQUEST_DURATION);
    assert.equal(typeof duration?.attrs[ATTR_ERROR_TYPE], "string");
    assert.deepEqual(points(receiver.points, METRIC_GEN_AI_SERVER_TIME_TO_FIRST_TOKEN), [], "not a success");
  });

  test("--otlp-metrics off: traces only, nothing posted to /v1/metrics", async (t) => {
    const receiver = await startReceiver(t);
    const fleet = await startFleet(t, { gateway: { otlpEndpoint: receiver.endpoint, otlpMetrics: false } });
    assert.equal((await fleet.chat()).status, 200);
    await fleet.gateway.close();
    assert.ok(receiver.paths.includes("/v1/traces"));
    assert.ok(!receiver.paths.includes("/v1/metrics"), `${receiver.paths}`);
    assert.deepEqual(receiver.points, []);
  });

  test("metrics without traces: OTEL_TRACES_SAMPLER=always_off exports no span, the metrics still", async (t) => {
    setEnv(t, "OTEL_TRACES_SAMPLER", "always_off");
    const receiver = await startReceiver(t);
    const fleet = await startFleet(t, { gateway: { otlpEndpoint: receiver.endpoint } });
    assert.equal((await fleet.chat()).status, 200);
    await fleet.gateway.close();
    assert.deepEqual(receiver.spans, []);
    assert.ok(!receiver.paths.includes("/v1/traces"), `${receiver.paths}`);
    const [duration] = points(receiver.points, METRIC_GEN_AI_SERVER_REQUEST_DURATION);
    assert.equal(duration?.count, 1);
    assert.equal(
      duration?.attrs[ATTR_GEN_AI_RESPONSE_MODEL],
      MODEL,
      "the answer is still read for its model",
    );
  });

  test("the metrics SDK is loaded only when metrics are on", async () => {
    const script = join(REPO_ROOT, "test/tracing/fixtures/module-watch.ts");
    const loaded = async (mode: string) => {
      const { child, out } = startProcess(process.execPath, ["--import", "tsx", script, mode], REPO_ROOT);
      const code = await exited(child);
      const line = /MODULES (.*)/.exec(out.stdout);
      assert.ok(line, `mode ${mode} (exit ${code}): ${out.stdout}\n${out.stderr}`);
      return JSON.parse(line[1]!) as { metrics: number; traces: boolean };
    };
    assert.deepEqual(await loaded("off"), { metrics: 0, traces: false });
    assert.deepEqual(await loaded("traces"), { metrics: 0, traces: true });
    // The same watch sees them when metrics are on: the zeros above can fail.
    const on = await loaded("metrics");
    assert.ok(on.metrics > 0 && on.traces);
  });
});

describe("--otlp-metrics", () => {
  const WORKERS = ["--worker-urls", "http://w1:8000", "--otlp-endpoint", "http://c:4318"];

  test("on by default; off from the flag, the environment or the YAML key; a bad value names them", async (t) => {
    assert.equal(parseGatewayArgs(WORKERS).otlpMetrics, true);
    assert.equal(parseGatewayArgs([...WORKERS, "--otlp-metrics", "off"]).otlpMetrics, false);
    assert.throws(() => parseGatewayArgs([...WORKERS, "--otlp-metrics", "no"]), /--otlp-metrics.*on, off/);
    setEnv(t, "SLUICE_OTLP_METRICS", "off");
    assert.equal(parseGatewayArgs(WORKERS).otlpMetrics, false);
    assert.equal(parseGatewayArgs([...WORKERS, "--otlp-metrics", "on"]).otlpMetrics, true, "the flag wins");
    delete process.env.SLUICE_OTLP_METRICS;
    const off = await writeTempFile(t, "gateway.yaml", "otlp_metrics: off\n");
    assert.equal(parseGatewayArgs([...WORKERS, "--config", off]).otlpMetrics, false);
    const bad = await writeTempFile(t, "gateway.yaml", "otlp_metrics: sometimes\n");
    assert.throws(() => parseGatewayArgs([...WORKERS, "--config", bad]), /otlp_metrics.*on, off/);
  });
});

describe("GenAI names and values", () => {
  test("routes to operations, the opt-in list, the metrics URL", () => {
    assert.equal(operationOf("/v1/chat/completions"), "chat");
    assert.equal(operationOf("/v1/completions"), "text_completion");
    assert.equal(operationOf("/generate"), "text_completion");
    assert.equal(operationOf("/v1/embeddings"), "embeddings");
    assert.equal(operationOf("/v1/score"), undefined);
    assert.equal(providerOf("vllm"), "vllm");
    assert.equal(providerOf("sglang"), "sglang");
    assert.equal(
      providerOf("openai"),
      "openai_compatible",
      "a generic OpenAI-compatible server is not OpenAI",
    );
    assert.equal(providerOf(undefined), "openai_compatible");
    assert.equal(latestGenAiOnly(undefined), false);
    assert.equal(latestGenAiOnly("http"), false);
    assert.equal(latestGenAiOnly("http, gen_ai_latest_experimental"), true);
    assert.equal(metricsUrl("http://collector:4318"), "http://collector:4318/v1/metrics");
    assert.equal(metricsUrl("http://gw/otel/"), "http://gw/otel/v1/metrics");
    assert.equal(metricsUrl("http://collector:4318/v1/traces"), "http://collector:4318/v1/metrics");
  });
});
