/**
 * Raw-socket client for the security tests: sends exact bytes (optionally in timed pieces) and
 * returns every byte the gateway sent back, split into HTTP responses, so a test sees what a client
 * library would hide (a second answer, a missing body, a connection left open).
 */
import { connect } from "node:net";

export interface RawResponse {
  status: number;
  headers: Record<string, string>;
  body: string;
}

export interface RawResult {
  /** Every response found in the bytes, in order. */
  responses: RawResponse[];
  /** The gateway closed the connection (as opposed to the client giving up at `waitMs`). */
  closedByServer: boolean;
  /** Milliseconds from the first byte sent to the first byte received (undefined: none came). */
  firstByteMs: number | undefined;
  raw: string;
}

export interface RawOptions {
  /** Give up (and close) after this long; default 3000 ms. */
  waitMs?: number;
  /** Pieces sent one after the other with a pause between them. */
  pieces?: Array<string | Buffer>;
  pauseMs?: number;
  /** Close the client side after this many ms even if the server has not answered. */
  endAfterFirstResponse?: boolean;
}

/** Parses consecutive HTTP/1.1 responses (Content-Length or chunked bodies). */
export function parseResponses(raw: Buffer): RawResponse[] {
  const out: RawResponse[] = [];
  let at = 0;
  while (at < raw.length) {
    const headEnd = raw.indexOf("\r\n\r\n", at);
    if (headEnd === -1) break;
    const head = raw.subarray(at, headEnd).toString("latin1").split("\r\n");
    const status = Number(/^HTTP\/1\.[01] (\d{3})/.exec(head[0] ?? "")?.[1]);
    if (!Number.isInteger(status)) break;
    const headers: Record<string, string> = {};
    for (const line of head.slice(1)) {
      const colon = line.indexOf(":");
      if (colon > 0) headers[line.slice(0, colon).trim().toLowerCase()] = line.slice(colon + 1).trim();
    }
    let bodyStart = headEnd + 4;
    let body = "";
    if (headers["transfer-encoding"]?.toLowerCase() === "chunked") {
      for (;;) {
        const lineEnd = raw.indexOf("\r\n", bodyStart);
        if (lineEnd === -1) break;
        const size = Number.parseInt(raw.subarray(bodyStart, lineEnd).toString("latin1"), 16);
        bodyStart = lineEnd + 2;
        if (!Number.isFinite(size) || size === 0) {
          bodyStart += 2;
          break;
        }
        body += raw.subarray(bodyStart, bodyStart + size).toString("utf8");
        bodyStart += size + 2;
      }
    } else {
      const length = Number(headers["content-length"] ?? 0);
      body = raw.subarray(bodyStart, bodyStart + length).toString("utf8");
      bodyStart += length;
    }
    out.push({ status, headers, body });
    at = bodyStart;
  }
  return out;
}

export function rawExchange(
  port: number,
  bytes: string | Buffer,
  options: RawOptions = {},
): Promise<RawResult> {
  const waitMs = options.waitMs ?? 3000;
  return new Promise((resolve) => {
    const socket = connect(port, "127.0.0.1");
    const chunks: Buffer[] = [];
    let closedByServer = false;
    let firstByteMs: number | undefined;
    const started = performance.now();
    const timers: NodeJS.Timeout[] = [];
    socket.on("data", (d: Buffer) => {
      firstByteMs ??= performance.now() - started;
      chunks.push(d);
      if (options.endAfterFirstResponse && parseResponses(Buffer.concat(chunks)).length > 0) socket.destroy();
    });
    socket.on("end", () => {
      closedByServer = true;
    });
    socket.on("error", () => {
      closedByServer = true;
    });
    socket.on("close", () => {
      for (const t of timers) clearTimeout(t);
      const raw = Buffer.concat(chunks);
      resolve({ responses: parseResponses(raw), closedByServer, firstByteMs, raw: raw.toString("latin1") });
    });
    socket.write(bytes);
    let delay = 0;
    for (const piece of options.pieces ?? []) {
      delay += options.pauseMs ?? 100;
      timers.push(
        setTimeout(() => {
          if (!socket.destroyed) socket.write(piece);
        }, delay),
      );
    }
    timers.push(setTimeout(() => socket.destroy(), waitMs));
  });
}

/** A JSON chat request as raw bytes. */
export function rawChat(body: string, extraHeaders = "", connection = "close"): string {
  return (
    "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n" +
    `Content-Length: ${Buffer.byteLength(body)}\r\nConnection: ${connection}\r\n${extraHeaders}\r\n${body}`
  );
}

export const CHAT = '{"model":"mock-llm","messages":[{"role":"user","content":"hello"}],"max_tokens":4}';
