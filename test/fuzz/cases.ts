/**
 * The fuzz suite's inputs: fast-check arbitraries for raw HTTP/1.1 requests (request lines, header
 * names and values, framing, JSON bodies, slow and cut clients), kept as plain data so fast-check
 * can print and shrink them, and `render`, which turns one into bytes, a client plan, and what a
 * correct gateway must do with it (whether an answer is owed, how many answers are possible).
 */
import fc from "fast-check";
import type { ExchangePlan, Segment } from "./raw-http.js";

/** API keys of the fuzz fleet's three tenants (auth:alpha, auth:beta, auth:gamma). */
export const TENANT_KEYS = ["fuzz-key-alpha", "fuzz-key-beta", "fuzz-key-gamma"] as const;
export const TENANT_NAMES = ["alpha", "beta", "gamma"] as const;
export const TRUSTED_TENANT_HEADER = "x-tenant-id";
/** The fleet's --max-payload-size. */
export const FUZZ_MAX_PAYLOAD = 256 * 1024;

// --- the case model ------------------------------------------------------------------------------

/**
 * How the server can treat the bytes as sent:
 * - complete: a well-framed message, all of it sent;
 * - invalid: the server's parser can tell the bytes are wrong from what was sent;
 * - incomplete: the server may legitimately wait for more bytes;
 * - ambiguous: parsers differ (complete for one, invalid for another): an answer is owed either way.
 */
export type Completeness = "complete" | "invalid" | "incomplete" | "ambiguous";

export interface RequestLine {
  method: string;
  target: string;
  version: string;
  /** The separator between the parts (normally one space). */
  sep: string;
  /** The request line is broken for any parser (bad method characters, bad spacing...). */
  invalid: boolean;
}

export type AuthSpec =
  | { kind: "valid"; tenant: number }
  | { kind: "missing" }
  | { kind: "invalid" }
  | { kind: "raw"; lines: readonly string[] };

export interface HeaderSpec {
  host: "normal" | "missing" | "duplicate" | "empty" | "odd";
  auth: AuthSpec;
  /** x-smg-priority lines (0, 1 or more). */
  priority: readonly string[];
  /** Trusted tenant header lines. */
  tenantHeader: readonly string[];
  contentType: string | undefined;
  /** Connection / Upgrade / Expect / Keep-Alive / TE / Proxy-* lines. */
  hop: readonly string[];
  /** Other lines, raw (some are not valid header lines at all). */
  extra: string[];
  /** Count of generated `x-h-<i>: v` lines (0, 50, 200, 1000, ...). */
  many: number;
  /** A header with a value of this many bytes (0 = none). */
  hugeValue: number;
  /** The header part is broken for any parser (control characters, bad names...). */
  invalid: boolean;
}

export type BodySpec =
  | { kind: "chat"; stream: boolean; maxTokens: number; usage: boolean; content: string }
  | { kind: "completion"; stream: boolean; maxTokens: number; prompt: string }
  | { kind: "generate"; maxNewTokens: number; text: string }
  | { kind: "odd-field"; field: string; raw: string }
  | { kind: "deep"; where: "messages" | "prompt" | "content"; depth: number; shape: "array" | "object" }
  | { kind: "big"; bytes: number }
  | { kind: "raw"; text: string }
  | { kind: "bytes"; bytes: number[] }
  | { kind: "empty" };

export type FramingKind =
  | "cl-exact"
  | "cl-short"
  | "cl-long"
  | "cl-invalid"
  | "cl-dup-same"
  | "cl-dup-diff"
  | "cl-huge"
  | "none"
  | "chunked"
  | "chunked-ext-trailer"
  | "chunked-bad-hex"
  | "chunked-overflow"
  | "chunked-size-short"
  | "chunked-size-long"
  | "chunked-no-end"
  | "chunked-lf-only"
  | "te-gzip-chunked"
  | "te-chunked-gzip"
  | "te-identity"
  | "te-odd"
  | "te-dup"
  | "cl-te";

export interface FramingSpec {
  kind: FramingKind;
  /** Chunk sizes to split the body into (chunked kinds). */
  splits: number[];
  /** A pick for the kinds that need one (the invalid CL text, the odd TE value...). */
  pick: number;
}

export type ClientSpec =
  | { kind: "send"; splits: number[]; delays: number[] }
  | { kind: "trickle"; pieces: number; delayMs: number }
  /** The head, a pause, then the body (an early answer then meets the body's bytes). */
  | { kind: "body-later"; delayMs: number }
  | { kind: "cut-after-headers"; afterMs: number; rst: boolean }
  | { kind: "cut-mid-body"; afterMs: number; rst: boolean }
  | { kind: "cut-after-send"; afterMs: number; rst: boolean };

export interface FuzzCase {
  line: RequestLine;
  headers: HeaderSpec;
  body: BodySpec;
  framing: FramingSpec;
  client: ClientSpec;
  /** x-mock-fail asked of the worker: the worker's failures are then attributable. */
  workerFault: string | undefined;
}

// --- arbitraries ---------------------------------------------------------------------------------

/** A control character other than tab (what a header value must not hold). */
function hasControl(text: string): boolean {
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if ((c < 0x20 && c !== 0x09) || c === 0x7f) return true;
  }
  return false;
}

