/**
 * Trace replay (`arrival: {process: replay, ...}`): reads a request trace, CSV with a header row
 * (RFC 4180 quoting) or JSONL, into columns of typed arrays, one pass, linear in its size. The run
 * then schedules one arrival at a time from it (run.ts), so replay costs time linear in requests.
 *
 * Columns are found by name: the scenario's, else the names the public traces use (Azure LLM
 * inference 2023: TIMESTAMP, ContextTokens, GeneratedTokens; Mooncake FAST'25: timestamp,
 * input_length, output_length, hash_ids). Timestamps are numbers (`timestamp_unit`, ms by default
 * for JSONL, s for CSV) or wall-clock text (`2023-11-16 18:15:46.6805900`, read as UTC to the
 * microsecond). Every replay of a scenario shares one origin, the earliest row of them all, so two
 * services traced over the same window (Azure's conversation and code) stay aligned. A bad row is an error naming the
 * file, line and column. A 0-token row is valid (a request with no prompt or no output).
 */
import { closeSync, openSync, readSync } from "node:fs";
import { StringDecoder } from "node:string_decoder";
import { ConfigError } from "@sluice/scheduler/core/errors.js";

interface ReplaySpec {
  path: string;
  timestamp?: string | undefined;
  promptTokens?: string | undefined;
  outputTokens?: string | undefined;
  prefixBlocks?: string | undefined;
  prefixBlockTokens: number;
  timestampUnit?: "s" | "ms" | undefined;
  speed: number;
  startMs: number;
  /** Keep only part `part` of `of` (a trace with no tenants split into several; see splitKey). */
  split?: { of: number; part: number } | undefined;
}

export interface ReplayTrace {
  readonly path: string;
  /**
   * Arrival times, ms (trace time, before speed and start): as read, until the scenario shifts
   * every replay by their common origin (alignReplays).
   */
  readonly t: Float64Array;
  readonly prompt: Int32Array;
  readonly output: Int32Array;
  /** Block ids of row i: blocks[blockStart[i] .. blockStart[i + 1]) (empty without prefix_blocks). */
  readonly blockStart: Int32Array;
  readonly blocks: Float64Array;
  readonly prefixBlockTokens: number;
  /** Row indexes in time order (file order when the rows are sorted). */
  readonly order: Int32Array;
}

const TIMESTAMP_NAMES = ["timestamp", "TIMESTAMP", "time", "arrival_time"];
const PROMPT_NAMES = ["ContextTokens", "input_length", "prompt_tokens", "input_tokens"];
const OUTPUT_NAMES = ["GeneratedTokens", "output_length", "output_tokens"];
const BLOCK_NAMES = ["hash_ids"];

