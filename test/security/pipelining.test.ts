/**
 * Issue 35, item 5: after an answer that closes the connection, nothing more on that connection is
 * parsed into a request the gateway acts on: requests pipelined behind an early answer (400
 * unsupported_transfer_encoding / missing_host_header / invalid_request_target, 417, 401 before the
 * body, 505, 503 too_many_connections), or sent while the gateway lingers after it, are never
 * admitted, forwarded, answered or counted, and SIGTERM's drain does not wait for them. Raw sockets:
 * a client library would never pipeline. Failed on 40ea629 (the worker ran every pipelined request).
 */
import assert from "node:assert/strict";
import { connect } from "node:net";
import { describe, test } from "node:test";
import { sha256Hex } from "../../src/gateway/tenancy/tenants.js";
import { type Fleet, startFleet, waitFor } from "../helpers/harness.js";
import { CHAT, rawChat, rawExchange } from "./raw.js";

const KEY = "client-key-pipelining";
const AUTH = `Authorization: Bearer ${KEY}\r\n`;
const apiKeys = [{ sha256: sha256Hex(KEY), tenant: "acme" }];

/** Requests a client pipelines behind the early answer: each one valid, each one would be served. */
const BEHIND =
  rawChat(CHAT, AUTH, "keep-alive") +
  "GET /health HTTP/1.1\r\nHost: gw\r\n\r\n" +
  rawChat(CHAT, AUTH, "keep-alive") +
  rawChat(CHAT, AUTH, "close");

/** Requests the gateway answers at once and closes after, before or without reading their body. */
export const EARLY: Array<{ what: string; bytes: string; status: number; code?: string }> = [
  {
    what: "Transfer-Encoding gzip, chunked",
    bytes:
      "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n",
    status: 400,
    code: "unsupported_transfer_encoding",
  },
  {
    what: "HTTP/1.1 without Host",
    bytes: `POST /v1/chat/completions HTTP/1.1\r\n${AUTH}Content-Length: 0\r\n\r\n`,
    status: 400,
    code: "missing_host_header",
  },
  {
    what: "asterisk-form target",
    bytes: "POST * HTTP/1.1\r\nHost: gw\r\nContent-Length: 0\r\n\r\n",
    status: 400,
    code: "invalid_request_target",
  },
  {
    what: "absolute-form target",
    bytes: "GET http://gw/v1/models HTTP/1.1\r\nHost: gw\r\n\r\n",
    status: 400,
    code: "invalid_request_target",
  },
  {
    what: "Expect other than 100-continue",
    bytes: `POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\n${AUTH}Expect: foo\r\nContent-Length: 0\r\n\r\n`,
    status: 417,
    code: "expectation_failed",
  },
  {
    what: "401 before the body was read",
    bytes: rawChat(CHAT, "", "keep-alive"),
    status: 401,
    code: "missing_api_key",
  },
  {
    what: "HTTP/2.0 request line",
    bytes: `GET /v1/models HTTP/2.0\r\nHost: gw\r\n${AUTH}\r\n`,
    status: 505,
    code: "http_version_not_supported",
  },
  {
    what: "Transfer-Encoding on HTTP/1.0",
    bytes: `POST /v1/chat/completions HTTP/1.0\r\nHost: gw\r\n${AUTH}Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n`,
    status: 400,
    code: "unsupported_transfer_encoding",
  },
  {
    what: "a body sent to the gateway's own path",
    bytes: "GET /health HTTP/1.1\r\nHost: gw\r\nContent-Length: 5\r\n\r\nhello",
    status: 200,
  },
  {
    what: "the client's own Connection: close (RFC 9112 9.6)",
    bytes: rawChat(CHAT, AUTH, "close"),
    status: 200,
  },
];

function workerRequests(fleet: Fleet): number {
  return fleet.workers.reduce((n, w) => n + w.stats().totalRequests, 0);
}

async function answersCounted(fleet: Fleet): Promise<number> {
  const s = await fleet.scrape();
  return (s.samples.get("sluice_http_requests_total") ?? []).reduce((n, m) => n + m.value, 0);
}

