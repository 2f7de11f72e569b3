/**
 * Issue 35, item 10: the admin listener (at most 64 connections) cannot be locked out by whoever can
 * reach it. A connection that has not sent a request with the valid token is closed after a short
 * header timeout, and at the cap the oldest such connection makes room for a new one, so a request
 * with the valid token is served while 64 idle (or half-sent, or unauthenticated) sockets reconnect
 * as fast as they are closed. Raw sockets. Failed on 40ea629 (every valid-token request got 503).
 */
import assert from "node:assert/strict";
import { connect, type Socket } from "node:net";
import { describe, type TestContext, test } from "node:test";
import { ADMIN_CLIENT_LIMITS, type AdminServer, startAdminServer } from "../../src/gateway/admin/admin.js";
import { rawExchange } from "./raw.js";

const TOKEN = "admin-token-lockout";

async function startAdmin(t: TestContext, headersTimeoutSecs?: number): Promise<AdminServer> {
  const admin = await startAdminServer({
    host: "127.0.0.1",
    port: 0,
    token: TOKEN,
    handlers: {
      pinCapacity: () => ({}),
      status: () => ({ ok: true }),
      reload: async () => ({}),
    },
    ...(headersTimeoutSecs === undefined ? {} : { limits: { headersTimeoutSecs } }),
  });
  t.after(() => admin.close());
  return admin;
}

/**
 * `n` sockets that each send `send` (maybe nothing) and reconnect as soon as they are closed, for
 * as long as the flood runs.
 */
function flood(port: number, n: number, send: string) {
  const sockets = new Set<Socket>();
  let running = true;
  let reconnects = 0;
  const open = (): void => {
    if (!running) return;
    const s = connect(port, "127.0.0.1");
    sockets.add(s);
    s.on("connect", () => {
      if (send !== "") s.write(send);
    });
    s.on("data", () => {});
    s.on("error", () => {});
    s.on("close", () => {
      sockets.delete(s);
      if (!running) return;
      reconnects++;
      setImmediate(open);
    });
  };
  for (let i = 0; i < n; i++) open();
  return {
    get open() {
      return sockets.size;
    },
    get reconnects() {
      return reconnects;
    },
    stop(): void {
      running = false;
      for (const s of sockets) s.destroy();
    },
  };
}

const STATUS = `GET /api/v1/status HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer ${TOKEN}\r\nConnection: close\r\n\r\n`;

describe("the admin listener under a connection flood", () => {
  for (const [kind, send] of [
    ["idle sockets", ""],
    ["sockets that send half a request", "GET /api/v1/status HTTP/1.1\r\nHost: a\r\n"],
    [
      "sockets with a wrong token on keep-alive",
      "GET /api/v1/status HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer wrong\r\n\r\n",
    ],
  ] as const) {
    test(`64 ${kind} that reconnect do not keep a valid token out`, async (t) => {
      assert.equal(ADMIN_CLIENT_LIMITS.maxConnections, 64);
      const admin = await startAdmin(t);
      const attack = flood(admin.port, 64, send);
      t.after(() => attack.stop());
      // Let the flood fill the listener.
      await new Promise((resolve) => setTimeout(resolve, 300));
      assert.ok(attack.open >= 60, `the flood holds ${attack.open} sockets`);
      const statuses: number[] = [];
      for (let i = 0; i < 30; i++) {
        const r = await rawExchange(admin.port, STATUS, { waitMs: 3000 });
        statuses.push(r.responses[0]?.status ?? 0);
        await new Promise((resolve) => setTimeout(resolve, 10));
      }
      attack.stop();
      assert.deepEqual(
        statuses.filter((s) => s !== 200),
        [],
        `valid-token requests not served: ${JSON.stringify(statuses)}`,
      );
    });
  }

  test("a request without the valid token gets 401 and its connection is closed", async (t) => {
    const admin = await startAdmin(t);
    const r = await rawExchange(
      admin.port,
      "GET /api/v1/status HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer wrong\r\n\r\n",
      { waitMs: 3000 },
    );
    assert.equal(r.responses[0]?.status, 401);
    assert.equal(r.responses[0]?.headers["x-smg-error-code"], "invalid_admin_token");
    assert.equal(r.closedByServer, true);
  });

  test("connections holding the valid token are kept; at the cap, an unproven one goes first", async (t) => {
    const admin = await startAdmin(t);
    // 63 operator connections that proved the token, kept alive.
    const operators: Socket[] = [];
    t.after(() => {
      for (const s of operators) s.destroy();
    });
    for (let i = 0; i < 63; i++) {
      const s = connect(admin.port, "127.0.0.1");
      s.on("error", () => {});
      const answered = new Promise<void>((resolve) => s.once("data", () => resolve()));
      s.write(`GET /api/v1/status HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer ${TOKEN}\r\n\r\n`);
      await answered;
      operators.push(s);
    }
    const idle = connect(admin.port, "127.0.0.1");
    idle.on("error", () => {});
    const idleClosed = new Promise<void>((resolve) => idle.once("close", () => resolve()));
    await new Promise((resolve) => setTimeout(resolve, 50));
    // The 65th connection: the idle one is closed to make room, the operators keep theirs.
    const r = await rawExchange(admin.port, STATUS, { waitMs: 3000 });
    assert.equal(r.responses[0]?.status, 200);
    await idleClosed;
    assert.equal(operators.filter((s) => s.destroyed).length, 0, "no operator connection was closed");
    // All 64 proved: now a newcomer is refused (503), never an operator evicted.
    const more = connect(admin.port, "127.0.0.1");
    more.on("error", () => {});
    const answered = new Promise<void>((resolve) => more.once("data", () => resolve()));
    more.write(`GET /api/v1/status HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer ${TOKEN}\r\n\r\n`);
    await answered;
    operators.push(more);
    const full = await rawExchange(admin.port, STATUS, { waitMs: 3000 });
    assert.equal(full.responses[0]?.status, 503);
    assert.equal(full.responses[0]?.headers["x-smg-error-code"], "too_many_connections");
  });

  test("an idle connection is closed after the admin header timeout (5 s by default)", async (t) => {
    assert.equal(ADMIN_CLIENT_LIMITS.headersTimeoutSecs, 5);
    const admin = await startAdmin(t, 0.4);
    const s = connect(admin.port, "127.0.0.1");
    s.on("error", () => {});
    s.on("data", () => {});
    const started = performance.now();
    await new Promise((resolve) => s.once("close", resolve));
    const ms = performance.now() - started;
    assert.ok(ms < 2000, `closed after ${Math.round(ms)} ms`);
  });
});
