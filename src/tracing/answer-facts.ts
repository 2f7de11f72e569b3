/**
 * What a worker's answer tells the GenAI conventions besides usage: the model that answered
 * (`gen_ai.response.model`) and why each choice stopped (`gen_ai.response.finish_reasons`). It reads
 * those two fields and nothing else: the answer's text is never kept or copied anywhere.
 *
 * A whole JSON answer is parsed once at its end (up to MAX_JSON_BYTES). An SSE stream is read line by
 * line; a line is parsed only while the model is unknown (the first event) or when it carries a
 * finish reason that is not null (once per choice, at its end), so a long stream costs a byte search
 * per chunk.
 */

/** A whole answer larger than this is not parsed (its model and finish reasons stay unknown). */
const MAX_JSON_BYTES = 8 * 1024 * 1024;
/** An SSE line longer than this is skipped unread (no chunk with a finish reason is this long). */
const MAX_LINE_BYTES = 256 * 1024;
const NEWLINE = 0x0a;
const FINISH_MARK = Buffer.from('"finish_reason":');
const FINISH_MARK_SPACED = Buffer.from('"finish_reason": ');
const NULL_AFTER = Buffer.from("null");

export class AnswerFacts {
  /** The `model` the worker's answer named. */
  responseModel: string | undefined;
  /** One per choice, in the order they finished (SGLang's `meta_info.finish_reason.type` too). */
  readonly finishReasons: string[] = [];
  /** The answer was an SSE stream. */
  readonly stream: boolean;
  private readonly json: Buffer[] = [];
  private jsonBytes = 0;
  /** The start of a line whose end has not arrived. */
  private partial: Buffer[] = [];
  private partialBytes = 0;
  private skippingLine = false;

  constructor(contentType: string | undefined) {
    this.stream = contentType?.includes("text/event-stream") ?? false;
  }

  /** Reads one chunk of the answer as the worker sent it. */
  read(chunk: Buffer): void {
    if (!this.stream) {
      this.jsonBytes += chunk.length;
      if (this.jsonBytes <= MAX_JSON_BYTES) this.json.push(chunk);
      return;
    }
    let start = 0;
    for (let nl = chunk.indexOf(NEWLINE); nl !== -1; nl = chunk.indexOf(NEWLINE, start)) {
      this.lineEnded(chunk.subarray(start, nl));
      start = nl + 1;
    }
    if (start < chunk.length) this.hold(chunk.subarray(start));
  }

  /** The answer ended: a whole JSON answer is read now. */
  end(): void {
    if (this.stream) {
      if (this.partialBytes > 0) this.lineEnded(Buffer.alloc(0));
      return;
    }
    if (this.jsonBytes === 0 || this.jsonBytes > MAX_JSON_BYTES) return;
    const body = this.json.length === 1 ? this.json[0]! : Buffer.concat(this.json);
    this.json.length = 0;
    try {
      this.take(JSON.parse(body.toString("utf8")));
    } catch {
      // Not JSON (an error page, plain text): nothing to read.
    }
  }

  private hold(piece: Buffer): void {
    if (this.skippingLine) return;
    if (this.partialBytes + piece.length > MAX_LINE_BYTES) {
      this.skippingLine = true;
      this.partial = [];
      this.partialBytes = 0;
      return;
    }
    // A copy: the chunk's buffer may be reused once it has been sent on.
    this.partial.push(Buffer.from(piece));
    this.partialBytes += piece.length;
  }

  private lineEnded(tail: Buffer): void {
    if (this.skippingLine) {
      this.skippingLine = false;
      return;
    }
    let line = tail;
    if (this.partialBytes > 0) {
      this.partial.push(tail);
      line = Buffer.concat(this.partial);
      this.partial = [];
      this.partialBytes = 0;
    }
    if (!this.worthParsing(line)) return;
    let text = line.toString("utf8").trim();
    if (!text.startsWith("data:")) return;
    text = text.slice(5).trim();
    if (text === "" || text === "[DONE]") return;
    try {
      this.take(JSON.parse(text));
    } catch {
      // A line that is not one JSON event: skipped.
    }
  }

  /** Only the first event (for the model) and events with a finish reason that is not null. */
  private worthParsing(line: Buffer): boolean {
    if (this.responseModel === undefined) return true;
    for (const mark of [FINISH_MARK, FINISH_MARK_SPACED]) {
      let at = line.indexOf(mark);
      while (at !== -1) {
        const value = at + mark.length;
        if (line.indexOf(NULL_AFTER, value) !== value) return true;
        at = line.indexOf(mark, value);
      }
    }
    return false;
  }

  /** The model and finish reasons of one parsed answer or stream event. */
  private take(doc: unknown): void {
    if (doc === null || typeof doc !== "object") return;
    const d = doc as Record<string, unknown>;
    if (this.responseModel === undefined && typeof d.model === "string" && d.model.length <= 256)
      this.responseModel = d.model;
    if (Array.isArray(d.choices)) {
      for (const choice of d.choices) {
        const reason = (choice as { finish_reason?: unknown } | null)?.finish_reason;
        if (typeof reason === "string" && reason.length <= 64) this.finishReasons.push(reason);
      }
    }
    // SGLang's native /generate: meta_info.finish_reason is {type: "stop" | "length", ...}.
    const meta = d.meta_info as { finish_reason?: { type?: unknown } | null } | undefined;
    const type = meta?.finish_reason?.type;
    if (typeof type === "string" && type.length <= 64) this.finishReasons.push(type);
  }
}
