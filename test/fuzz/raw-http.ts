/**
 * Raw HTTP/1.1 over `net` sockets, for suites where a client library would hide the bytes: send
 * exactly the bytes given (in segments, with pauses, optionally cutting the connection), collect
 * every byte that comes back, and parse that byte stream into the responses it holds, so a test can
 * count answers and check each one's status line, headers and body.
 */
import { connect } from "node:net";

// --- parsing a response byte stream -------------------------------------------------------------

export interface RawResponse {
  version: string;
  status: number;
  reason: string;
  /** Header lines in order, names lowercased. */
  headers: Array<[string, string]>;
  body: Buffer;
  /** The whole body arrived (by Content-Length, chunked framing, or the close that ends it). */
  complete: boolean;
}

export interface ParsedStream {
  /** Final answers (1xx interim responses are not answers and are left out). */
  responses: RawResponse[];
  /** Statuses of interim 1xx responses, in order (101 is a final answer, not listed here). */
  interim: number[];
  /** Why the bytes are not HTTP, when they are not (parsing stops there). */
  error: string | undefined;
  /** Bytes after the last whole response that did not make a whole response head. */
  trailing: number;
}

export function header(res: RawResponse, name: string): string | undefined {
  const lower = name.toLowerCase();
  for (const [n, v] of res.headers) if (n === lower) return v;
  return undefined;
}

export function headerAll(res: RawResponse, name: string): string[] {
  const lower = name.toLowerCase();
  return res.headers.filter(([n]) => n === lower).map(([, v]) => v);
}

