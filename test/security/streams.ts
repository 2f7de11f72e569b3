/**
 * Streams for the tests of the usage scanner's bound (issue 35, finding 6), shared by
 * test/security/stream-boundary.test.ts, the fuzz and the soak: a stream with no event boundary, a
 * worker that answers with any stream, a raw-socket client that reads a chunked stream to its end
 * (a hash and a count), and a /health poller.
 */
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { createServer as createHttpServer, type IncomingMessage, type ServerResponse } from "node:http";
import { type AddressInfo, connect } from "node:net";
import type { TestContext } from "node:test";
import { UsageReader } from "../../src/gateway/request/usage.js";
import { sendTo } from "../helpers/harness.js";

/** `data: BBB…\n` lines (CRLF when `crlf`) of `lineBytes` each, with no blank line: `total` bytes of them. */
export function boundarylessStream(total: number, lineBytes = 1000, crlf = false): Buffer {
  const end = crlf ? "\r\n" : "\n";
  const line = Buffer.from(`data: ${"B".repeat(Math.max(1, lineBytes - 6 - end.length))}${end}`);
  const out = Buffer.allocUnsafe(total);
  for (let at = 0; at < total; at += line.length) line.copy(out, at, 0, Math.min(line.length, total - at));
  return out;
}

/** A worker's answer: the SSE bytes, written in pieces of `pieceBytes` (default 64 KiB). */
export interface StreamAnswer {
  bytes: Buffer;
  pieceBytes?: number;
}

/**
 * A worker (node:http) whose chat answers are SSE streams: `answer` is given the request's headers
 * and returns the bytes, written in pieces with backpressure. Health and discovery answer as SGLang
 * does (max_running_requests 4).
 */
export async function streamingWorker(
  t: TestContext,
  answer: (headers: IncomingMessage["headers"]) => StreamAnswer | Buffer,
): Promise<string> {
  const server = createHttpServer((req: IncomingMessage, res: ServerResponse) => {
    if (req.method === "GET") {
      const json = req.url === "/get_server_info" ? '{"max_running_requests":4}' : "{}";
      res.writeHead(200, { "content-type": "application/json" }).end(json);
      return;
    }
    req.resume();
    req.on("end", () => {
      const given = answer(req.headers);
      const { bytes, pieceBytes = 64 * 1024 } = Buffer.isBuffer(given) ? { bytes: given } : given;
      res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache" });
      let at = 0;
      const pump = (): void => {
        while (at < bytes.length) {
          const piece = bytes.subarray(at, at + pieceBytes);
          at += piece.length;
          if (!res.write(piece)) {
            res.once("drain", pump);
            return;
          }
        }
        res.end();
      };
      pump();
    });
    res.on("error", () => {});
  });
  server.keepAliveTimeout = 1000;
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  t.after(async () => {
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  });
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

export interface StreamRead {
  status: number;
  headers: string;
  /** From the request's first byte to the end of the response head. */
  headersMs: number;
  bodyBytes: number;
  bodySha256: string;
  totalMs: number;
  /** The body itself, when asked for (`keep`). */
  body?: Buffer;
}

/**
 * Sends `request` on a raw socket and reads one chunked response to its end, decoding the chunks
 * as they come (a hash and a count, not a copy of a 24 MB body).
 */
export function readStream(
  port: number,
  request: string,
  { timeoutMs = 30_000, keep = false }: { timeoutMs?: number; keep?: boolean } = {},
): Promise<StreamRead> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, "127.0.0.1");
    const started = performance.now();
    const hash = createHash("sha256");
    const kept: Buffer[] = [];
    let head: Buffer | undefined = Buffer.alloc(0);
    let headersMs = 0;
    let headers = "";
    let status = 0;
    let bodyBytes = 0;
    // Chunked decoding state: bytes left in the current chunk, or -1 while reading a size line.
    let left = -1;
    let line = "";
    let skipCrlf = 0;
    let done = false;
    const timer = setTimeout(() => {
      socket.destroy();
      reject(new Error(`no end of the stream after ${timeoutMs} ms (${bodyBytes} body bytes)`));
    }, timeoutMs);
    const finish = () => {
      done = true;
      clearTimeout(timer);
      socket.destroy();
      resolve({
        status,
        headers,
        headersMs,
        bodyBytes,
        bodySha256: hash.digest("hex"),
        totalMs: performance.now() - started,
        ...(keep ? { body: Buffer.concat(kept) } : {}),
      });
    };
    const body = (data: Buffer): void => {
      let i = 0;
      while (i < data.length && !done) {
        if (skipCrlf > 0) {
          i++;
          skipCrlf--;
          continue;
        }
        if (left === -1) {
          const nl = data.indexOf(0x0a, i);
          if (nl === -1) {
            line += data.toString("latin1", i);
            return;
          }
          line += data.toString("latin1", i, nl);
          i = nl + 1;
          const size = Number.parseInt(line.trim(), 16);
          line = "";
          if (size === 0) {
            finish();
            return;
          }
          left = size;
          continue;
        }
        const take = Math.min(left, data.length - i);
        hash.update(data.subarray(i, i + take));
        if (keep) kept.push(Buffer.from(data.subarray(i, i + take)));
        bodyBytes += take;
        left -= take;
        i += take;
        if (left === 0) {
          left = -1;
          skipCrlf = 2;
        }
      }
    };
    socket.on("data", (d: Buffer) => {
      if (head !== undefined) {
        head = Buffer.concat([head, d]);
        const end = head.indexOf("\r\n\r\n");
        if (end === -1) return;
        headersMs = performance.now() - started;
        headers = head.toString("latin1", 0, end);
        status = Number(/^HTTP\/1\.1 (\d{3})/.exec(headers)?.[1]);
        const rest = head.subarray(end + 4);
        head = undefined;
        if (!/transfer-encoding: chunked/i.test(headers)) {
          clearTimeout(timer);
          socket.destroy();
          reject(new Error(`expected a chunked stream, got:\n${headers}`));
          return;
        }
        body(rest);
        return;
      }
      body(d);
    });
    socket.on("error", (err) => {
      if (!done) {
        clearTimeout(timer);
        reject(err);
      }
    });
    socket.write(request);
  });
}