const w = <T>(weight: number, arbitrary: fc.Arbitrary<T>) => ({ weight, arbitrary });

const TOKEN_CHARS = "!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
const token = (min: number, max: number) =>
  fc
    .array(fc.constantFrom(...TOKEN_CHARS), { minLength: min, maxLength: max })
    .map((chars) => chars.join(""));

const methodArb: fc.Arbitrary<{ method: string; invalid: boolean }> = fc.oneof(
  w(60, fc.constant({ method: "POST", invalid: false })),
  w(
    20,
    fc
      .constantFrom("GET", "HEAD", "PUT", "DELETE", "PATCH", "OPTIONS", "CONNECT", "TRACE")
      .map((method) => ({ method, invalid: false })),
  ),
  w(
    6,
    fc
      .constantFrom("PROPFIND", "M-SEARCH", "PURGE", "PRI", "SEARCH", "QUERY", "LINK", "SOURCE")
      .map((method) => ({ method, invalid: false })),
  ),
  // Tokens HTTP allows but no server knows: either 400/501 or forwarded, never a crash.
  w(
    6,
    fc
      .oneof(fc.constantFrom("FOO", "get", "Post", "P0ST", "BREW", "X"), token(1, 12))
      .map((method) => ({ method, invalid: false })),
  ),
  // Not a token at all.
  w(
    3,
    fc
      .constantFrom("GE T", "", "P\x00ST", "POST\t", "GET/", "(GET)")
      .map((m) => ({ method: m, invalid: true })),
  ),
);

const ORIGIN_PATHS = [
  "/v1/chat/completions",
  "/v1/completions",
  "/generate",
  "/v1/chat/completions?x=1",
  "/v1/models",
  "/metrics",
  "/metrics?x=1",
  "/health",
  "/health?probe=1",
  "/readiness",
  "/readiness?x",
  "/get_server_info",
  "/nope",
  "/",
  "/v1/chat/completions/",
  "/V1/CHAT/COMPLETIONS",
  "/v1/chat/completions#frag",
  "/%2e%2e/metrics",
  "/v1/../metrics",
  "/v1/chat/completions;x=1",
  "/mock/stats",
  "/v1/chat/completions?a=%ff%00",
];

const targetArb: fc.Arbitrary<{ target: string; invalid: boolean }> = fc.oneof(
  w(50, fc.constant({ target: "/v1/chat/completions", invalid: false })),
  w(
    20,
    fc.constantFrom(...ORIGIN_PATHS).map((target) => ({ target, invalid: false })),
  ),
  w(
    5,
    fc.constantFrom("*", "*?x").map((target) => ({ target, invalid: false })),
  ),
  w(
    6,
    fc
      .constantFrom(
        "http://127.0.0.1/v1/chat/completions",
        "http://host/v1/chat/completions",
        "ftp://host/x",
        "https://example.com:443/metrics",
        "//v1/chat/completions",
        "http:/x",
      )
      .map((target) => ({ target, invalid: false })),
  ),
  w(
    2,
    fc.constantFrom("127.0.0.1:80", "host:443", "[::1]:8080").map((target) => ({ target, invalid: false })),
  ),
  w(
    3,
    fc
      .constantFrom(4000, 9000, 20_000, 70_000)
      .map((n) => ({ target: `/v1/chat/completions?q=${"a".repeat(n)}`, invalid: false })),
  ),
  w(
    3,
    fc
      .constantFrom("/a b", "/\x00", "/caf\u00e9", "/\x7f", "", "/%", "/\r")
      .map((target) => ({ target, invalid: target !== "/%" })),
  ),
);

const versionArb: fc.Arbitrary<string> = fc.oneof(
  w(80, fc.constant("HTTP/1.1")),
  w(8, fc.constant("HTTP/1.0")),
  w(
    6,
    fc.constantFrom(
      "HTTP/2.0",
      "HTTP/0.9",
      "HTTP/9.9",
      "HTTP/1.2",
      "HTTP/3",
      "HTTP/1.10",
      "HTTP/11111111111.1",
    ),
  ),
  w(3, fc.constantFrom("HTTPS/1.1", "http/1.1", "HTTP/1.1 ", "HTTP/1.x", "")),
);

const lineArb: fc.Arbitrary<RequestLine> = fc
  .record({
    m: methodArb,
    t: targetArb,
    version: versionArb,
    sep: fc.oneof(w(40, fc.constant(" ")), w(1, fc.constantFrom("  ", "\t"))),
  })
  .map(({ m, t, version, sep }) => {
    const versionOk = /^HTTP\/\d\.\d$/.test(version);
    return {
      method: m.method,
      target: t.target,
      version,
      sep,
      // Only what Node's parser certainly refuses counts as invalid (an answer is then owed even
      // when the framing leaves the body open); "" (no version), HTTP/2.0 and double spaces pass it.
      invalid: m.invalid || t.invalid || sep === "\t" || (!versionOk && /^HTTP\/\d+\.\d+$/.test(version)),
    };
  });

const priorityValue = fc.oneof(
  w(10, fc.constantFrom("system", "interactive", "default", "bulk")),
  w(3, fc.constantFrom("SYSTEM", " Interactive ", "", "urgent", "0", "system, bulk", "bulk;q=1")),
  w(1, fc.string({ maxLength: 40 })),
);