/** Wall-clock text: `YYYY-MM-DD[ T]HH:MM:SS[.fraction][Z|±HH:MM]`, UTC unless an offset is given. */
const WALL = /^(\d{4})-(\d{2})-(\d{2})[ T](\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?\s*(Z|[+-]\d{2}:?\d{2})?$/;

/** Milliseconds since the epoch (fractional: microseconds kept), or NaN. */
export function parseWallClock(text: string): number {
  const m = WALL.exec(text.trim());
  if (!m) return Number.NaN;
  const [, y, mo, d, h, mi, s, frac, tz] = m;
  let ms = Date.UTC(Number(y), Number(mo) - 1, Number(d), Number(h), Number(mi), Number(s));
  if (Number.isNaN(ms) || Number(mo) > 12 || Number(d) > 31 || Number(h) > 23 || Number(mi) > 59) {
    return Number.NaN;
  }
  if (frac !== undefined) ms += Number(`0.${frac}`) * 1000;
  if (tz !== undefined && tz !== "Z") {
    const sign = tz[0] === "-" ? -1 : 1;
    const digits = tz.slice(1).replace(":", "");
    ms -= sign * (Number(digits.slice(0, 2)) * 60 + Number(digits.slice(2))) * 60_000;
  }
  return ms;
}

/** Splits CSV text into records of fields (RFC 4180: quoted fields, "" escapes, CRLF), with each record's line. */
export function* csvRecords(text: string, firstLine = 1): Generator<{ line: number; fields: string[] }> {
  let i = 0;
  let line = firstLine;
  const n = text.length;
  while (i < n) {
    const startLine = line;
    const fields: string[] = [];
    let field = "";
    for (;;) {
      if (i < n && text[i] === '"') {
        i++;
        for (;;) {
          if (i >= n) throw new CsvError(startLine, fields.length, "a quoted field is not closed");
          const c = text[i]!;
          if (c === '"') {
            if (text[i + 1] === '"') {
              field += '"';
              i += 2;
              continue;
            }
            i++;
            break;
          }
          if (c === "\n") line++;
          field += c;
          i++;
        }
        if (i < n && text[i] !== "," && text[i] !== "\n" && text[i] !== "\r") {
          throw new CsvError(line, fields.length, "text after a closing quote");
        }
      } else {
        const start = i;
        while (i < n && text[i] !== "," && text[i] !== "\n" && text[i] !== "\r") i++;
        field = text.slice(start, i);
      }
      fields.push(field);
      field = "";
      if (i < n && text[i] === ",") {
        i++;
        continue;
      }
      break;
    }
    if (i < n && text[i] === "\r") i++;
    if (i < n && text[i] === "\n") {
      i++;
      line++;
    }
    yield { line: startLine, fields };
  }
}

class CsvError extends Error {
  constructor(
    readonly line: number,
    readonly column: number,
    reason: string,
  ) {
    super(reason);
  }
}

function pick(names: readonly string[], given: string | undefined, has: (name: string) => boolean) {
  if (given !== undefined) return has(given) ? given : undefined;
  return names.find(has);
}

const CHUNK_BYTES = 4 << 20;

/** The file's text in chunks of about 4 MiB (UTF-8 kept whole across chunks): a trace of any size. */
function* chunks(fd: number): Generator<string> {
  const buf = Buffer.allocUnsafe(CHUNK_BYTES);
  const decoder = new StringDecoder("utf8");
  for (;;) {
    const n = readSync(fd, buf, 0, CHUNK_BYTES, null);
    if (n === 0) break;
    yield decoder.write(buf.subarray(0, n));
  }
  const rest = decoder.end();
  if (rest !== "") yield rest;
}

/** Whole lines (without their newline) and their line numbers, from chunks. */
export function* lines(parts: Iterable<string>): Generator<{ line: number; text: string }> {
  let carry = "";
  let line = 1;
  for (const part of parts) {
    const text = carry + part;
    let start = 0;
    for (let nl = text.indexOf("\n"); nl >= 0; nl = text.indexOf("\n", start)) {
      yield { line: line++, text: text.slice(start, nl) };
      start = nl + 1;
    }
    carry = text.slice(start);
  }
  if (carry !== "") yield { line, text: carry };
}

/** CSV records from chunks: each chunk is cut at its last line break outside quotes. */
export function* csvStream(parts: Iterable<string>): Generator<{ line: number; fields: string[] }> {
  let carry = "";
  let line = 1;
  for (const part of parts) {
    const text = carry + part;
    let quoted = false;
    let cut = -1;
    for (let i = 0; i < text.length; i++) {
      const c = text.charCodeAt(i);
      if (c === 34) quoted = !quoted;
      else if (c === 10 && !quoted) cut = i;
    }
    if (cut < 0) {
      carry = text;
      continue;
    }
    const head = text.slice(0, cut + 1);
    yield* csvRecords(head, line);
    for (let i = head.indexOf("\n"); i >= 0; i = head.indexOf("\n", i + 1)) line++;
    carry = text.slice(cut + 1);
  }
  if (carry !== "") yield* csvRecords(carry, line);
}

/**
 * Reads a replay trace, streaming the file (one pass, a few MiB of text at a time). `label` names
 * the scenario key in errors.
 */
export function loadReplay(absPath: string, spec: ReplaySpec, label: string): ReplayTrace {
  let fd: number;
  try {
    fd = openSync(absPath, "r");
  } catch (err) {
    throw new ConfigError(label, `cannot read ${absPath}: ${(err as NodeJS.ErrnoException).code ?? err}`);
  }
  try {
    return readReplay(fd, absPath, spec, label);
  } finally {
    closeSync(fd);
  }
}

function readReplay(fd: number, absPath: string, spec: ReplaySpec, label: string): ReplayTrace {
  const source = chunks(fd);
  const first = source.next();
  const head = first.done ? "" : first.value;
  const all = (function* () {
    if (head !== "") yield head;
    yield* source;
  })();
  const jsonl = /\.jsonl$/i.test(absPath) || (/^\s*\{/.test(head) && !/\.csv$/i.test(absPath));
  const t: number[] = [];
  const prompt: number[] = [];
  const output: number[] = [];
  const blockStart: number[] = [0];
  const blocks: number[] = [];
  const wantBlocks = spec.prefixBlocks !== undefined;
  const where = (line: number, column: string) => `${absPath}: line ${line}, column ${column}`;
  const fail = (line: number, column: string, reason: string): never => {
    throw new ConfigError(label, `${where(line, column)}: ${reason}`);
  };
  const count = (raw: unknown, line: number, column: string): number => {
    const v = typeof raw === "string" ? (raw.trim() === "" ? Number.NaN : Number(raw)) : raw;
    if (typeof v !== "number" || !Number.isInteger(v) || v < 0) {
      fail(line, column, `must be a token count (an integer >= 0), got ${JSON.stringify(raw)}`);
    }
    return v as number;
  };
  let defaultUnit: "s" | "ms" = "ms";
  const time = (raw: unknown, line: number, column: string): number => {
    if (
      typeof raw === "number" ||
      (typeof raw === "string" && /^\s*-?\d+(\.\d+)?([eE][+-]?\d+)?\s*$/.test(raw))
    ) {
      const v = Number(raw);
      if (!Number.isFinite(v)) fail(line, column, `must be a time, got ${JSON.stringify(raw)}`);
      return (spec.timestampUnit ?? defaultUnit) === "s" ? v * 1000 : v;
    }
    const ms = typeof raw === "string" ? parseWallClock(raw) : Number.NaN;
    if (Number.isNaN(ms)) {
      fail(
        line,
        column,
        `must be a number (timestamp_unit: s | ms) or a wall-clock time like 2023-11-16 18:15:46.6805900, got ${JSON.stringify(raw)}`,
      );
    }
    return ms;
  };
  const blockList = (raw: unknown, line: number, column: string) => {
    let v = raw;
    if (typeof v === "string") {
      const s = v.trim();
      if (s === "") v = [];
      else {
        try {
          v = JSON.parse(s.startsWith("[") ? s : `[${s}]`);
        } catch {
          v = undefined;
        }
      }
    }
    if (!Array.isArray(v) || !v.every((x) => typeof x === "number" && Number.isFinite(x))) {
      fail(line, column, `must be a list of block ids (numbers), got ${JSON.stringify(raw)}`);
    }
    for (const x of v as number[]) blocks.push(x);
    blockStart.push(blocks.length);
  };

  if (jsonl) {
    let cols: { ts: string; p: string; o: string; b: string | undefined } | undefined;
    for (const { line, text } of lines(all)) {
      const i = line - 1;
      const raw = text.trim();
      if (raw === "") continue;
      let row: unknown;
      try {
        row = JSON.parse(raw);
      } catch (err) {
        fail(i + 1, "-", `not a JSON object: ${(err as Error).message}`);
      }
      if (row === null || typeof row !== "object" || Array.isArray(row))
        fail(i + 1, "-", "not a JSON object");
      const r = row as Record<string, unknown>;
      if (cols === undefined) {
        const has = (k: string) => k in r;
        const ts = pick(TIMESTAMP_NAMES, spec.timestamp, has);
        const p = pick(PROMPT_NAMES, spec.promptTokens, has);
        const o = pick(OUTPUT_NAMES, spec.outputTokens, has);
        const b = wantBlocks ? pick(BLOCK_NAMES, spec.prefixBlocks, has) : undefined;
        if (ts === undefined)
          fail(i + 1, spec.timestamp ?? "timestamp", "no timestamp field (give arrival.timestamp)");
        if (p === undefined)
          fail(i + 1, spec.promptTokens ?? "prompt", "no prompt-token field (give arrival.prompt_tokens)");
        if (o === undefined)
          fail(i + 1, spec.outputTokens ?? "output", "no output-token field (give arrival.output_tokens)");
        if (wantBlocks && b === undefined) fail(i + 1, spec.prefixBlocks!, "no such field");
        cols = { ts: ts!, p: p!, o: o!, b };
      }
      t.push(time(r[cols.ts], i + 1, cols.ts));
      prompt.push(count(r[cols.p], i + 1, cols.p));
      output.push(count(r[cols.o], i + 1, cols.o));
      if (cols.b !== undefined) blockList(r[cols.b] ?? [], i + 1, cols.b);
    }
  } else {
    defaultUnit = "s";
    let header: string[] | undefined;
    let idx = { ts: -1, p: -1, o: -1, b: -1 };
    try {
      for (const { line, fields } of csvStream(all)) {
        if (fields.length === 1 && fields[0]!.trim() === "") continue;
        if (header === undefined) {
          header = fields.map((f) => f.trim());
          const has = (k: string) => header!.includes(k);
          const ts = pick(TIMESTAMP_NAMES, spec.timestamp, has);
          const p = pick(PROMPT_NAMES, spec.promptTokens, has);
          const o = pick(OUTPUT_NAMES, spec.outputTokens, has);
          const b = wantBlocks ? pick(BLOCK_NAMES, spec.prefixBlocks, has) : undefined;
          const names = header.join(", ");
          if (ts === undefined)
            fail(
              line,
              spec.timestamp ?? "timestamp",
              `the header (${names}) has no timestamp column; give arrival.timestamp`,
            );
          if (p === undefined)
            fail(
              line,
              spec.promptTokens ?? "prompt",
              `the header (${names}) has no prompt-token column; give arrival.prompt_tokens`,
            );
          if (o === undefined)
            fail(
              line,
              spec.outputTokens ?? "output",
              `the header (${names}) has no output-token column; give arrival.output_tokens`,
            );
          if (wantBlocks && b === undefined)
            fail(line, spec.prefixBlocks!, `the header (${names}) has no such column`);
          idx = {
            ts: header.indexOf(ts!),
            p: header.indexOf(p!),
            o: header.indexOf(o!),
            b: b === undefined ? -1 : header.indexOf(b),
          };
          continue;
        }
        if (fields.length !== header.length) {
          fail(
            line,
            String(Math.min(fields.length, header.length) + 1),
            `has ${fields.length} fields, the header ${header.length}`,
          );
        }
        t.push(time(fields[idx.ts]!, line, header[idx.ts]!));
        prompt.push(count(fields[idx.p]!, line, header[idx.p]!));
        output.push(count(fields[idx.o]!, line, header[idx.o]!));
        if (idx.b >= 0) blockList(fields[idx.b]!, line, header[idx.b]!);
      }
    } catch (err) {
      if (err instanceof CsvError) {
        const col = header?.[err.column] ?? String(err.column + 1);
        throw new ConfigError(label, `${where(err.line, col)}: ${err.message}`);
      }
      throw err;
    }
    if (header === undefined) throw new ConfigError(label, `${absPath}: the CSV has no header row`);
  }
  if (t.length === 0) throw new ConfigError(label, `${absPath}: no requests in the trace`);
  if (!wantBlocks) for (let i = 0; i < t.length; i++) blockStart.push(0);
  if (spec.split !== undefined) {
    // Compact the columns in place to the rows of this part.
    const { of, part } = spec.split;
    let k = 0;
    let b = 0;
    const starts: number[] = [0];
    for (let i = 0; i < t.length; i++) {
      const from = blockStart[i]!;
      const to = blockStart[i + 1]!;
      if (splitKey(blocks, from, to, i) % of !== part) continue;
      t[k] = t[i]!;
      prompt[k] = prompt[i]!;
      output[k] = output[i]!;
      for (let j = from; j < to; j++) blocks[b++] = blocks[j]!;
      starts.push(b);
      k++;
    }
    if (k === 0) throw new ConfigError(label, `${absPath}: no requests in part ${part} of ${of}`);
    t.length = prompt.length = output.length = k;
    blocks.length = b;
    blockStart.length = 0;
    blockStart.push(...starts);
  }
  const n = t.length;
  let sorted = true;
  for (let i = 1; i < n; i++) if (t[i]! < t[i - 1]!) sorted = false;
  const times = Float64Array.from(t);
  const order = new Int32Array(n);
  for (let i = 0; i < n; i++) order[i] = i;
  // A trace out of time order is replayed in time order (stable: ties keep file order).
  if (!sorted) order.sort((a, b) => times[a]! - times[b]! || a - b);
  return {
    path: absPath,
    t: times,
    prompt: Int32Array.from(prompt),
    output: Int32Array.from(output),
    blockStart: Int32Array.from(blockStart),
    blocks: Float64Array.from(blocks),
    prefixBlockTokens: spec.prefixBlockTokens,
    order,
  };
}

/**
 * Which part a row goes to when a trace is split into tenants: by its second prefix block (the
 * first after a system prompt every conversation shares, so a conversation's turns, which share
 * their prefix, stay in one part), else its only block, else its row number in the file.
 */
function splitKey(blocks: readonly number[], from: number, to: number, row: number): number {
  const key = to - from >= 2 ? blocks[from + 1]! : to > from ? blocks[from]! : row;
  return Math.abs(Math.floor(key));
}

/** Shifts every trace so that the earliest row of them all is at 0 (in place). */
export function alignReplays(traces: readonly ReplayTrace[]): void {
  let origin = Number.POSITIVE_INFINITY;
  for (const tr of traces) origin = Math.min(origin, tr.t[tr.order[0]!]!);
  for (const tr of traces) for (let i = 0; i < tr.t.length; i++) tr.t[i]! -= origin;
}
