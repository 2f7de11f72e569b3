/**
 * The gateway as a proxy: admitted requests pass through byte for byte (request and answer, plain
 * and streamed), the slot is held until a stream drains, and upstream failures map to 502/504/413.
 */
import assert from "node:assert/strict";
import { Readable } from "node:stream";
import { describe, test } from "node:test";
import { request } from "undici";
import {
  assertError,
  assertOk,
  chatBody,
  closedPort,
  HEALTH_INTERVAL_MS,
  metric,
  normalizeIds,
  sendTo,
  smallSchedulerYaml,
  sseData,
  startFleet,
  waitFor,
} from "../helpers/harness.js";

const ODD_BODY =
  '{ "model" :"mock-llm",\n\t"messages" : [ {"role":"user",   "content":"hi  \\u00e9 there"} ] ,"max_tokens":5 ,' +
  '  "temperature": 0.50 }   \n';

describe("gateway: admitted requests pass through", () => {
  test("non-stream chat: answer identical to the worker's, request body forwarded byte for byte", async (t) => {
    const fleet = await startFleet(t, { schedulerYaml: smallSchedulerYaml() });
    const worker = fleet.workers[0]!;
    const headers = { "content-type": "application/json", "x-custom-header": "kept" };

    const direct = await sendTo(worker.url, "/v1/chat/completions", {
      method: "POST",
      headers,
      body: ODD_BODY,
    });
    assertOk(direct);
    const via = await fleet.send("/v1/chat/completions", { method: "POST", headers, body: ODD_BODY });
    assertOk(via);

    assert.equal(normalizeIds(via.text), normalizeIds(direct.text));
    assert.notEqual(via.text, normalizeIds(via.text), "the answer carries an id to normalise");
    assert.equal(via.headers["content-type"], direct.headers["content-type"]);
    assert.equal(via.headers["content-length"], direct.headers["content-length"]);
    assert.equal(via.headers["x-sluice-admission"], "fast");
    assert.equal(via.headers["x-smg-error-code"], undefined);

    const stats = worker.stats();
    assert.equal(stats.lastRequestBody, ODD_BODY);
    assert.equal(stats.lastRequestHeaders?.["x-custom-header"], "kept");
    assert.equal(stats.totalRequests, 2);
  });

  test("streamed chat: SSE identical to the worker's, x-sluice-admission fast", async (t) => {
    const fleet = await startFleet(t, { schedulerYaml: smallSchedulerYaml() });
    const worker = fleet.workers[0]!;
    const body = chatBody({ stream: true, stream_options: { include_usage: true }, max_tokens: 6 });
    const raw = `${JSON.stringify(body, null, 3)}\n`;
    const headers = { "content-type": "application/json" };

    const direct = await sendTo(worker.url, "/v1/chat/completions", { method: "POST", headers, body: raw });
    assertOk(direct);
    const via = await fleet.send("/v1/chat/completions", { method: "POST", headers, body: raw });
    assertOk(via);

    assert.match(String(via.headers["content-type"]), /^text\/event-stream/);
    assert.equal(via.headers["content-type"], direct.headers["content-type"]);
    assert.equal(via.headers["x-sluice-admission"], "fast");
    assert.equal(normalizeIds(via.text), normalizeIds(direct.text));
    const frames = sseData(via.text);
    assert.equal(frames.at(-1), "[DONE]");
    assert.equal(frames.length, 1 + 6 + 1 + 1 + 1, "role, 6 tokens, finish, usage, [DONE]");
    assert.equal(worker.stats().lastRequestBody, raw);
  });

  test("the slot is held while a stream flows and freed only after its last byte", async (t) => {
    const fleet = await startFleet(t, { schedulerYaml: smallSchedulerYaml() });
    const res = await request(`${fleet.url}/v1/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json", "x-mock-token-delay-ms": "25", "x-mock-ttft-ms": "0" },
      body: JSON.stringify(chatBody({ stream: true, max_tokens: 8 })),
    });
    assert.equal(res.statusCode, 200);
    let text = "";
    let chunksSeen = 0;
    for await (const chunk of res.body) {
      text += (chunk as Buffer).toString("utf8");
      // The last token, the finish chunk and [DONE] leave the worker together: check up to before them.
      if (text.includes("tok7")) continue;
      chunksSeen++;
      assert.equal(fleet.snapshot().inflight, 1, `in flight after ${chunksSeen} chunk(s)`);
      assert.equal(fleet.snapshot().classes.default.inflight, 1);
    }
    assert.ok(chunksSeen >= 3, `saw the stream in several chunks (${chunksSeen})`);
    assert.ok(text.endsWith("data: [DONE]\n\n"));
    await waitFor(() => fleet.snapshot().inflight === 0, "slot freed after the stream ended");
    assert.equal(fleet.workers[0]!.stats().completed, 1);
  });
});

describe("gateway: upstream failures", () => {
  test("x-mock-fail: reset -> 502 upstream_reset, slot freed", async (t) => {
    const fleet = await startFleet(t, { schedulerYaml: smallSchedulerYaml() });
    const reply = await fleet.chat({}, { "x-mock-fail": "reset" });
    assertError(reply, 502, "upstream_reset");
    assert.equal(JSON.parse(reply.text).error.type, "upstream_error");
    assert.equal(fleet.snapshot().inflight, 0);
    const s = await fleet.scrape();
    assert.equal(metric(s, "sluice_upstream_errors_total", { kind: "reset" }), 1);
    assert.equal(metric(s, "sluice_http_requests_total", { status: "502" }), 1);
    // The gateway keeps working.
    assertOk(await fleet.chat());
  });

  test("a worker status error passes through unchanged (not a gateway error)", async (t) => {
    const fleet = await startFleet(t, { schedulerYaml: smallSchedulerYaml() });
    const reply = await fleet.chat({}, { "x-mock-fail": "500" });
    assert.equal(reply.status, 500);
    assert.equal(reply.headers["x-smg-error-code"], undefined);
    assert.match(JSON.parse(reply.text).error.message, /mock failure 500/);
    assert.equal(fleet.snapshot().inflight, 0);
  });

  test("a healthy-marked worker that stopped listening -> 502 upstream_unavailable, slot freed", async (t) => {
    // Health checks effectively off, so the worker stays marked healthy after it goes away.
    const fleet = await startFleet(t, {
      schedulerYaml: smallSchedulerYaml(),
      health: { intervalSecs: 3600 },
    });
    const worker = fleet.workers[0]!;
    await worker.close();
    const pool = fleet.gateway.workers.workers[0]!.pool;
    await waitFor(() => pool.stats.connected === 0, "pooled connections to the closed worker dropped");
    const reply = await fleet.chat();
    assertError(reply, 502, "upstream_unavailable");
    assert.equal(fleet.snapshot().inflight, 0);
    const s = await fleet.scrape();
    assert.equal(metric(s, "sluice_upstream_errors_total", { kind: "connect" }), 1);
  });

  test("no healthy worker (nothing listens at its URL) -> 503 no_healthy_workers with Retry-After, slot freed", async (t) => {
    const fleet = await startFleet(t, {
      workers: [],
      extraWorkers: [{ url: `http://127.0.0.1:${await closedPort()}` }],
      schedulerYaml: smallSchedulerYaml(),
    });
    assert.equal(fleet.gateway.workers.healthyCount, 0);
    const reply = await fleet.chat();
    assertError(reply, 503, "no_healthy_workers");
    // The longest until the next health-check round can bring it back (the harness's interval).
    assert.equal(reply.headers["retry-after"], String(HEALTH_INTERVAL_MS / 1000));
    assert.equal(fleet.snapshot().inflight, 0);
    const ready = await fleet.send("/readiness");
    assert.equal(ready.status, 503);
    assert.equal(JSON.parse(ready.text).status, "not_ready");
  });

  test("request timeout + x-mock-fail: hang -> 504 upstream_timeout, upstream request aborted, slot freed", async (t) => {
    const fleet = await startFleet(t, {
      schedulerYaml: smallSchedulerYaml(),
      gateway: { requestTimeoutSecs: 0.2 },
    });
    const started = performance.now();
    const reply = await fleet.chat({}, { "x-mock-fail": "hang" });
    const elapsed = performance.now() - started;
    assertError(reply, 504, "upstream_timeout");
    assert.ok(elapsed >= 150 && elapsed < 5000, `answered after the timeout (${Math.round(elapsed)} ms)`);
    assert.equal(fleet.snapshot().inflight, 0);
    const worker = fleet.workers[0]!;
    await waitFor(() => worker.stats().running === 0, "the hung upstream request was aborted");
    assert.equal(worker.stats().aborted, 1);
    const s = await fleet.scrape();
    assert.equal(metric(s, "sluice_upstream_errors_total", { kind: "timeout" }), 1);
  });

  test("body over max_payload_size -> 413 payload_too_large (declared length and chunked)", async (t) => {
    const fleet = await startFleet(t, {
      schedulerYaml: smallSchedulerYaml(),
      gateway: { maxPayloadSize: 1000 },
    });
    const big = JSON.stringify(chatBody({ messages: [{ role: "user", content: "x".repeat(2000) }] }));

    const declared = await fleet.send("/v1/chat/completions", {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: big,
    });
    assertError(declared, 413, "payload_too_large");

    const chunked = await request(`${fleet.url}/v1/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: Readable.from([Buffer.from(big.slice(0, 600)), Buffer.from(big.slice(600))]),
    });
    const text = await chunked.body.text();
    assertError({ status: chunked.statusCode, headers: chunked.headers, text }, 413, "payload_too_large");

    // Exactly at the limit is accepted.
    const atLimit = JSON.stringify(chatBody({ messages: [{ role: "user", content: "" }] }));
    const padded = atLimit + " ".repeat(1000 - Buffer.byteLength(atLimit));
    assert.equal(Buffer.byteLength(padded), 1000);
    assertOk(
      await fleet.send("/v1/chat/completions", {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: padded,
      }),
    );
    assert.equal(fleet.workers[0]!.stats().totalRequests, 1, "oversized bodies never reached the worker");
    assert.equal(fleet.snapshot().inflight, 0);
  });
});
