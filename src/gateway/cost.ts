/**
 * Estimated cost of a request in tokens, for fair queuing (and budgets): prompt characters / 4
 * plus the requested output length. The body is parsed only for this and forwarded byte-for-byte.
 */

export interface RequestEstimate {
  /** Estimated total tokens (>= 1). */
  cost: number;
  promptTokens: number;
  maxOutputTokens: number;
  model: string | undefined;
  stream: boolean;
  /** The parsed JSON body, when it was a JSON object. */
  json: Record<string, unknown> | undefined;
}

const UNKNOWN: RequestEstimate = {
  cost: 1,
  promptTokens: 0,
  maxOutputTokens: 0,
  model: undefined,
  stream: false,
  json: undefined,
};

function textLength(value: unknown): number {
  if (typeof value === "string") return value.length;
  if (Array.isArray(value)) {
    let n = 0;
    for (const part of value) n += textLength(part);
    return n;
  }
  if (value !== null && typeof value === "object") {
    const v = value as Record<string, unknown>;
    // Chat content parts: {type: "text", text}; messages: {role, content}.
    if (typeof v.text === "string") return v.text.length;
    if ("content" in v) return textLength(v.content);
  }
  return 0;
}

function positiveInt(value: unknown): number {
  return typeof value === "number" && Number.isFinite(value) && value > 0 ? Math.floor(value) : 0;
}

export function estimateRequest(body: Buffer, contentType: string | undefined): RequestEstimate {
  if (body.length === 0) return UNKNOWN;
  if (contentType !== undefined && !contentType.includes("json")) return UNKNOWN;
  let json: unknown;
  try {
    json = JSON.parse(body.toString("utf8"));
  } catch {
    return UNKNOWN;
  }
  if (json === null || typeof json !== "object" || Array.isArray(json)) return UNKNOWN;
  const doc = json as Record<string, unknown>;
  const chars =
    textLength(doc.messages) + textLength(doc.prompt) + textLength(doc.input) + textLength(doc.text);
  const sampling = doc.sampling_params as Record<string, unknown> | undefined;
  const maxOutputTokens =
    positiveInt(doc.max_completion_tokens) ||
    positiveInt(doc.max_tokens) ||
    (sampling && typeof sampling === "object" ? positiveInt(sampling.max_new_tokens) : 0);
  const promptTokens = Math.ceil(chars / 4);
  return {
    cost: Math.max(1, promptTokens + maxOutputTokens),
    promptTokens,
    maxOutputTokens,
    model: typeof doc.model === "string" ? doc.model : undefined,
    stream: doc.stream === true,
    json: doc,
  };
}
