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
        try {
          this.found = usageOf(JSON.parse(Buffer.concat(this.json).toString("utf8")));
        } catch {
          // Not JSON: no usage; the estimate stands.
        }
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
      const end = this.pending.search(/\r?\n\r?\n/);
      if (end === -1) break;
      const sep = this.pending.startsWith("\r\n", end) ? 4 : 2;
      const event = this.pending.slice(0, end + sep);
      this.pending = this.pending.slice(end + sep);
      if (this.keepEvent(event) && rewrite) out += withoutNullUsage(event, this.strip);
    }
    if (!rewrite && this.pending.length > 1 << 20) this.pending = ""; // not SSE after all: stop buffering
    return out;
  }

  /** Reads usage from an event; false when it is the extra usage chunk to hide from the client. */
  private keepEvent(event: string): boolean {
    if (!event.includes('"usage"')) return true;
    for (const line of event.split(/\r?\n/)) {
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

/**
 * With usage requested for the client, workers add `"usage":null` to every chunk (as OpenAI does);
 * drop it again when it is the last key of a data line's top-level object, the form servers emit.
 */
function withoutNullUsage(event: string, strip: boolean): string {
  if (!strip || !event.includes('"usage"')) return event;
  return event.replace(/,\s*"usage"\s*:\s*null\s*}(\s*)$/gm, "}$1");
}