const authArb: fc.Arbitrary<AuthSpec> = fc.oneof(
  w(
    70,
    fc.integer({ min: 0, max: 2 }).map((tenant) => ({ kind: "valid" as const, tenant })),
  ),
  w(8, fc.constant({ kind: "missing" as const })),
  w(8, fc.constant({ kind: "invalid" as const })),
  w(
    6,
    fc
      .constantFrom(
        ["authorization: Bearer"],
        ["authorization: Basic Zm9vOmJhcg=="],
        ["authorization: bearer fuzz-key-beta"],
        [`authorization: Bearer ${TENANT_KEYS[0]}`, `authorization: Bearer ${TENANT_KEYS[2]}`],
        [`authorization: Bearer ${TENANT_KEYS[1]}`, "authorization: Bearer nope"],
        [`authorization:   Bearer    ${TENANT_KEYS[2]}   `],
        [`authorization: Bearer ${"k".repeat(6000)}`],
        ["authorization: "],
      )
      .map((lines) => ({ kind: "raw" as const, lines })),
  ),
);

/** Header lines with a reason to be there; `invalid` marks the ones no parser accepts. */
const extraLineArb: fc.Arbitrary<{ line: string; invalid: boolean }> = fc.oneof(
  w(
    10,
    fc
      .record({ name: token(1, 20), value: fc.string({ maxLength: 30, unit: "grapheme-ascii" }) })
      .map(({ name, value }) => ({
        line: `${name}: ${value.replace(/[\r\n]/g, "")}`,
        invalid: hasControl(value.replace(/[\r\n]/g, "")),
      })),
  ),
  w(
    4,
    fc.constantFrom(
      { line: "x-a: b\x00c", invalid: true },
      { line: "x-a: b\x01c", invalid: true },
      { line: "x-a: b\x7fc", invalid: true },
      { line: "x-a: caf\u00e9", invalid: false },
      { line: "x-a: \tb\t", invalid: false },
      { line: "bad name: x", invalid: true },
      { line: "x@y: z", invalid: true },
      { line: ": novalue", invalid: true },
      { line: "nocolon", invalid: true },
      { line: "x-a : b", invalid: true },
      { line: "x-folded: a\r\n  continued", invalid: true },
      { line: " leading-space: x", invalid: true },
      { line: "x-a: b\rc", invalid: true },
      { line: "content-length\x00: 1", invalid: true },
    ),
  ),
  w(
    3,
    fc.constantFrom(
      { line: "x-smg-error-code: forged", invalid: false },
      { line: "x-sluice-admission: forged", invalid: false },
      { line: "x-forwarded-for: 1.2.3.4", invalid: false },
      { line: "proxy-authorization: Basic eA==", invalid: false },
      { line: "cookie: a=b", invalid: false },
      { line: "accept-encoding: gzip, br", invalid: false },
      { line: "content-encoding: gzip", invalid: false },
      { line: "trailer: x-t", invalid: false },
      { line: "x-mock-ttft-ms: 5", invalid: false },
    ),
  ),
);

const hopArb: fc.Arbitrary<readonly string[]> = fc.oneof(
  w(60, fc.constant([])),
  w(6, fc.constantFrom(["connection: close"], ["connection: keep-alive"], ["connection: close, keep-alive"])),
  w(
    4,
    fc.constantFrom(
      ["connection: upgrade", "upgrade: websocket"],
      ["connection: Upgrade, HTTP2-Settings", "upgrade: h2c", "http2-settings: AAMAAABkAAQAAP__"],
      ["upgrade: websocket"],
      ["connection: upgrade"],
    ),
  ),
  w(
    4,
    fc.constantFrom(
      ["expect: 100-continue"],
      ["expect: 100-Continue"],
      ["expect: foo"],
      ["expect: 100-continue", "expect: 100-continue"],
    ),
  ),
  w(
    3,
    fc.constantFrom(
      ["connection: x-private", "x-private: secret"],
      ["keep-alive: timeout=5"],
      ["te: trailers"],
      ["te: gzip"],
      ["proxy-connection: keep-alive"],
    ),
  ),
);

const headersArb: fc.Arbitrary<HeaderSpec> = fc
  .record({
    host: fc.oneof(
      w(40, fc.constant("normal" as const)),
      w(4, fc.constantFrom("missing" as const, "duplicate" as const, "empty" as const, "odd" as const)),
    ),
    auth: authArb,
    priority: fc.oneof(
      w(6, fc.array(priorityValue, { minLength: 1, maxLength: 1 })),
      w(3, fc.constant([] as string[])),
      w(1, fc.array(priorityValue, { minLength: 2, maxLength: 3 })),
      w(1, fc.constant(["x".repeat(5000)])),
    ),
    tenantHeader: fc.oneof(
      w(8, fc.constant([] as string[])),
      w(2, fc.constantFrom(["acme"], ["alpha"], ["auth:alpha"], [""], ["a", "b"], ["  spaced  "])),
    ),
    contentType: fc.oneof(
      w(20, fc.constant("application/json")),
      w(
        3,
        fc.constantFrom(
          undefined,
          "text/plain",
          "application/json; charset=utf-8",
          "application/x-www-form-urlencoded",
          "APPLICATION/JSON",
          "",
          "multipart/form-data; boundary=x",
        ),
      ),
    ),
    hop: hopArb,
    extra: fc.oneof(
      w(10, fc.constant([] as Array<{ line: string; invalid: boolean }>)),
      w(5, fc.array(extraLineArb, { minLength: 1, maxLength: 4 })),
    ),
    many: fc.oneof(w(30, fc.constant(0)), w(3, fc.constantFrom(50, 200, 1000, 1000, 3000))),
    hugeValue: fc.oneof(
      w(30, fc.constant(0)),
      w(2, fc.constantFrom(8 * 1024, 15 * 1024, 20 * 1024, 100 * 1024)),
    ),
  })
  .map(({ extra, ...h }) => ({
    ...h,
    extra: extra.map((e) => e.line),
    invalid: extra.some((e) => e.invalid),
  }));

