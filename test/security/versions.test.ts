/**
 * Issue 35, item 11: HTTP versions, over raw sockets. Only HTTP/1.0 and HTTP/1.1 are served; a
 * well-formed request line with another version (`HTTP/2.0`, `HTTP/0.9`, `HTTP/1.2`, ...) gets 505
 * `http_version_not_supported`; a malformed one (`HTTP/1.1x`, `HTTP/11`, no version at all, a
 * protocol other than HTTP) gets 400 `malformed_request` (RFC 9112 2.3, 3); `Transfer-Encoding` on
 * an HTTP/1.0 request is faulty framing (RFC 9112 6.1): 400 and closed. None reaches a worker, on
 * the data plane or the admin listener. Failed on 40ea629 (HTTP/1.1x got 505, HTTP/2.0, HTTP/0.9
 * and version-less lines were served, and so was chunked HTTP/1.0).
 */
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { startFleet } from "../helpers/harness.js";
import { CHAT, type RawResponse, rawExchange } from "./raw.js";

function assertJsonError(r: RawResponse | undefined, status: number, code: string, what: string): void {
  assert.ok(r, `${what}: expected a ${status} ${code} answer, got none`);
  assert.equal(r.status, status, `${what}: status (body ${r.body})`);
  assert.equal(r.headers["x-smg-error-code"], code, what);
  assert.match(r.headers["content-type"] ?? "", /application\/json/, what);
  const doc = JSON.parse(r.body) as { error: Record<string, unknown> };
  assert.equal(doc.error.code, code, what);
}

function workerRequests(fleet: { workers: Array<{ stats(): { totalRequests: number } }> }): number {
  return fleet.workers.reduce((n, w) => n + w.stats().totalRequests, 0);
}

/** A chat request with the given request line ending (what follows the target). */
function chat(lineEnd: string, extra = ""): string {
  return (
    `POST /v1/chat/completions${lineEnd}\r\nHost: gw\r\nContent-Type: application/json\r\n` +
    `Content-Length: ${CHAT.length}\r\n${extra}\r\n${CHAT}`
  );
}

const UNSUPPORTED = ["HTTP/2.0", "HTTP/0.9", "HTTP/1.2", "HTTP/3.0", "HTTP/9.9", "HTTP/2.1"];
const MALFORMED: Array<[string, string]> = [
  [" HTTP/1.1x", "a character after the version"],
  [" HTTP/1.10", "a three-digit version"],
  [" HTTP/11", "no dot"],
  [" HTTP/1", "no minor version"],
  [" HTTP/1.1 ", "a space after the version"],
  [" http/1.1", "lowercase HTTP"],
  [" HTTPS/1.1", "another protocol name"],
  [" RTSP/1.0", "RTSP"],
  [" RTSP/1.1", "RTSP/1.1"],
  ["", "no version at all (an HTTP/0.9 simple request)"],
];

