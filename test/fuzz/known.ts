/**
 * The findings of issues 8 and 18 as fuzz cases, so that every run covers them whatever its seed
 * (test/fuzz/gateway.test.ts runs them first).
 */
import type { FuzzCase } from "./cases.js";

/** A valid chat request case, with parts replaced. */
export function valid(overrides: Partial<FuzzCase> = {}): FuzzCase {
  return {
    line: { method: "POST", target: "/v1/chat/completions", version: "HTTP/1.1", sep: " ", invalid: false },
    headers: {
      host: "normal",
      auth: { kind: "valid", tenant: 0 },
      priority: ["interactive"],
      tenantHeader: [],
      contentType: "application/json",
      hop: [],
      extra: [],
      many: 0,
      hugeValue: 0,
      invalid: false,
    },
    body: { kind: "chat", stream: false, maxTokens: 2, usage: false, content: "hello there" },
    framing: { kind: "cl-exact", splits: [], pick: 0 },
    client: { kind: "send", splits: [], delays: [] },
    workerFault: undefined,
    ...overrides,
  };
}

export const line = (method: string, target: string) => ({
  method,
  target,
  version: "HTTP/1.1",
  sep: " ",
  invalid: false,
});
export const headers = (h: Partial<FuzzCase["headers"]>) => ({ ...valid().headers, ...h });

/** The findings of issues 8 and 18, always among the inputs whatever the seed. */
export const KNOWN: FuzzCase[][] = [
  [
    valid({ line: line("POST", "*") }),
    valid({ line: line("OPTIONS", "*") }),
    valid({ line: line("POST", "ftp://host/x") }),
    valid({ line: line("POST", "http://host/v1/chat/completions") }),
    valid({ line: line("CONNECT", "127.0.0.1:80") }),
    // A tunnel request whose client resets the connection (the process must not crash).
    valid({
      line: line("CONNECT", "127.0.0.1:80"),
      client: { kind: "cut-after-send", afterMs: 0, rst: true },
    }),
    valid({
      line: line("CONNECT", "127.0.0.1:80"),
      client: { kind: "cut-after-send", afterMs: 2, rst: true },
    }),
    // Issue 8 #1, #2: the client's key and hop-by-hop headers stay at the gateway.
    valid({
      headers: headers({
        hop: [
          "connection: x-private, keep-alive",
          "x-private: secret",
          "keep-alive: timeout=5",
          "te: trailers",
        ],
        extra: ["proxy-authorization: Basic eA==", "trailer: x-t"],
      }),
    }),
    valid({ line: line("GET", "/metrics?x=1"), body: { kind: "empty" } }),
    valid({ line: line("GET", "/health?probe=1"), body: { kind: "empty" } }),
  ],
  [
    valid({ headers: headers({ many: 1000 }) }),
    valid({ headers: headers({ hugeValue: 20 * 1024, invalid: true }) }),
    valid({ line: { ...line("POST", "/v1/chat/completions"), version: "HTTP/1.10", invalid: true } }),
    valid({ body: { kind: "deep", where: "messages", depth: 30_000, shape: "array" } }),
    valid({ body: { kind: "deep", where: "prompt", depth: 30_000, shape: "array" } }),
    valid({ body: { kind: "odd-field", field: "max_tokens", raw: "1e30" } }),
    valid({ body: { kind: "odd-field", field: "max_tokens", raw: "1e308" } }),
    valid({ body: { kind: "odd-field", field: "n", raw: '"2"' } }),
  ],
  [
    valid({ framing: { kind: "te-gzip-chunked", splits: [7], pick: 0 } }),
    valid({
      framing: { kind: "chunked-bad-hex", splits: [], pick: 0 },
      headers: headers({ auth: { kind: "missing" } }),
    }),
    valid({
      framing: { kind: "chunked-bad-hex", splits: [], pick: 1 },
      headers: headers({ auth: { kind: "invalid" } }),
    }),
    valid({
      framing: { kind: "chunked-bad-hex", splits: [], pick: 0 },
      headers: headers({ hop: ["connection: upgrade", "upgrade: websocket"] }),
    }),
    // Issue 18 #3: an early 401, then the bad chunk arrives: still one answer.
    valid({
      framing: { kind: "chunked-bad-hex", splits: [], pick: 0 },
      headers: headers({ auth: { kind: "missing" } }),
      client: { kind: "body-later", delayMs: 30 },
    }),
    valid({
      framing: { kind: "chunked-bad-hex", splits: [], pick: 1 },
      headers: headers({ auth: { kind: "invalid" } }),
      client: { kind: "body-later", delayMs: 30 },
    }),
    // The gateway's own paths answer without reading the body: a malformed body after it must not
    // draw a second answer (found by the fuzz suite after issue 18).
    valid({ line: line("GET", "/health"), framing: { kind: "chunked-size-short", splits: [], pick: 0 } }),
    valid({ line: line("GET", "/metrics"), framing: { kind: "chunked-bad-hex", splits: [], pick: 0 } }),
    // An early 413, then the declared body keeps coming (issue 8 #3).
    valid({ framing: { kind: "cl-huge", splits: [], pick: 0 }, client: { kind: "body-later", delayMs: 30 } }),
    valid({ framing: { kind: "cl-huge", splits: [], pick: 0 } }),
    valid({ framing: { kind: "cl-te", splits: [5], pick: 0 } }),
    valid({ headers: headers({ hop: ["expect: foo"] }) }),
    valid({
      client: { kind: "cut-after-headers", afterMs: 0, rst: false },
      body: { kind: "chat", stream: true, maxTokens: 8, usage: true, content: "x" },
    }),
    valid({
      client: { kind: "cut-after-send", afterMs: 3, rst: true },
      body: { kind: "chat", stream: true, maxTokens: 64, usage: false, content: "x" },
    }),
  ],
];