const ODD_FIELDS: Array<[string, string]> = [
  ["max_tokens", "1e30"],
  ["max_tokens", "1e308"],
  ["max_tokens", "1e400"],
  ["max_tokens", "-1"],
  ["max_tokens", "0"],
  ["max_tokens", "-0"],
  ["max_tokens", "1.5"],
  ["max_tokens", '"5"'],
  ["max_tokens", '"NaN"'],
  ["max_tokens", '"Infinity"'],
  ["max_tokens", "null"],
  ["max_tokens", "[]"],
  ["max_tokens", "{}"],
  ["max_tokens", "true"],
  ["max_tokens", "9007199254740993"],
  ["max_tokens", "2048"],
  ["max_tokens", "100000"],
  ["max_completion_tokens", "1e30"],
  ["max_completion_tokens", "-5"],
  ["max_completion_tokens", '"lots"'],
  ["n", "0"],
  ["n", "-1"],
  ["n", '"2"'],
  ["n", "1e9"],
  ["n", "2.5"],
  ["messages", '"hi"'],
  ["messages", "5"],
  ["messages", "null"],
  ["messages", "[1,2]"],
  ["messages", '[{"role":"user","content":5}]'],
  ["messages", '[{"role":"user","content":{"text":"x"}}]'],
  ["messages", "{}"],
  ["messages", "[]"],
  ["prompt", "5"],
  ["prompt", "{}"],
  ["prompt", "[[1,2],[3]]"],
  ["prompt", '["a",1,null]'],
  ["stream", '"yes"'],
  ["stream_options", '{"include_usage":"yes"}'],
  ["model", "5"],
  ["model", '""'],
  ["sampling_params", '{"max_new_tokens":1e30}'],
];

const bodyArb: fc.Arbitrary<BodySpec> = fc.oneof(
  w(
    40,
    fc.record({
      kind: fc.constant("chat" as const),
      stream: fc.boolean(),
      maxTokens: fc.oneof(w(10, fc.integer({ min: 1, max: 8 })), w(2, fc.integer({ min: 0, max: 64 }))),
      usage: fc.boolean(),
      content: fc.oneof(
        w(10, fc.constant("hello there")),
        w(2, fc.string({ maxLength: 200, unit: "grapheme" })),
      ),
    }),
  ),
  w(
    5,
    fc.record({
      kind: fc.constant("completion" as const),
      stream: fc.boolean(),
      maxTokens: fc.integer({ min: 0, max: 8 }),
      prompt: fc.string({ maxLength: 50 }),
    }),
  ),
  w(
    3,
    fc.record({
      kind: fc.constant("generate" as const),
      maxNewTokens: fc.integer({ min: 0, max: 8 }),
      text: fc.string({ maxLength: 50 }),
    }),
  ),
  w(
    14,
    fc.constantFrom(...ODD_FIELDS).map(([field, raw]) => ({ kind: "odd-field" as const, field, raw })),
  ),
  w(
    4,
    fc.record({
      kind: fc.constant("deep" as const),
      where: fc.constantFrom("messages" as const, "prompt" as const, "content" as const),
      depth: fc.constantFrom(100, 5000, 30_000),
      shape: fc.constantFrom("array" as const, "object" as const),
    }),
  ),
  w(
    2,
    fc.constantFrom(100 * 1024, FUZZ_MAX_PAYLOAD + 1).map((bytes) => ({ kind: "big" as const, bytes })),
  ),
  w(
    5,
    fc
      .oneof(
        fc.constantFrom("{", "}", "null", "[]", '"str"', "{}", '{"messages":', "\ufeff{}", "{'a':1}", "0"),
        fc.string({ maxLength: 60 }),
      )
      .map((text) => ({ kind: "raw" as const, text })),
  ),
  w(
    2,
    fc
      .array(fc.integer({ min: 0, max: 255 }), { maxLength: 64 })
      .map((bytes) => ({ kind: "bytes" as const, bytes })),
  ),
  w(4, fc.constant({ kind: "empty" as const })),
);

