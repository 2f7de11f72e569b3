/**
 * Reads the few body fields admission needs (model, max_tokens, n, stream, the prompt's size),
 * checks their types as the OpenAI API does (400 naming the field), and estimates the request's
 * cost in tokens: prompt characters / 4 plus the requested output length times `n`, clamped to
 * the cost ceiling (`max_cost_tokens`) so that no single request can claim more than a model's
 * context. The body itself is forwarded byte for byte.
 */
import { GatewayError } from "../../contracts/gateway-error.js";

export interface RequestEstimate {
  /** Estimated total tokens, 1..maxCostTokens. */
  cost: number;
  promptTokens: number;
  maxOutputTokens: number;
  /**
   * The body limits its output (`max_completion_tokens`, `max_tokens` or
   * `sampling_params.max_new_tokens`). Without a limit `maxOutputTokens` is 0 and a budget reserves
   * an estimate instead (output-lengths.ts).
   */
  outputLimited: boolean;
  /** Answers asked for (`n`, default 1). */
  choices: number;
  model: string | undefined;
  stream: boolean;
  /** The parsed JSON body, when it was a JSON object. */
  json: Record<string, unknown> | undefined;
}

/** Used when no `max_cost_tokens` is configured and no worker reports its context length. */
export const DEFAULT_MAX_COST_TOKENS = 131_072;
/** Deeper `messages`/`prompt` structures than this are refused (no real request nests this far). */
const MAX_BODY_DEPTH = 32;

const UNKNOWN: RequestEstimate = {
  cost: 1,
  promptTokens: 0,
  maxOutputTokens: 0,
  outputLimited: false,
  choices: 1,
  model: undefined,
  stream: false,
  json: undefined,
};

function invalidField(param: string, message: string): GatewayError {
  return new GatewayError("invalid_request_body", `${param}: ${message}`, { param });
}

/**
 * Characters of text in a prompt-like value: strings, arrays of them, chat messages `{content}`
 * and content parts `{text}`. Walks without recursion and refuses nesting past MAX_BODY_DEPTH.
 */
function textLength(value: unknown, param: string): number {
  if (typeof value === "string") return value.length;
  if (value === null || typeof value !== "object") return 0;
  let chars = 0;
  const stack: unknown[] = [value];
  const depths: number[] = [0];
  while (stack.length > 0) {
    const v = stack.pop();
    const depth = depths.pop()!;
    if (typeof v === "string") {
      chars += v.length;
      continue;
    }
    if (v === null || typeof v !== "object") continue;
    if (depth >= MAX_BODY_DEPTH) throw invalidField(param, `nested deeper than ${MAX_BODY_DEPTH} levels`);
    if (Array.isArray(v)) {
      for (let i = v.length - 1; i >= 0; i--) {
        stack.push(v[i]);
        depths.push(depth + 1);
      }
      continue;
    }
    const o = v as Record<string, unknown>;
    // Chat content parts: {type: "text", text}; messages: {role, content}.
    if (typeof o.text === "string") chars += o.text.length;
    else if ("content" in o) {
      stack.push(o.content);
      depths.push(depth + 1);
    }
  }
  return chars;
}

/** A token count field: absent or null, else an integer >= 0. */
function countField(doc: Record<string, unknown>, key: string, param = key): number | undefined {
  const v = doc[key];
  if (v === undefined || v === null) return undefined;
  if (typeof v !== "number" || !Number.isInteger(v) || v < 0) {
    throw invalidField(param, `must be a non-negative integer, got ${describe(v)}`);
  }
  return v;
}

function describe(v: unknown): string {
  if (typeof v === "string")
    return `the string ${JSON.stringify(v.length > 32 ? `${v.slice(0, 32)}...` : v)}`;
  if (typeof v === "number") return String(v);
  if (Array.isArray(v)) return "an array";
  return v === null ? "null" : typeof v;
}

/** Paths whose answers are generated text (a chat, a completion, SGLang's native API, a response). */
const GENERATING = ["/chat/completions", "/completions", "/generate", "/responses"];

/**
 * The request asks for generated output, whose length its body may leave open: a budget reserves an
 * output estimate for it when it sets no limit. Embeddings, rerank, scoring, tokenizing do not.
 */
export function generatesOutput(url: string): boolean {
  const q = url.indexOf("?");
  const path = q === -1 ? url : url.slice(0, q);
  return GENERATING.some((suffix) => path.endsWith(suffix));
}

/** True when the body should be read as JSON (declared so, or undeclared). */
function isJson(contentType: string | undefined): boolean {
  return contentType === undefined || contentType.toLowerCase().includes("json");
}

export function estimateRequest(
  body: Buffer,
  contentType: string | undefined,
  maxCostTokens: number,
): RequestEstimate {
  if (body.length === 0 || !isJson(contentType)) return UNKNOWN;
  let json: unknown;
  try {
    json = JSON.parse(body.toString("utf8"));
  } catch (err) {
    throw new GatewayError("invalid_json", `the request body is not valid JSON: ${(err as Error).message}`);
  }
  if (json === null || typeof json !== "object" || Array.isArray(json)) return UNKNOWN;
  const doc = json as Record<string, unknown>;

  const messages = doc.messages;
  if (messages !== undefined && messages !== null && !Array.isArray(messages)) {
    throw invalidField("messages", `must be an array of messages, got ${describe(messages)}`);
  }
  for (const key of ["prompt", "input", "text"] as const) {
    const v = doc[key];
    if (v !== undefined && v !== null && typeof v !== "string" && !Array.isArray(v)) {
      throw invalidField(key, `must be a string or an array, got ${describe(v)}`);
    }
  }
  const chars =
    textLength(messages, "messages") +
    textLength(doc.prompt, "prompt") +
    textLength(doc.input, "input") +
    textLength(doc.text, "text");

  const completion = countField(doc, "max_completion_tokens");
  const maxTokens = countField(doc, "max_tokens");
  let sampled: number | undefined;
  const sampling = doc.sampling_params;
  if (sampling !== undefined && sampling !== null) {
    if (typeof sampling !== "object" || Array.isArray(sampling)) {
      throw invalidField("sampling_params", `must be an object, got ${describe(sampling)}`);
    }
    sampled = countField(
      sampling as Record<string, unknown>,
      "max_new_tokens",
      "sampling_params.max_new_tokens",
    );
  }
  const n = countField(doc, "n") ?? 1;
  if (n < 1) throw invalidField("n", "must be an integer >= 1");
  const stream = doc.stream;
  if (stream !== undefined && stream !== null && typeof stream !== "boolean") {
    throw invalidField("stream", `must be true or false, got ${describe(stream)}`);
  }
  const model = doc.model;
  if (model !== undefined && model !== null && typeof model !== "string") {
    throw invalidField("model", `must be a string, got ${describe(model)}`);
  }

  // Every figure is clamped to the ceiling, so an absurd max_tokens (1e30) costs at most one
  // context's worth and arithmetic on it stays exact.
  const promptTokens = Math.min(Math.ceil(chars / 4), maxCostTokens);
  const perChoice = Math.min(completion ?? maxTokens ?? sampled ?? 0, maxCostTokens);
  const maxOutputTokens = Math.min(perChoice * Math.min(n, maxCostTokens), maxCostTokens);
  return {
    cost: Math.max(1, Math.min(promptTokens + maxOutputTokens, maxCostTokens)),
    promptTokens,
    maxOutputTokens,
    outputLimited: (completion ?? maxTokens ?? sampled) !== undefined,
    choices: Math.min(n, maxCostTokens),
    model: typeof model === "string" ? model : undefined,
    stream: stream === true,
    json: doc,
  };
}
