/**
 * Actual token usage from a worker's answer: the `usage` object of an OpenAI JSON response, the
 * final usage chunk of an SSE stream, or SGLang's `meta_info`. For streams whose client did not ask
 * for usage, the gateway asks for it (`stream_options.include_usage`) and strips that extra chunk
 * from what the client sees.
 */
import { StringDecoder } from "node:string_decoder";
import type { Usage } from "../core/budgets.js";

const USAGE_PATHS = ["/v1/chat/completions", "/v1/completions"];
/** A non-stream answer larger than this is passed through without usage parsing. */
const MAX_JSON_BYTES = 8 * 1024 * 1024;

function pathOnly(url: string): string {
  const q = url.indexOf("?");
  return q === -1 ? url : url.slice(0, q);
}

/**
 * Returns the body to send upstream: the client's bytes unchanged, or — for an OpenAI stream without
 * `stream_options.include_usage` — a copy that asks for usage, with `strip` telling the caller to
 * hide the extra chunk.
 */
export function withUsageRequested(
  url: string,
  body: Buffer,
  json: Record<string, unknown> | undefined,
): { body: Buffer; strip: boolean } {
  if (json === undefined || json.stream !== true || !USAGE_PATHS.includes(pathOnly(url)))
    return { body, strip: false };
  const options = json.stream_options;
  if (options === undefined) {
    // Insert the key after the opening brace: every byte the client sent reaches the worker as sent
    // (re-serialising would reformat numbers, e.g. a 20-digit seed would lose its precision).
    const open = body.indexOf(0x7b); // "{": the first non-blank byte, since the body parsed as an object
    const key = Buffer.from('"stream_options":{"include_usage":true},');
    return { body: Buffer.concat([body.subarray(0, open + 1), key, body.subarray(open + 1)]), strip: true };
  }
  if (
    options !== null &&
    typeof options === "object" &&
    (options as Record<string, unknown>).include_usage === true
  ) {
    return { body, strip: false };
  }
  const extended = {
    ...json,
    stream_options: {
      ...(options !== null && typeof options === "object" ? options : {}),
      include_usage: true,
    },
  };
  return { body: Buffer.from(JSON.stringify(extended)), strip: true };
}

function toUsage(value: unknown): Usage | undefined {
  if (value === null || typeof value !== "object") return undefined;
  const u = value as Record<string, unknown>;
  const input = u.prompt_tokens;
  const output = u.completion_tokens;
  if (typeof input !== "number" || typeof output !== "number") return undefined;
  return { inputTokens: input, outputTokens: output };
}

function usageOf(doc: unknown): Usage | undefined {
  if (doc === null || typeof doc !== "object") return undefined;
  const d = doc as Record<string, unknown>;
  return toUsage(d.usage) ?? toUsage(d.meta_info);
}

const USAGE_KEY = Buffer.from('"usage"');
const META_KEY = Buffer.from('"meta_info"');

/**
 * The usage object of a JSON answer. Parses only the `usage` (or `meta_info`) object, found from
 * the end (servers put it last), instead of the whole answer; falls back to a full parse when that
 * object cannot be isolated.
 */
function usageInJson(body: Buffer): Usage | undefined {
  for (const key of [USAGE_KEY, META_KEY]) {
    const at = body.lastIndexOf(key);
    if (at === -1) continue;
    const object = objectAfter(body, at + key.length);
    if (object === undefined) break;
    try {
      const usage = toUsage(JSON.parse(object));
      if (usage !== undefined) return usage;
    } catch {
      break;
    }
  }
  try {
    return usageOf(JSON.parse(body.toString("utf8")));
  } catch {
    return undefined; // not JSON: no usage; the estimate stands
  }
}

/** The `{...}` value after a key (past blanks and a colon), or undefined when it is not an object. */
function objectAfter(body: Buffer, from: number): string | undefined {
  let i = from;
  while (i < body.length && (body[i] === 0x20 || body[i] === 0x0a || body[i] === 0x0d || body[i] === 0x09))
    i++;
  if (body[i] !== 0x3a) return undefined; // ":"
  i++;
  while (i < body.length && (body[i] === 0x20 || body[i] === 0x0a || body[i] === 0x0d || body[i] === 0x09))
    i++;
  if (body[i] !== 0x7b) return undefined; // "{"
  const start = i;
  let depth = 0;
  let inString = false;
  for (; i < body.length; i++) {
    const c = body[i];
    if (inString) {
      if (c === 0x5c)
        i++; // backslash: skip the escaped byte
      else if (c === 0x22) inString = false;
    } else if (c === 0x22) inString = true;
    else if (c === 0x7b) depth++;
    else if (c === 0x7d && --depth === 0) return body.toString("utf8", start, i + 1);
  }
  return undefined;
}

/** Watches (and for streams, may rewrite) the response body on its way to the client. */
export class UsageReader {
  private readonly sse: boolean;
  private readonly strip: boolean;
  private found: Usage | undefined;
  private json: Buffer[] = [];
  private jsonBytes = 0;
  private pending = "";
  // Decodes across chunk boundaries: a multi-byte character split between two chunks stays whole.
  private readonly decoder = new StringDecoder("utf8");