const framingArb: fc.Arbitrary<FramingSpec> = fc.record({
  kind: fc.oneof(
    w(60, fc.constant("cl-exact" as const)),
    w(10, fc.constantFrom("chunked" as const, "chunked-ext-trailer" as const)),
    w(
      12,
      fc.constantFrom(
        "cl-short" as const,
        "cl-long" as const,
        "cl-invalid" as const,
        "cl-dup-same" as const,
        "cl-dup-diff" as const,
        "cl-huge" as const,
        "none" as const,
      ),
    ),
    w(
      10,
      fc.constantFrom(
        "chunked-bad-hex" as const,
        "chunked-overflow" as const,
        "chunked-size-short" as const,
        "chunked-size-long" as const,
        "chunked-no-end" as const,
        "chunked-lf-only" as const,
      ),
    ),
    w(
      8,
      fc.constantFrom(
        "te-gzip-chunked" as const,
        "te-chunked-gzip" as const,
        "te-identity" as const,
        "te-odd" as const,
        "te-dup" as const,
        "cl-te" as const,
      ),
    ),
  ),
  splits: fc.array(fc.integer({ min: 1, max: 64 }), { maxLength: 4 }),
  pick: fc.nat(99),
});

const clientArb: fc.Arbitrary<ClientSpec> = fc.oneof(
  w(
    70,
    fc.record({
      kind: fc.constant("send" as const),
      splits: fc.array(fc.nat(4096), { maxLength: 2 }),
      delays: fc.array(fc.integer({ min: 0, max: 5 }), { maxLength: 2 }),
    }),
  ),
  w(
    5,
    fc.record({
      kind: fc.constant("trickle" as const),
      pieces: fc.integer({ min: 3, max: 8 }),
      delayMs: fc.integer({ min: 5, max: 35 }),
    }),
  ),
  w(5, fc.record({ kind: fc.constant("body-later" as const), delayMs: fc.integer({ min: 5, max: 60 }) })),
  w(
    6,
    fc.record({
      kind: fc.constant("cut-after-headers" as const),
      afterMs: fc.integer({ min: 0, max: 100 }),
      rst: fc.boolean(),
    }),
  ),
  w(
    6,
    fc.record({
      kind: fc.constant("cut-mid-body" as const),
      afterMs: fc.integer({ min: 0, max: 100 }),
      rst: fc.boolean(),
    }),
  ),
  w(
    10,
    fc.record({
      kind: fc.constant("cut-after-send" as const),
      afterMs: fc.integer({ min: 0, max: 60 }),
      rst: fc.boolean(),
    }),
  ),
);

export const WORKER_FAULTS = ["500", "503", "reset", "garbage", "bad-json", "bad-length", "die-mid-stream"];

export const caseArb: fc.Arbitrary<FuzzCase> = fc.record({
  line: lineArb,
  headers: headersArb,
  body: bodyArb,
  framing: framingArb,
  client: clientArb,
  workerFault: fc.oneof(w(40, fc.constant(undefined)), w(1, fc.constantFrom(...WORKER_FAULTS))),
});

/** A batch of cases sent at once (concurrently, against capacity 4). */
export const batchArb = (maxLength = 12): fc.Arbitrary<FuzzCase[]> =>
  fc.array(caseArb, { minLength: 1, maxLength });

// --- rendering -----------------------------------------------------------------------------------

function bodyText(spec: BodySpec): Buffer {
  switch (spec.kind) {
    case "chat": {
      const body: Record<string, unknown> = {
        model: "mock-llm",
        messages: [{ role: "user", content: spec.content }],
        max_tokens: spec.maxTokens,
      };
      if (spec.stream) body["stream"] = true;
      if (spec.stream && spec.usage) body["stream_options"] = { include_usage: true };
      return Buffer.from(JSON.stringify(body));
    }
    case "completion":
      return Buffer.from(
        JSON.stringify({
          model: "mock-llm",
          prompt: spec.prompt,
          max_tokens: spec.maxTokens,
          stream: spec.stream,
        }),
      );
    case "generate":
      return Buffer.from(
        JSON.stringify({ text: spec.text, sampling_params: { max_new_tokens: spec.maxNewTokens } }),
      );
    case "odd-field": {
      const base: Record<string, string> = {
        model: '"mock-llm"',
        messages: '[{"role":"user","content":"hi"}]',
        max_tokens: "4",
      };
      base[spec.field] = spec.raw;
      return Buffer.from(
        `{${Object.entries(base)
          .map(([k, v]) => `"${k}":${v}`)
          .join(",")}}`,
      );
    }
    case "deep": {
      const open = spec.shape === "array" ? "[" : '{"content":';
      const close = spec.shape === "array" ? "]" : "}";
      const nested = `${open.repeat(spec.depth)}"x"${close.repeat(spec.depth)}`;
      const value = spec.where === "content" ? `[{"role":"user","content":${nested}}]` : nested;
      const field = spec.where === "content" ? "messages" : spec.where;
      return Buffer.from(`{"model":"mock-llm","max_tokens":2,"${field}":${value}}`);
    }
    case "big": {
      const overhead = '{"model":"mock-llm","max_tokens":1,"messages":[{"role":"user","content":""}]}'.length;
      return Buffer.from(
        `{"model":"mock-llm","max_tokens":1,"messages":[{"role":"user","content":"${"a".repeat(Math.max(0, spec.bytes - overhead))}"}]}`,
      );
    }
    case "raw":
      return Buffer.from(spec.text);
    case "bytes":
      return Buffer.from(spec.bytes);
    case "empty":
      return Buffer.alloc(0);
  }
}

