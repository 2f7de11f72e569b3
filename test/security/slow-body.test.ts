/**
 * Issue 35, item 9: a body that is never idle but never ends (a large Content-Length trickled a byte
 * at a time) is cut by the whole-body deadline (`--client-body-timeout-secs`): 408
 * `request_body_too_slow`, the connection closed, nothing forwarded, no slot or queue place held.
 * Raw sockets; the deadline is set small so the test is quick. Failed on 40ea629 (no deadline: the
 * trickle kept its connection until the client stopped).
 */
import assert from "node:assert/strict";
import { connect } from "node:net";
import { describe, test } from "node:test";
import { parseGatewayArgs } from "../../src/cli/flags.js";
import { DEFAULT_CLIENT_LIMITS } from "../../src/gateway/http/client-guard.js";
import { smallSchedulerYaml, startFleet, writeTempFile } from "../helpers/harness.js";
import { parseResponses, type RawResponse } from "./raw.js";

interface Trickle {
  responses: RawResponse[];
  closedByServer: boolean;
  /** Body bytes written before the gateway answered or closed. */
  sent: number;
  elapsedMs: number;
}

/** Sends the head, then one body byte every `everyMs` until the server answers or closes. */
function trickle(port: number, head: string, everyMs: number, giveUpMs: number): Promise<Trickle> {
  return new Promise((resolve) => {
    const socket = connect(port, "127.0.0.1");
    const chunks: Buffer[] = [];
    let sent = 0;
    let closedByServer = false;
    const started = performance.now();
    let timer: NodeJS.Timeout | undefined;
    const giveUp = setTimeout(() => socket.destroy(), giveUpMs);
    const tick = () => {
      if (socket.destroyed || !socket.writable) return;
      socket.write("x");
      sent++;
      timer = setTimeout(tick, everyMs);
    };
    socket.on("connect", () => {
      socket.write(head);
      timer = setTimeout(tick, everyMs);
    });
    socket.on("data", (d: Buffer) => chunks.push(d));
    socket.on("end", () => {
      closedByServer = true;
      socket.destroy();
    });
    socket.on("error", () => {
      closedByServer = true;
    });
    socket.on("close", () => {
      clearTimeout(timer);
      clearTimeout(giveUp);
      resolve({
        responses: parseResponses(Buffer.concat(chunks)),
        closedByServer,
        sent,
        elapsedMs: performance.now() - started,
      });
    });
  });
}

describe("the whole-body deadline", () => {
  test("a 1 MB body trickled a byte at a time is cut at the deadline with 408, never forwarded", async (t) => {
    const fleet = await startFleet(t, {
      schedulerYaml: smallSchedulerYaml(),
      // The idle timeout never fires: a byte comes every 20 ms.
      gateway: { clientLimits: { bodyTimeoutSecs: 0.6, bodyIdleTimeoutSecs: 30 }, maxPayloadSize: 2_000_000 },
    });
    const head =
      "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n" +
      "Content-Length: 1000000\r\n\r\n";
    const pending = trickle(fleet.gateway.port, head, 20, 8000);
    await new Promise((resolve) => setTimeout(resolve, 300));
    assert.equal(fleet.snapshot().inflight, 0, "no slot while the body arrives");
    assert.equal(fleet.snapshot().queued, 0, "no queue place while the body arrives");
    const r = await pending;
    const answer = r.responses[0];
    assert.ok(answer, `an answer before the close (sent ${r.sent} bytes in ${Math.round(r.elapsedMs)} ms)`);
    assert.equal(answer.status, 408);
    assert.equal(answer.headers["x-smg-error-code"], "request_body_too_slow");
    assert.equal(answer.headers.connection, "close");
    assert.equal(JSON.parse(answer.body).error.code, "request_body_too_slow");
    assert.equal(r.closedByServer, true, "the gateway closed the connection");
    // Cut near the deadline, not at the client's leisure (the answer, then at most the linger).
    assert.ok(r.elapsedMs > 500, `cut after ${Math.round(r.elapsedMs)} ms, before the 0.6 s deadline`);
    assert.ok(r.elapsedMs < 4000, `cut after ${Math.round(r.elapsedMs)} ms`);
    assert.equal(fleet.workers[0]!.stats().totalRequests, 0, "nothing forwarded");
    assert.equal(fleet.snapshot().inflight, 0);
    const s = await fleet.scrape();
    const counted = (s.samples.get("sluice_http_requests_total") ?? []).find(
      (m) => m.labels.status === "408",
    );
    assert.equal(counted?.value, 1, "the 408 is counted once");
  });

  test("a chunked body trickled a chunk at a time is cut the same way", async (t) => {
    const fleet = await startFleet(t, { gateway: { clientLimits: { bodyTimeoutSecs: 0.5 } } });
    const head =
      "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n" +
      "Transfer-Encoding: chunked\r\n\r\n";
    // One chunk declared just under 1 MiB, whose data then arrives a byte at a time.
    const r = await trickle(fleet.gateway.port, `${head}fffff\r\n`, 20, 8000);
    assert.equal(r.responses[0]?.status, 408, `sent ${r.sent} bytes`);
    assert.equal(r.responses[0]?.headers["x-smg-error-code"], "request_body_too_slow");
    assert.equal(r.closedByServer, true);
    assert.equal(fleet.workers[0]!.stats().totalRequests, 0);
  });

  test("a body that arrives within the deadline is served", async (t) => {
    const fleet = await startFleet(t, { gateway: { clientLimits: { bodyTimeoutSecs: 2 } } });
    const body = '{"model":"mock-llm","messages":[{"role":"user","content":"hello"}],"max_tokens":4}';
    const head =
      "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n" +
      `Content-Length: ${body.length}\r\nConnection: close\r\n\r\n`;
    const socket = connect(fleet.gateway.port, "127.0.0.1");
    const chunks: Buffer[] = [];
    socket.on("data", (d: Buffer) => chunks.push(d));
    await new Promise((resolve) => socket.once("connect", resolve));
    socket.write(head);
    // In three pieces over ~300 ms: slower than one packet, well inside the deadline.
    for (const piece of [body.slice(0, 20), body.slice(20, 50), body.slice(50)]) {
      await new Promise((resolve) => setTimeout(resolve, 100));
      socket.write(piece);
    }
    await new Promise((resolve) => socket.once("close", resolve));
    const [answer] = parseResponses(Buffer.concat(chunks));
    assert.equal(answer?.status, 200);
  });

  test("--client-body-timeout-secs and client_body_timeout_secs set it; 60 s by default", async (t) => {
    assert.equal(DEFAULT_CLIENT_LIMITS.bodyTimeoutSecs, 60);
    const base = ["--worker-urls", "http://127.0.0.1:1"];
    assert.equal(parseGatewayArgs(base).clientLimits.bodyTimeoutSecs, 60);
    assert.equal(
      parseGatewayArgs([...base, "--client-body-timeout-secs", "12.5"]).clientLimits.bodyTimeoutSecs,
      12.5,
    );
    const file = await writeTempFile(t, "gw.yaml", "client_body_timeout_secs: 7\n");
    assert.equal(parseGatewayArgs([...base, "--config", file]).clientLimits.bodyTimeoutSecs, 7);
    assert.throws(
      () => parseGatewayArgs([...base, "--client-body-timeout-secs", "0"]),
      /client-body-timeout-secs/,
    );
  });
});