describe("nothing is served behind an answer that closes the connection", () => {
  for (const timing of ["in the same packet", "during the linger"] as const) {
    test(`requests pipelined ${timing} are never forwarded, answered or counted`, async (t) => {
      const fleet = await startFleet(t, { gateway: { apiKeys, requireAuth: true } });
      for (const early of EARLY) {
        const forwardedBefore = workerRequests(fleet);
        const countedBefore = await answersCounted(fleet);
        const r = await rawExchange(
          fleet.gateway.port,
          timing === "in the same packet" ? early.bytes + BEHIND : early.bytes,
          { pieces: timing === "in the same packet" ? [] : [BEHIND], pauseMs: 150, waitMs: 4000 },
        );
        assert.equal(r.responses.length, 1, `${early.what}: one answer, got ${r.raw.slice(0, 600)}`);
        assert.equal(r.responses[0]!.status, early.status, `${early.what}: ${r.raw.slice(0, 300)}`);
        if (early.code !== undefined) assert.equal(r.responses[0]!.headers["x-smg-error-code"], early.code);
        assert.equal(r.responses[0]!.headers.connection, "close", `${early.what}: says it closes`);
        assert.equal(r.closedByServer, true, `${early.what}: the gateway closed the connection`);
        // Give a forward still on its way the time to land.
        await new Promise((resolve) => setTimeout(resolve, 50));
        const served =
          early.status === 200 && early.code === undefined && early.bytes.includes("chat") ? 1 : 0;
        assert.equal(
          workerRequests(fleet) - forwardedBefore,
          served,
          `${early.what}: the worker ran requests the client pipelined behind it`,
        );
        const counted = early.what.includes("own path") ? 0 : 1;
        assert.equal(
          (await answersCounted(fleet)) - countedBefore,
          counted,
          `${early.what}: only the answer the client got is counted`,
        );
      }
      assert.equal(fleet.gateway.admission.snapshot().inflight, 0);
      // SIGTERM's drain has nothing to wait for: every request the gateway took is finished.
      const started = performance.now();
      await fleet.gateway.close({ drainMs: 5000 });
      const drainMs = performance.now() - started;
      assert.ok(drainMs < 1000, `the drain waited ${Math.round(drainMs)} ms for requests nobody will read`);
      assert.equal(
        fleet.logs.filter((l) => l.msg.startsWith("draining: waiting")).length,
        0,
        "no request left in the drain count",
      );
    });
  }

  test("a connection past the cap gets 503 and nothing it pipelines is served", async (t) => {
    const fleet = await startFleet(t, {
      gateway: { apiKeys, requireAuth: true, clientLimits: { maxConnections: 1 } },
    });
    const held = connect(fleet.gateway.port, "127.0.0.1");
    t.after(() => held.destroy());
    await new Promise((resolve) => held.once("connect", resolve));
    await waitFor(async () => true, "the held connection registered");
    for (const timing of ["same packet", "linger"]) {
      const r = await rawExchange(fleet.gateway.port, timing === "same packet" ? BEHIND : "", {
        pieces: timing === "same packet" ? [] : [BEHIND],
        pauseMs: 150,
        waitMs: 4000,
      });
      assert.equal(r.responses.length, 1, r.raw.slice(0, 400));
      assert.equal(r.responses[0]!.status, 503);
      assert.equal(r.responses[0]!.headers["x-smg-error-code"], "too_many_connections");
    }
    await new Promise((resolve) => setTimeout(resolve, 50));
    assert.equal(workerRequests(fleet), 0, "the worker ran requests of refused connections");
    held.destroy();
    await waitFor(
      async () => (await rawExchange(fleet.gateway.port, rawChat(CHAT, AUTH))).responses[0]?.status === 200,
      "room again",
    );
    const started = performance.now();
    await fleet.gateway.close({ drainMs: 5000 });
    assert.ok(performance.now() - started < 1000, "the drain count holds no refused connection's request");
  });

  test("pipelined requests whose client leaves are cut and not left in the drain count", async (t) => {
    const fleet = await startFleet(t, { gateway: { apiKeys, requireAuth: true } });
    const socket = connect(fleet.gateway.port, "127.0.0.1");
    socket.on("error", () => {});
    await new Promise((resolve) => socket.once("connect", resolve));
    // Four slow requests in one packet: three answers wait behind the first, with no socket yet.
    socket.write(rawChat(CHAT, `${AUTH}x-mock-ttft-ms: 400\r\n`, "keep-alive").repeat(4));
    await waitFor(() => fleet.workers[0]!.stats().open >= 1, "the first request at the worker");
    socket.destroy();
    // Every lease ends as the client's leaving: nothing runs on at the worker for nobody.
    await waitFor(() => fleet.outcomes.length === 4, "four outcomes", { timeoutMs: 3000 });
    await waitFor(() => fleet.workers[0]!.stats().open === 0, "nothing open at the worker");
    assert.ok(
      fleet.outcomes.every((o) => o.status === 499),
      `outcomes ${fleet.outcomes.map((o) => o.status).join(",")}`,
    );
    const started = performance.now();
    await fleet.gateway.close({ drainMs: 5000 });
    const drainMs = performance.now() - started;
    assert.ok(drainMs < 1000, `the drain waited ${Math.round(drainMs)} ms for answers nobody will read`);
  });

  test("a keep-alive request's pipelined successors are still served, in order", async (t) => {
    const fleet = await startFleet(t, { gateway: { apiKeys, requireAuth: true } });
    const r = await rawExchange(
      fleet.gateway.port,
      rawChat(CHAT, AUTH, "keep-alive") + rawChat(CHAT, AUTH, "keep-alive") + rawChat(CHAT, AUTH, "close"),
      { waitMs: 4000 },
    );
    assert.deepEqual(
      r.responses.map((x) => x.status),
      [200, 200, 200],
    );
    assert.equal(workerRequests(fleet), 3);
  });
});