function chunk(body: Buffer, splits: number[], { ext = false }: { ext?: boolean } = {}): Buffer[] {
  const parts: Buffer[] = [];
  let pos = 0;
  let i = 0;
  while (pos < body.length) {
    const size = Math.min(body.length - pos, splits.length > 0 ? splits[i++ % splits.length]! : body.length);
    parts.push(
      Buffer.from(`${size.toString(16)}${ext ? ";name=value" : ""}\r\n`),
      body.subarray(pos, pos + size),
      Buffer.from("\r\n"),
    );
    pos += size;
  }
  return parts;
}

interface Framed {
  lines: string[];
  body: Buffer;
  completeness: Completeness;
  /** Bytes after the message that a server parses as another request. */
  trailing: boolean;
}

function frame(spec: FramingSpec, body: Buffer): Framed {
  const n = body.length;
  const chunked = (parts: Buffer[], end = "0\r\n\r\n") => Buffer.concat([...parts, Buffer.from(end)]);
  switch (spec.kind) {
    case "cl-exact":
      return { lines: [`content-length: ${n}`], body, completeness: "complete", trailing: false };
    case "cl-short": {
      if (n < 2) return { lines: [`content-length: ${n}`], body, completeness: "complete", trailing: false };
      return {
        lines: [`content-length: ${Math.floor(n / 2)}`],
        body,
        completeness: "complete",
        trailing: true,
      };
    }
    case "cl-long":
      return {
        lines: [`content-length: ${n + 1 + spec.pick}`],
        body,
        completeness: "incomplete",
        trailing: false,
      };
    case "cl-invalid": {
      const values = [
        "abc",
        "-1",
        "1e3",
        `${n}.0`,
        `+${n}`,
        `0x${n.toString(16)}`,
        `${n} ${n}`,
        "",
        "99999999999999999999999",
      ];
      return {
        lines: [`content-length: ${values[spec.pick % values.length]}`],
        body,
        completeness: "invalid",
        trailing: false,
      };
    }
    case "cl-dup-same":
      return {
        lines: [`content-length: ${n}`, `content-length: ${n}`],
        body,
        completeness: "ambiguous",
        trailing: false,
      };
    case "cl-dup-diff":
      return {
        lines:
          spec.pick % 2 === 0
            ? [`content-length: ${n}`, `content-length: ${n + 1}`]
            : [`content-length: ${n}, ${n + 1}`],
        body,
        completeness: "invalid",
        trailing: false,
      };
    case "cl-huge":
      // Declared above --max-payload-size: a correct gateway answers 413 without waiting for it.
      return {
        lines: [`content-length: ${FUZZ_MAX_PAYLOAD + 1 + spec.pick * 1000}`],
        body,
        completeness: "complete",
        trailing: false,
      };
    case "none":
      return { lines: [], body, completeness: "complete", trailing: n > 0 };
    case "chunked":
      return {
        lines: ["transfer-encoding: chunked"],
        body: chunked(chunk(body, spec.splits)),
        completeness: "complete",
        trailing: false,
      };
    case "chunked-ext-trailer":
      return {
        lines: ["transfer-encoding: chunked"],
        body: chunked(chunk(body, spec.splits, { ext: true }), "0\r\nx-trailer: t\r\n\r\n"),
        completeness: "complete",
        trailing: false,
      };
    case "chunked-bad-hex":
      return {
        lines: ["transfer-encoding: chunked"],
        body: Buffer.concat([
          Buffer.from(spec.pick % 2 === 0 ? "zz\r\n" : "-5\r\n"),
          body,
          Buffer.from("\r\n0\r\n\r\n"),
        ]),
        completeness: "invalid",
        trailing: false,
      };
    case "chunked-overflow":
      return {
        lines: ["transfer-encoding: chunked"],
        body: Buffer.concat([Buffer.from("ffffffffffffffffff\r\n"), body, Buffer.from("\r\n0\r\n\r\n")]),
        completeness: "invalid",
        trailing: false,
      };
    case "chunked-size-short":
      // Declares fewer bytes than follow: the parser then finds data where a CRLF must be.
      return {
        lines: ["transfer-encoding: chunked"],
        body: Buffer.concat([
          Buffer.from(`${Math.max(0, n - 3).toString(16)}\r\n`),
          body,
          Buffer.from("xyz\r\n0\r\n\r\n"),
        ]),
        completeness: n >= 3 ? "invalid" : "ambiguous",
        trailing: false,
      };
    case "chunked-size-long":
      // Declares more bytes than follow: the parser takes the terminator as data and waits.
      return {
        lines: ["transfer-encoding: chunked"],
        body: Buffer.concat([
          Buffer.from(`${(n + 100).toString(16)}\r\n`),
          body,
          Buffer.from("\r\n0\r\n\r\n"),
        ]),
        completeness: "incomplete",
        trailing: false,
      };
    case "chunked-no-end":
      return {
        lines: ["transfer-encoding: chunked"],
        body: Buffer.concat(chunk(body, spec.splits)),
        completeness: "incomplete",
        trailing: false,
      };
    case "chunked-lf-only":
      return {
        lines: ["transfer-encoding: chunked"],
        body: Buffer.concat([Buffer.from(`${n.toString(16)}\n`), body, Buffer.from("\n0\n\n")]),
        completeness: "ambiguous",
        trailing: false,
      };
    case "te-gzip-chunked":
      return {
        lines: [
          spec.pick % 2 === 0
            ? "transfer-encoding: gzip, chunked"
            : "transfer-encoding: gzip\r\ntransfer-encoding: chunked",
        ],
        body: chunked(chunk(body, spec.splits)),
        completeness: "complete",
        trailing: false,
      };
    case "te-chunked-gzip":
      return {
        lines: ["transfer-encoding: chunked, gzip"],
        body: chunked(chunk(body, spec.splits)),
        completeness: "invalid",
        trailing: false,
      };
    case "te-identity":
      return {
        lines: ["transfer-encoding: identity", `content-length: ${n}`],
        body,
        completeness: "invalid",
        trailing: false,
      };
    case "te-odd": {
      const values = ["Chunked", "chunked ", " chunked", "xchunked", "chunked;q=1", "CHUNKED"];
      const value = values[spec.pick % values.length]!;
      return {
        lines: [`transfer-encoding: ${value}`],
        body: chunked(chunk(body, spec.splits)),
        completeness: "ambiguous",
        trailing: false,
      };
    }
    case "te-dup":
      return {
        lines: ["transfer-encoding: chunked", "transfer-encoding: chunked"],
        body: chunked(chunk(body, spec.splits)),
        completeness: "ambiguous",
        trailing: false,
      };
    case "cl-te":
      return {
        lines: [`content-length: ${n}`, "transfer-encoding: chunked"],
        body: chunked(chunk(body, spec.splits)),
        completeness: "invalid",
        trailing: false,
      };
  }
}

