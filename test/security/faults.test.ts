/**
 * Worker faults: what the client sees, and that the slot always comes back. The bad workers are
 * raw TCP servers (a real worker cannot be made to misbehave this precisely); each case is one line
 * in docs/gateway.md ("When a worker fails").
 */
import assert from "node:assert/strict";
import { createServer as createHttpServer } from "node:http";
import { type AddressInfo, createServer, type Socket } from "node:net";
import { describe, type TestContext, test } from "node:test";
import { smallSchedulerYaml, startFleet, waitFor } from "../helpers/harness.js";
import { CHAT, rawChat, rawExchange } from "./raw.js";

/** A TCP server that answers every connection with `onRequest(socket)` once a request arrived. */
async function badWorker(t: TestContext, onRequest: (socket: Socket, head: string) => void): Promise<string> {
  const sockets = new Set<Socket>();
  const server = createServer((socket) => {
    sockets.add(socket);
    socket.on("close", () => sockets.delete(socket));
    socket.on("error", () => {});
    let buf = "";
    socket.on("data", (d: Buffer) => {
      buf += d.toString("latin1");
      const end = buf.indexOf("\r\n\r\n");
      if (end === -1) return;
      const head = buf.slice(0, end);
      buf = "";
      // Health checks and discovery get a plain, healthy answer.
      if (/^GET \/(health|get_server_info|v1\/models)/.test(head)) {
        const body = head.startsWith("GET /get_server_info") ? '{"max_running_requests":4}' : "{}";
        socket.write(
          `HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: ${body.length}\r\n\r\n${body}`,
        );
        return;
      }
      onRequest(socket, head);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  t.after(async () => {
    for (const s of sockets) s.destroy();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  });
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

async function fleetOn(t: TestContext, url: string, gateway: Record<string, unknown> = {}) {
  return startFleet(t, {
    workers: [],
    extraWorkers: [{ url, capacity: 4 }],
    schedulerYaml: smallSchedulerYaml(),
    health: { intervalSecs: 60 },
    gateway,
  });
}

async function slotsBack(fleet: Awaited<ReturnType<typeof fleetOn>>): Promise<void> {
  await waitFor(() => fleet.snapshot().inflight === 0 && fleet.snapshot().queued === 0, "slot released");
  assert.equal(fleet.gateway.workers.workers[0]!.inflight, 0);
}

describe("worker faults", () => {
  test("garbage instead of HTTP -> 502 upstream_bad_response", async (t) => {
    const url = await badWorker(t, (s) => s.end("this is not HTTP at all\r\n\r\n"));
    const fleet = await fleetOn(t, url);
    const r = await rawExchange(fleet.gateway.port, rawChat(CHAT));
    assert.equal(r.responses[0]?.status, 502);
    assert.equal(r.responses[0]?.headers["x-smg-error-code"], "upstream_bad_response");
    await slotsBack(fleet);
  });

  test("a reset before the headers -> 502 upstream_reset", async (t) => {
    const url = await badWorker(t, (s) => s.resetAndDestroy());
    const fleet = await fleetOn(t, url);
    const r = await rawExchange(fleet.gateway.port, rawChat(CHAT));
    assert.equal(r.responses[0]?.status, 502);
    assert.equal(r.responses[0]?.headers["x-smg-error-code"], "upstream_reset");
    await slotsBack(fleet);
  });

  test("a Content-Length longer than the body, then close -> 502 before the first byte", async (t) => {
    const url = await badWorker(t, (s) =>
      s.end('HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 500\r\n\r\n{"a":1}'),
    );
    const fleet = await fleetOn(t, url);
    const r = await rawExchange(fleet.gateway.port, rawChat(CHAT));
    // The first chunk arrived, so the answer started: the client sees a 200 that is cut short,
    // never a well-framed complete answer.
    const res = r.responses[0];
    if (res !== undefined && res.status === 200) {
      assert.notEqual(
        res.body.length,
        Number(res.headers["content-length"] ?? -1),
        "a cut answer, not a complete one",
      );
    } else {
      assert.ok(r.raw === "" || /^HTTP\/1\.1 502/.test(r.raw), r.raw.slice(0, 80));
    }
    await slotsBack(fleet);
  });

  test("bad JSON with status 200 passes through unchanged (the worker's answer), usage unknown", async (t) => {
    const url = await badWorker(t, (s) =>
      s.write("HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 9\r\n\r\n{not json"),
    );
    const fleet = await fleetOn(t, url);
    const r = await rawExchange(fleet.gateway.port, rawChat(CHAT));
    assert.equal(r.responses[0]?.status, 200);
    assert.equal(r.responses[0]?.body, "{not json");
    await slotsBack(fleet);
  });

  test("a worker that accepts and never answers -> 504 upstream_timeout", async (t) => {
    const url = await badWorker(t, () => {});
    const fleet = await fleetOn(t, url, { requestTimeoutSecs: 0.3 });
    const r = await rawExchange(fleet.gateway.port, rawChat(CHAT), { waitMs: 5000 });
    assert.equal(r.responses[0]?.status, 504);
    assert.equal(r.responses[0]?.headers["x-smg-error-code"], "upstream_timeout");
    await slotsBack(fleet);
  });

  test("a stream that stalls after its first byte is cut at the body idle timeout; the slot comes back", async (t) => {
    const url = await badWorker(t, (s) =>
      s.write(
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n6\r\ndata: \r\n",
      ),
    );
    const fleet = await fleetOn(t, url, { requestTimeoutSecs: 0.3 });
    const r = await rawExchange(fleet.gateway.port, rawChat(CHAT), { waitMs: 5000 });
    assert.equal(r.responses.length <= 1, true);
    assert.match(r.raw, /^HTTP\/1\.1 200/);
    assert.equal(r.closedByServer, true, "the cut stream closes the client connection");
    await slotsBack(fleet);
  });

  test("a worker killed mid-stream: the stream is cut, the slot released, the worker leaves the pool", async (t) => {
    const sockets = new Set<Socket>();
    const worker = createHttpServer((req, res) => {
      // Only an inference request streams (and kills the worker): the gateway's probes, its
      // engine recognition's GET /metrics among them, get what a worker would answer.
      if (req.method !== "POST") {
        if (req.url === "/health" || req.url === "/get_server_info" || req.url === "/v1/models") {
          res.end(req.url === "/get_server_info" ? '{"max_running_requests":4}' : "{}");
        } else {
          res.statusCode = 404;
          res.end();
        }
        return;
      }
      req.resume();
      res.writeHead(200, { "content-type": "text/event-stream" });
      res.write('data: {"choices":[{"delta":{"content":"a"}}]}\n\n');
      // Then the process "dies": every socket closes and nothing listens any more.
      setTimeout(() => {
        worker.close();
        for (const s of sockets) s.destroy();
      }, 50);
    });
    worker.on("connection", (s: Socket) => {
      sockets.add(s);
      s.on("close", () => sockets.delete(s));
    });
    await new Promise<void>((resolve) => worker.listen(0, "127.0.0.1", resolve));
    t.after(() => {
      for (const s of sockets) s.destroy();
      worker.close();
    });
    const url = `http://127.0.0.1:${(worker.address() as AddressInfo).port}`;
    const fleet = await fleetOn(t, url);
    const r = await rawExchange(fleet.gateway.port, rawChat(CHAT), { waitMs: 5000 });
    assert.match(r.raw, /^HTTP\/1\.1 200/);
    assert.match(r.raw, /data: /);
    assert.equal(r.closedByServer, true);
    await slotsBack(fleet);
    // The next request finds the worker gone (connection refused): 502, and the worker is out.
    const next = await rawExchange(fleet.gateway.port, rawChat(CHAT));
    assert.equal(next.responses[0]?.status, 502);
    assert.equal(next.responses[0]?.headers["x-smg-error-code"], "upstream_unavailable");
    assert.equal(fleet.gateway.workers.healthyCount, 0);
    const after = await rawExchange(fleet.gateway.port, rawChat(CHAT));
    assert.equal(after.responses[0]?.status, 503);
    assert.equal(after.responses[0]?.headers["x-smg-error-code"], "no_healthy_workers");
  });

  for (const reported of [0, -5, 1e12, 2.5, '"lots"', null]) {
    test(`get_server_info that lies (max_running_requests ${reported}) is not believed`, async (t) => {
      const worker = createHttpServer((req, res) => {
        req.resume();
        res.setHeader("content-type", "application/json");
        if (req.url === "/get_server_info") res.end(`{"max_running_requests":${reported}}`);
        else res.end("{}");
      });
      await new Promise<void>((resolve) => worker.listen(0, "127.0.0.1", resolve));
      t.after(() => new Promise<void>((resolve) => worker.close(() => resolve())));
      worker.on("connection", (s) => t.after(() => s.destroy()));
      const url = `http://127.0.0.1:${(worker.address() as AddressInfo).port}`;
      const fleet = await startFleet(t, {
        workers: [],
        extraWorkers: [{ url }],
        health: { intervalSecs: 60 },
      });
      assert.equal(fleet.gateway.capacity.capacity, 64, "the 64 default stands in for an unusable report");
      const r = await rawExchange(fleet.gateway.port, rawChat(CHAT));
      assert.equal(r.responses[0]?.status, 200);
    });
  }
});