describe("HTTP versions", () => {
  test("another well-formed version gets 505, on every path, and is never forwarded", async (t) => {
    const fleet = await startFleet(t);
    for (const version of UNSUPPORTED) {
      for (const bytes of [
        chat(` ${version}`),
        `GET /health ${version}\r\nHost: gw\r\n\r\n`,
        `GET /v1/models ${version}\r\nHost: gw\r\n\r\n`,
        `GET /metrics ${version}\r\n\r\n`,
      ]) {
        const what = JSON.stringify(bytes.slice(0, bytes.indexOf("\r\n")));
        const r = await rawExchange(fleet.gateway.port, bytes);
        assertJsonError(r.responses[0], 505, "http_version_not_supported", what);
        assert.equal(r.responses.length, 1, what);
        assert.equal(r.closedByServer, true, `${what}: closed`);
      }
    }
    assert.equal(workerRequests(fleet), 0);
  });

  test("a malformed version (or none) gets 400 malformed_request, never 505, never forwarded", async (t) => {
    const fleet = await startFleet(t);
    for (const [lineEnd, what] of MALFORMED) {
      for (const bytes of [chat(lineEnd), `GET /health${lineEnd}\r\nHost: gw\r\n\r\n`]) {
        const r = await rawExchange(fleet.gateway.port, bytes);
        assertJsonError(
          r.responses[0],
          400,
          "malformed_request",
          `${what}: ${JSON.stringify(bytes.slice(0, 40))}`,
        );
        assert.equal(r.responses.length, 1, what);
        assert.equal(r.closedByServer, true, `${what}: closed`);
      }
    }
    // A version-less line with no header at all, the way HTTP/0.9 clients send it.
    const bare = await rawExchange(fleet.gateway.port, "GET /health\r\n\r\n");
    assertJsonError(bare.responses[0], 400, "malformed_request", "GET /health CRLF CRLF");
    assert.equal(workerRequests(fleet), 0);
  });

  test("a bad version behind a served request: the first is served, the second refused", async (t) => {
    const fleet = await startFleet(t);
    for (const [second, status] of [
      ["GET /health HTTP/1.1x\r\nHost: gw\r\n\r\n", 400],
      ["GET /health HTTP/5.5\r\nHost: gw\r\n\r\n", 505],
      ["GET /health HTTP/2.0\r\nHost: gw\r\n\r\n", 505],
      ["GET /health\r\nHost: gw\r\n\r\n", 400],
    ] as const) {
      // The second line comes once the first answer went out (a parse error while an answer is
      // still being written closes the connection after that answer, without a second one).
      const r = await rawExchange(fleet.gateway.port, chat(" HTTP/1.1", "Connection: keep-alive\r\n"), {
        pieces: [second],
        pauseMs: 300,
      });
      assert.deepEqual(
        r.responses.map((x) => x.status),
        [200, status],
        `${JSON.stringify(second.slice(0, 24))}: ${r.raw.slice(0, 200)}`,
      );
    }
    assert.equal(workerRequests(fleet), 4);
  });

  test("HTTP/1.0 and HTTP/1.1 are served", async (t) => {
    const fleet = await startFleet(t);
    for (const version of ["HTTP/1.0", "HTTP/1.1"]) {
      const r = await rawExchange(fleet.gateway.port, chat(` ${version}`, "Connection: close\r\n"));
      assert.equal(r.responses[0]?.status, 200, `${version}: ${r.raw.slice(0, 200)}`);
    }
    assert.equal(workerRequests(fleet), 2);
  });

  test("Transfer-Encoding on an HTTP/1.0 request is faulty framing: 400, closed, never forwarded", async (t) => {
    const fleet = await startFleet(t);
    const chunked = `${CHAT.length.toString(16)}\r\n${CHAT}\r\n0\r\n\r\n`;
    for (const [what, head, code] of [
      ["chunked", "Transfer-Encoding: chunked\r\n", "unsupported_transfer_encoding"],
      [
        "chunked, keep-alive asked",
        "Transfer-Encoding: chunked\r\nConnection: keep-alive\r\n",
        "unsupported_transfer_encoding",
      ],
      // Node's parser refuses both headers together on any version before the gateway sees it.
      [
        "chunked with a Content-Length",
        `Transfer-Encoding: chunked\r\nContent-Length: ${chunked.length}\r\n`,
        "malformed_request",
      ],
    ] as const) {
      const r = await rawExchange(
        fleet.gateway.port,
        `POST /v1/chat/completions HTTP/1.0\r\nHost: gw\r\nContent-Type: application/json\r\n${head}\r\n${chunked}` +
          // A request behind it must not be served either: the framing is not to be trusted.
          `GET /health HTTP/1.0\r\n\r\n`,
      );
      assertJsonError(r.responses[0], 400, code, what);
      assert.equal(r.responses.length, 1, `${what}: ${r.raw.slice(0, 400)}`);
      assert.equal(r.responses[0]!.headers.connection, "close", what);
      assert.equal(r.closedByServer, true, `${what}: closed`);
    }
    assert.equal(workerRequests(fleet), 0);
  });

  test("the admin listener follows the same rules", async (t) => {
    const fleet = await startFleet(t, { adminToken: "admin-token-versions" });
    const port = fleet.gateway.adminServer!.port;
    const auth = "Authorization: Bearer admin-token-versions\r\n";
    const two = await rawExchange(port, `GET /api/v1/status HTTP/2.0\r\nHost: a\r\n${auth}\r\n`);
    assertJsonError(two.responses[0], 505, "http_version_not_supported", "admin HTTP/2.0");
    const none = await rawExchange(port, `GET /api/v1/status\r\nHost: a\r\n${auth}\r\n`);
    assertJsonError(none.responses[0], 400, "malformed_request", "admin without a version");
    const bad = await rawExchange(port, `GET /api/v1/status HTTP/1.1x\r\nHost: a\r\n${auth}\r\n`);
    assertJsonError(bad.responses[0], 400, "malformed_request", "admin HTTP/1.1x");
    const ok = await rawExchange(
      port,
      `GET /api/v1/status HTTP/1.1\r\nHost: a\r\n${auth}Connection: close\r\n\r\n`,
    );
    assert.equal(ok.responses[0]?.status, 200);
  });
});