function authLines(auth: AuthSpec): readonly string[] {
  switch (auth.kind) {
    case "valid":
      return [`authorization: Bearer ${TENANT_KEYS[auth.tenant]}`];
    case "missing":
      return [];
    case "invalid":
      return ["authorization: Bearer not-a-key"];
    case "raw":
      return auth.lines;
  }
}

function hostLines(host: HeaderSpec["host"]): string[] {
  switch (host) {
    case "normal":
      return ["host: 127.0.0.1"];
    case "missing":
      return [];
    case "duplicate":
      return ["host: a", "host: b"];
    case "empty":
      return ["host: "];
    case "odd":
      return ["host: a b/c"];
  }
}

/** Framing a gateway must refuse: not a plain Content-Length, nor plain `chunked` with valid chunks. */
const REFUSED_FRAMING = new Set<FramingKind>([
  "cl-invalid",
  "cl-dup-diff",
  "chunked-bad-hex",
  "chunked-overflow",
  "chunked-lf-only",
  "te-gzip-chunked",
  "te-chunked-gzip",
  "te-identity",
  "cl-te",
]);

/** Framing whose body a server reads whole: the payload is exactly what was sent. */
const WHOLE_BODY_FRAMING = new Set<FramingKind>(["cl-exact", "chunked", "chunked-ext-trailer"]);

export interface Rendered {
  id: string;
  /** Every byte the client sends (with all segments). */
  bytes: Buffer;
  plan: ExchangePlan;
  /** A correct gateway owes an answer before the client leaves. */
  expectAnswer: boolean;
  /** At most this many answers are possible (2 when bytes after the message form another request). */
  maxAnswers: number;
  /** The case asked the worker to fail (x-mock-fail): upstream errors are attributable. */
  workerFault: boolean;
  /**
   * The gateway must refuse it itself (never forward it): a head Node's parser refuses, framing other
   * than a plain Content-Length or plain `chunked` (issue 8 #4), a target that is not a path of this
   * server (asterisk-form, authority-form, a non-HTTP scheme; issue 8 #8, issue 18 #1), or CONNECT.
   */
  mustReject: boolean;
  /** Body bytes of a well-framed request sent whole (undefined otherwise), for "the body arrived". */
  sentBodyBytes: number | undefined;
  /** One-line summary for reports. */
  label: string;
}