const STATUS_LINE = /^HTTP\/(\d)\.(\d) (\d{3})(?: ([^\r\n]*))?$/;
const HEADER_LINE = /^([!#$%&'*+\-.^_`|~0-9A-Za-z]+):[ \t]*(.*?)[ \t]*$/;
const CRLFCRLF = Buffer.from("\r\n\r\n");

/**
 * Parses the bytes a server sent on one connection. `closed` says whether the connection has ended
 * (a body delimited by the close is then complete); `headFirst` says the first request was HEAD
 * (its answer has no body whatever its headers say).
 */
export function parseResponses(
  data: Buffer,
  { closed, headFirst = false }: { closed: boolean; headFirst?: boolean },
): ParsedStream {
  const out: ParsedStream = { responses: [], interim: [], error: undefined, trailing: 0 };
  let pos = 0;
  while (pos < data.length) {
    const end = data.indexOf(CRLFCRLF, pos);
    if (end === -1) {
      const rest = data.subarray(pos).toString("latin1");
      if (!"HTTP/".startsWith(rest.slice(0, 5)) && !rest.startsWith("HTTP/")) {
        out.error = `not an HTTP status line: ${JSON.stringify(rest.slice(0, 80))}`;
      } else if (closed) out.error = `connection closed inside a response head (${rest.length} bytes)`;
      out.trailing = data.length - pos;
      return out;
    }
    const lines = data.subarray(pos, end).toString("latin1").split("\r\n");
    const statusLine = STATUS_LINE.exec(lines[0]!);
    if (!statusLine) {
      out.error = `not an HTTP status line: ${JSON.stringify(lines[0]!.slice(0, 80))}`;
      out.trailing = data.length - pos;
      return out;
    }
    const headers: Array<[string, string]> = [];
    for (const line of lines.slice(1)) {
      const h = HEADER_LINE.exec(line);
      if (!h) {
        out.error = `bad response header line: ${JSON.stringify(line.slice(0, 80))}`;
        out.trailing = data.length - pos;
        return out;
      }
      headers.push([h[1]!.toLowerCase(), h[2]!]);
    }
    const status = Number(statusLine[3]);
    const res: RawResponse = {
      version: `${statusLine[1]}.${statusLine[2]}`,
      status,
      reason: statusLine[4] ?? "",
      headers,
      body: Buffer.alloc(0),
      complete: true,
    };
    pos = end + 4;
    if (status >= 100 && status < 200 && status !== 101) {
      out.interim.push(status);
      continue;
    }
    const isHead = headFirst && out.responses.length === 0;
    if (status === 101) {
      // The rest of the connection is another protocol.
      res.body = data.subarray(pos);
      out.responses.push(res);
      return out;
    }
    if (isHead || status === 204 || status === 304) {
      // A server that could not parse the request may not know it was HEAD: an error answer whose
      // body is exactly its Content-Length, followed by the close, is taken as that body.
      const declared = Number(header(res, "content-length"));
      if (isHead && closed && status >= 400 && data.length - pos === declared) {
        res.body = data.subarray(pos);
        pos = data.length;
      }
      out.responses.push(res);
      continue;
    }
    const te = headerAll(res, "transfer-encoding").join(",").toLowerCase();
    const cls = headerAll(res, "content-length");
    if (te !== "") {
      if (!/(^|,)\s*chunked\s*$/.test(te)) {
        out.error = `response transfer-encoding without chunked last: ${te}`;
        return out;
      }
      const chunked = parseChunked(data, pos);
      if (chunked.error !== undefined) {
        out.error = `bad chunked response body: ${chunked.error}`;
        out.responses.push({ ...res, body: chunked.body, complete: false });
        return out;
      }
      res.body = chunked.body;
      res.complete = chunked.end !== undefined;
      out.responses.push(res);
      if (chunked.end === undefined) {
        if (closed) res.complete = false;
        return out;
      }
      pos = chunked.end;
      continue;
    }
    if (cls.length > 0) {
      const values = new Set(cls.flatMap((v) => v.split(",").map((s) => s.trim())));
      const value = [...values][0]!;
      if (values.size !== 1 || !/^\d+$/.test(value)) {
        out.error = `bad response content-length: ${JSON.stringify(cls)}`;
        return out;
      }
      const length = Number(value);
      const available = data.length - pos;
      res.body = data.subarray(pos, pos + Math.min(length, available));
      res.complete = available >= length;
      out.responses.push(res);
      if (!res.complete) return out;
      pos += length;
      continue;
    }
    // Delimited by the close of the connection.
    res.body = data.subarray(pos);
    res.complete = closed;
    out.responses.push(res);
    return out;
  }
  return out;
}

function parseChunked(
  data: Buffer,
  start: number,
): { body: Buffer; end: number | undefined; error: string | undefined } {
  const parts: Buffer[] = [];
  let pos = start;
  for (;;) {
    const lineEnd = data.indexOf("\r\n", pos, "latin1");
    if (lineEnd === -1) return { body: Buffer.concat(parts), end: undefined, error: undefined };
    const sizeText = data.subarray(pos, lineEnd).toString("latin1").split(";")[0]!.trim();
    if (!/^[0-9a-fA-F]{1,8}$/.test(sizeText)) {
      return { body: Buffer.concat(parts), end: undefined, error: `chunk size ${JSON.stringify(sizeText)}` };
    }
    const size = Number.parseInt(sizeText, 16);
    pos = lineEnd + 2;
    if (size === 0) {
      // Trailers, then an empty line.
      for (;;) {
        const tEnd = data.indexOf("\r\n", pos, "latin1");
        if (tEnd === -1) return { body: Buffer.concat(parts), end: undefined, error: undefined };
        const empty = tEnd === pos;
        pos = tEnd + 2;
        if (empty) return { body: Buffer.concat(parts), end: pos, error: undefined };
      }
    }
    if (data.length < pos + size + 2) {
      parts.push(data.subarray(pos, Math.min(data.length, pos + size)));
      return { body: Buffer.concat(parts), end: undefined, error: undefined };
    }
    parts.push(data.subarray(pos, pos + size));
    if (data[pos + size] !== 0x0d || data[pos + size + 1] !== 0x0a) {
      return { body: Buffer.concat(parts), end: undefined, error: "no CRLF after chunk data" };
    }
    pos += size + 2;
  }
}

// --- a raw exchange ------------------------------------------------------------------------------

export interface Segment {
  bytes: Buffer;
  /** Pause before writing this segment, ms. */
  delayMs: number;
}

export interface ExchangePlan {
  segments: Segment[];
  /** The first request is HEAD (its answer has no body). */
  headFirst: boolean;
  /**
   * What the client does once every segment is written:
   * - `wait`: read until the server closes, `answers` whole answers arrived (then `graceMs` more
   *   to catch any extra answer), or `deadlineMs` passed;
   * - `cut`: destroy the connection `afterMs` after the last write (answers before that count);
   * - `cut-early`: destroy the connection `afterMs` after writing only the first `keepSegments`.
   * A cut with `rst` resets the connection (TCP RST) instead of closing it (FIN).
   */
  end:
    | { kind: "wait"; answers: number; graceMs: number; deadlineMs: number }
    | { kind: "cut"; afterMs: number; rst?: boolean }
    | { kind: "cut-early"; keepSegments: number; afterMs: number; rst?: boolean };
}

export interface ExchangeResult {
  data: Buffer;
  /** The server ended the connection (FIN or reset) before the client gave up. */
  closedByServer: boolean;
  /** The connection was reset (ECONNRESET / EPIPE seen). */
  reset: boolean;
  /** The client gave up waiting (deadline). */
  timedOut: boolean;
  /** The client cut the connection on purpose. */
  cut: boolean;
  parsed: ParsedStream;
  elapsedMs: number;
}

/** Runs one exchange on a fresh connection; never rejects, always ends (every wait is bounded). */
export function exchange(port: number, plan: ExchangePlan, host = "127.0.0.1"): Promise<ExchangeResult> {
  return new Promise((resolve) => {
    const started = performance.now();
    const chunks: Buffer[] = [];
    let closedByServer = false;
    let reset = false;
    let timedOut = false;
    let cut = false;
    let finished = false;
    let timer: NodeJS.Timeout | undefined;
    let hardStop: NodeJS.Timeout | undefined;
    const socket = connect({ port, host });
    socket.setNoDelay(true);

    const finish = (): void => {
      if (finished) return;
      finished = true;
      if (timer !== undefined) clearTimeout(timer);
      if (hardStop !== undefined) clearTimeout(hardStop);
      if (cut && end.kind !== "wait" && end.rst === true && !socket.destroyed) socket.resetAndDestroy();
      else socket.destroy();
      const data = Buffer.concat(chunks);
      resolve({
        data,
        closedByServer,
        reset,
        timedOut,
        cut,
        parsed: parseResponses(data, { closed: closedByServer, headFirst: plan.headFirst }),
        elapsedMs: performance.now() - started,
      });
    };
    const later = (ms: number, fn: () => void): void => {
      if (timer !== undefined) clearTimeout(timer);
      timer = setTimeout(fn, ms);
    };

    const end = plan.end;
    // Nothing may keep an exchange alive past this, whatever the plan says.
    const totalDelay = plan.segments.reduce((sum, s) => sum + s.delayMs, 0);
    const limit =
      totalDelay +
      (end.kind === "wait" ? end.deadlineMs : end.afterMs) +
      (end.kind === "wait" ? end.graceMs : 0) +
      1000;
    hardStop = setTimeout(() => {
      timedOut = true;
      finish();
    }, limit);

    let writesDone = false;
    let wholeAnswers = 0;
    const onAnswerProgress = (): void => {
      if (end.kind !== "wait" || !writesDone) return;
      const parsed = parseResponses(Buffer.concat(chunks), { closed: false, headFirst: plan.headFirst });
      const whole = parsed.responses.filter((r) => r.complete).length;
      if (parsed.error !== undefined || whole >= end.answers) {
        if (whole !== wholeAnswers || parsed.error !== undefined) {
          wholeAnswers = whole;
          later(end.graceMs, finish);
        }
      }
    };

    socket.on("data", (chunk: Buffer) => {
      chunks.push(chunk);
      onAnswerProgress();
    });
    socket.on("error", (err: NodeJS.ErrnoException) => {
      if (err.code === "ECONNRESET" || err.code === "EPIPE") reset = true;
    });
    socket.on("end", () => {
      closedByServer = true;
      finish();
    });
    socket.on("close", () => {
      if (!cut && !timedOut) closedByServer = true;
      finish();
    });

    const segments = end.kind === "cut-early" ? plan.segments.slice(0, end.keepSegments) : plan.segments;
    const writeFrom = (i: number): void => {
      if (finished) return;
      if (i >= segments.length) {
        writesDone = true;
        if (end.kind === "wait") {
          later(end.deadlineMs, () => {
            timedOut = true;
            finish();
          });
          onAnswerProgress();
        } else {
          later(end.afterMs, () => {
            cut = true;
            finish();
          });
        }
        return;
      }
      const seg = segments[i]!;
      const write = (): void => {
        if (finished || socket.destroyed) return;
        socket.write(seg.bytes, () => writeFrom(i + 1));
      };
      if (seg.delayMs > 0) later(seg.delayMs, write);
      else write();
    };
    socket.once("connect", () => writeFrom(0));
  });
}

/** Escapes bytes for a report: printable ASCII as is, the rest as \xNN, cut to `max` characters. */
export function printable(bytes: Buffer, max = 400): string {
  let out = "";
  for (const b of bytes.subarray(0, max)) {
    if (b === 0x0d) out += "\\r";
    else if (b === 0x0a) out += "\\n";
    else if (b >= 0x20 && b < 0x7f && b !== 0x5c) out += String.fromCharCode(b);
    else out += `\\x${b.toString(16).padStart(2, "0")}`;
  }
  if (bytes.length > max) out += `... (${bytes.length} bytes)`;
  return out;
}