/** Polls `url` every `everyMs` until `stop()`; resolves with each answer's latency. */
export async function pollHealth(url: string, stop: () => boolean, everyMs = 25): Promise<number[]> {
  const latencies: number[] = [];
  while (!stop()) {
    const t0 = performance.now();
    const reply = await sendTo(url, "/health");
    latencies.push(performance.now() - t0);
    assert.equal(reply.status, 200);
    await new Promise((r) => setTimeout(r, everyMs));
  }
  return latencies;
}

/** Splits a stream at its blank lines as the scanner does (the last piece may have none). */
export function splitEvents(whole: Buffer): Buffer[] {
  const text = whole.toString("latin1");
  const out: Buffer[] = [];
  let from = 0;
  for (;;) {
    let stop = -1;
    // The scanner's rule: the first "\n" that starts "\n\n", or is the middle of "\r\n\r\n".
    for (let i = text.indexOf("\n", from); i !== -1; i = text.indexOf("\n", i + 1)) {
      if (text[i + 1] === "\n") {
        stop = i + 2;
        break;
      }
      if (i > from && text[i - 1] === "\r" && text[i + 1] === "\r" && text[i + 2] === "\n") {
        stop = i + 3;
        break;
      }
    }
    if (stop === -1) break;
    out.push(whole.subarray(from, stop));
    from = stop;
  }
  if (from < whole.length) out.push(whole.subarray(from));
  return out;
}

/** What the scanner makes of one whole event given alone, stripping the usage it asked for. */
function readAlone(event: Buffer): Buffer {
  const reader = new UsageReader("text/event-stream", true);
  const out = reader.transform(event);
  const tail = reader.flush();
  return tail === undefined ? Buffer.from(out) : Buffer.concat([out, tail]);
}

/**
 * `out` is what a client got of `whole` through a stripping gateway: each event of `whole`, in
 * order, either read as the scanner reads it alone (null usage cut, its own usage chunk dropped) or
 * passed through unchanged (an event past the scanner's bound).
 */
export function eventsReadOrPassed(out: Buffer, whole: Buffer): boolean {
  const events = splitEvents(whole);
  const read = events.map(readAlone);
  const memo = new Map<number, boolean>();
  const fits = (i: number, at: number): boolean => {
    if (i === events.length) return at === out.length;
    const key = i * (out.length + 1) + at;
    const known = memo.get(key);
    if (known !== undefined) return known;
    let ok = false;
    for (const form of read[i]!.equals(events[i]!) ? [read[i]!] : [read[i]!, events[i]!]) {
      if (out.subarray(at, at + form.length).equals(form) && fits(i + 1, at + form.length)) {
        ok = true;
        break;
      }
    }
    memo.set(key, ok);
    return ok;
  };
  return fits(0, 0);
}

/** What a client that did not ask for usage gets of `whole`: each event as the scanner reads it alone. */
export function expectedStripped(whole: Buffer): Buffer {
  return Buffer.concat(splitEvents(whole).map(readAlone));
}