/** Turns a case into bytes and a client plan; `id` goes into `x-fuzz-id`. */
export function render(c: FuzzCase, id: string): Rendered {
  const payload = bodyText(c.body);
  const framed = frame(c.framing, payload);
  const lines: string[] = [
    ...hostLines(c.headers.host),
    `x-fuzz-id: ${id}`,
    ...authLines(c.headers.auth),
    ...c.headers.priority.map((p) => `x-smg-priority: ${p}`),
    ...c.headers.tenantHeader.map((t) => `${TRUSTED_TENANT_HEADER}: ${t}`),
  ];
  if (c.headers.contentType !== undefined) lines.push(`content-type: ${c.headers.contentType}`);
  lines.push(...c.headers.hop, ...c.headers.extra);
  for (let i = 0; i < c.headers.many; i++) lines.push(`x-h-${i}: v${i}`);
  if (c.headers.hugeValue > 0) lines.push(`x-huge: ${"v".repeat(c.headers.hugeValue)}`);
  if (c.workerFault !== undefined) lines.push(`x-mock-fail: ${c.workerFault}`);
  lines.push(...framed.lines);

  const { method, target, version, sep } = c.line;
  const requestLine =
    version === "" ? `${method}${sep}${target}` : `${method}${sep}${target}${sep}${version}`;
  const head = Buffer.from(`${requestLine}\r\n${lines.join("\r\n")}\r\n\r\n`, "latin1");
  const bytes = Buffer.concat([head, framed.body]);

  // (A head above 16 KiB is not counted as invalid: whether Node refuses it depends on its shape and
  // on the Node line, and a gateway may take it whole.)
  const headInvalid = c.line.invalid || c.headers.invalid;
  // The server can tell what to do from the bytes sent: it must answer.
  // Node's parser drops a PRI request line (HTTP/2's preface method) without a version and with a
  // chunked body silently, before any JavaScript sees it: no gateway can answer it.
  const decidable =
    (headInvalid || framed.completeness !== "incomplete") &&
    !(c.line.method === "PRI" && c.line.version === "");
  const foreignTarget =
    target.startsWith("*") || /^[a-z][a-z0-9+.-]*:/i.test(target)
      ? !/^https?:\/\//i.test(target)
      : !target.startsWith("/") && target !== "";
  const mustReject =
    headInvalid || REFUSED_FRAMING.has(c.framing.kind) || foreignTarget || c.line.method === "CONNECT";

  const segments: Segment[] = [];
  let end: ExchangePlan["end"] | undefined;
  let sendsAll = true;
  const cl = c.client;
  const split = (points: number[], delays: number[]): void => {
    const cuts = [...new Set(points.map((p) => p % Math.max(1, bytes.length)))]
      .filter((p) => p > 0)
      .sort((a, b) => a - b);
    let prev = 0;
    cuts.forEach((p, i) => {
      segments.push({ bytes: bytes.subarray(prev, p), delayMs: i === 0 ? 0 : (delays[i - 1] ?? 0) });
      prev = p;
    });
    segments.push({
      bytes: bytes.subarray(prev),
      delayMs: cuts.length === 0 ? 0 : (delays[cuts.length - 1] ?? 0),
    });
  };
  switch (cl.kind) {
    case "send":
      split(cl.splits, cl.delays);
      break;
    case "trickle": {
      const size = Math.ceil(bytes.length / cl.pieces);
      for (let pos = 0; pos < bytes.length; pos += size) {
        segments.push({ bytes: bytes.subarray(pos, pos + size), delayMs: pos === 0 ? 0 : cl.delayMs });
      }
      break;
    }
    case "body-later":
      segments.push(
        { bytes: bytes.subarray(0, head.length), delayMs: 0 },
        { bytes: bytes.subarray(head.length), delayMs: cl.delayMs },
      );
      break;
    case "cut-after-headers":
    case "cut-mid-body": {
      const at =
        cl.kind === "cut-after-headers" ? head.length : head.length + Math.floor(framed.body.length / 2);
      segments.push({ bytes: bytes.subarray(0, at), delayMs: 0 }, { bytes: bytes.subarray(at), delayMs: 0 });
      sendsAll = at >= bytes.length;
      end = { kind: "cut-early", keepSegments: 1, afterMs: cl.afterMs, rst: cl.rst };
      break;
    }
    case "cut-after-send":
      segments.push({ bytes, delayMs: 0 });
      end = { kind: "cut", afterMs: cl.afterMs, rst: cl.rst };
      break;
  }
  const expectAnswer = end === undefined && decidable;
  if (end === undefined) {
    end = decidable
      ? // One answer is owed; the grace catches a second one (bytes after the message may form a
        // request that a parser only answers once it is complete, so it is not waited for).
        { kind: "wait", answers: 1, graceMs: 60, deadlineMs: 5000 }
      : { kind: "cut", afterMs: 150 };
  }
  const label = [
    `${printableText(method)} ${printableText(target.slice(0, 40))} ${printableText(version)}`,
    `framing=${c.framing.kind}`,
    `body=${c.body.kind}${c.body.kind === "odd-field" ? `(${c.body.field}=${c.body.raw})` : ""}`,
    `auth=${c.headers.auth.kind}`,
    `client=${cl.kind}${"rst" in cl && cl.rst ? "(rst)" : ""}${sendsAll ? "" : "(partial)"}`,
    c.headers.many > 0 ? `headers=${c.headers.many}` : "",
    c.headers.hugeValue > 0 ? `huge=${c.headers.hugeValue}` : "",
    c.headers.hop.length > 0 ? `hop=[${c.headers.hop.join("; ")}]` : "",
    c.workerFault !== undefined ? `x-mock-fail=${c.workerFault}` : "",
  ]
    .filter((s) => s !== "")
    .join(" ");
  return {
    id,
    bytes,
    plan: { segments, headFirst: method === "HEAD", end },
    expectAnswer,
    maxAnswers: framed.trailing ? 2 : 1,
    workerFault: c.workerFault !== undefined,
    mustReject,
    sentBodyBytes:
      sendsAll && end.kind === "wait" && WHOLE_BODY_FRAMING.has(c.framing.kind) ? payload.length : undefined,
    label,
  };
}

function printableText(s: string): string {
  return JSON.stringify(s).slice(1, -1);
}