  constructor(contentType: string | undefined, strip: boolean) {
    this.sse = contentType?.includes("text/event-stream") ?? false;
    this.strip = strip && this.sse;
  }

  get changesLength(): boolean {
    return this.strip;
  }

  get usage(): Usage | undefined {
    return this.found;
  }

  /** Returns what to send to the client for this chunk (possibly empty). */
  transform(chunk: Buffer): Buffer {
    if (!this.sse) {
      if (this.jsonBytes + chunk.length <= MAX_JSON_BYTES) this.json.push(chunk);
      this.jsonBytes += chunk.length;
      return chunk;
    }
    if (!this.strip) {
      // Pass bytes through untouched; scan only complete events for usage.
      this.scan(this.decoder.write(chunk), false);
      return chunk;
    }
    return Buffer.from(this.scan(this.decoder.write(chunk), true));
  }

  /** End of body: returns any held-back bytes. */
  flush(): Buffer | undefined {
    if (!this.sse) {
      if (this.jsonBytes > 0 && this.jsonBytes <= MAX_JSON_BYTES) {
        const body = this.json.length === 1 ? this.json[0]! : Buffer.concat(this.json);
        this.found = usageInJson(body);
      }
      this.json = [];
      return undefined;
    }
    const rest = this.pending + this.decoder.end();
    this.pending = "";
    if (rest === "") return undefined;
    const kept = this.keepEvent(rest) ? withoutNullUsage(rest, this.strip) : "";
    return this.strip && kept !== "" ? Buffer.from(kept) : undefined;
  }

  /** Splits complete events off the buffer; returns the text to forward when rewriting. */
  private scan(text: string, rewrite: boolean): string {
    this.pending += text;
    let out = "";
    for (;;) {
      const { end, sep } = eventEnd(this.pending);
      if (end === -1) break;
      const event = this.pending.slice(0, end + sep);
      this.pending = this.pending.slice(end + sep);
      if (this.keepEvent(event) && rewrite) out += withoutNullUsage(event, this.strip);
    }
    if (!rewrite && this.pending.length > 1 << 20) this.pending = ""; // not SSE after all: stop buffering
    return out;
  }

  /** Reads usage from an event; false when it is the extra usage chunk to hide from the client. */
  private keepEvent(event: string): boolean {
    const at = event.indexOf('"usage"');
    if (at === -1) return true;
    // The common case with usage requested: `"usage":null` on every chunk, nothing to read.
    if (isNullAfter(event, at + 7) && event.indexOf('"usage"', at + 7) === -1) return true;
    for (const line of event.split("\n")) {
      if (!line.startsWith("data:")) continue;
      const data = line.slice(5).trim();
      if (data === "[DONE]") continue;
      try {
        const doc = JSON.parse(data) as Record<string, unknown>;
        const usage = usageOf(doc);
        if (usage !== undefined) {
          this.found = usage;
          const choices = doc.choices;
          if (this.strip && Array.isArray(choices) && choices.length === 0) return false;
        }
      } catch {
        // A data line that is not JSON: forward as is.
      }
    }
    return true;
  }
}

/** Where the first complete SSE event ends: the blank line ("\n\n" or "\r\n\r\n"). */
function eventEnd(text: string): { end: number; sep: number } {
  const lf = text.indexOf("\n\n");
  const crlf = text.indexOf("\r\n\r\n");
  if (crlf !== -1 && (lf === -1 || crlf < lf)) return { end: crlf, sep: 4 };
  return { end: lf, sep: 2 };
}

/** True when, after `from` (just past a key), the value is `null` (`: null`, blanks allowed). */
function isNullAfter(text: string, from: number): boolean {
  let i = from;
  while (text.charCodeAt(i) === 0x20) i++;
  if (text.charCodeAt(i) !== 0x3a) return false; // ":"
  i++;
  while (text.charCodeAt(i) === 0x20) i++;
  return text.startsWith("null", i);
}

const NULL_USAGE_TIGHT = ',"usage":null}';
const NULL_USAGE_SPACED = ', "usage": null}';

/**
 * With usage requested for the client, workers add `"usage":null` to every chunk (as OpenAI does);
 * drop it again when it is the last key of a data line's top-level object, the form servers emit.
 */
function withoutNullUsage(event: string, strip: boolean): string {
  if (!strip || !event.includes('"usage"')) return event;
  // Fast path: one data line ending in the tight or spaced form (vLLM, SGLang).
  const nl = event.indexOf("\n");
  const line = nl === -1 ? event : event.slice(0, nl);
  const rest = nl === -1 ? "" : event.slice(nl);
  if (rest.trim() === "") {
    for (const form of [NULL_USAGE_TIGHT, NULL_USAGE_SPACED]) {
      const body = line.endsWith("\r") ? line.slice(0, -1) : line;
      if (body.endsWith(form)) {
        return `${body.slice(0, -form.length)}}${line.endsWith("\r") ? "\r" : ""}${rest}`;
      }
    }
  }
  return event.replace(/,\s*"usage"\s*:\s*null\s*}(\s*)$/gm, "}$1");
}
