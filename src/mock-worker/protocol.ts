/**
 * Wire formats: request parsing and response bodies/chunks for the OpenAI-compatible endpoints
 * (`/v1/chat/completions`, `/v1/completions`) and SGLang's native `/generate`.
 */

import {
  generatedText,
  isRecord,
  messagesChars,
  promptTokens,
  tokensForChars,
  tokensText,
} from "./tokens.js";

export type Endpoint = "chat" | "completion" | "generate";

export interface InferenceRequest {
  readonly endpoint: Endpoint;
  readonly stream: boolean;
  /** OpenAI `stream_options.include_usage`: add the usage chunk before [DONE]. */
  readonly includeUsage: boolean;
  /** False: a worker that never reports usage (neither the usage chunk nor a whole answer's `usage`). */
  readonly reportUsage?: boolean;
  readonly maxTokens: number;
  /** The client capped the output; the answer stops on "length" rather than "stop". */
  readonly capped: boolean;
  readonly promptTokens: number;
  /** Prompt tokens found in the worker's prefix cache; undefined when it has none. */
  readonly cachedTokens?: number | undefined;
}

export class RequestError extends Error {}

function optionalCount(body: Record<string, unknown>, key: string): number | undefined {
  const v = body[key];
  if (v === undefined || v === null) return undefined;
  if (typeof v !== "number" || !Number.isInteger(v) || v < 0) {
    throw new RequestError(`${key} must be a non-negative integer`);
  }
  return v;
}

/** Validates a parsed JSON body; throws RequestError (answered 400) when it cannot be served. */
export function parseInferenceRequest(
  endpoint: Endpoint,
  body: unknown,
  defaultMaxTokens: number,
): InferenceRequest {
  if (!isRecord(body)) throw new RequestError("request body must be a JSON object");
  let max: number | undefined;
  let prompt: number;
  if (endpoint === "generate") {
    const params = body["sampling_params"];
    if (params !== undefined && params !== null && !isRecord(params)) {
      throw new RequestError("sampling_params must be an object");
    }
    max = params ? optionalCount(params, "max_new_tokens") : undefined;
    prompt = body["text"] !== undefined ? promptTokens(body["text"]) : promptTokens(body["input_ids"]);
  } else {
    max = optionalCount(body, "max_tokens") ?? optionalCount(body, "max_completion_tokens");
    prompt =
      endpoint === "chat" ? tokensForChars(messagesChars(body["messages"])) : promptTokens(body["prompt"]);
  }
  const options = body["stream_options"];
  return {
    endpoint,
    stream: body["stream"] === true,
    includeUsage: isRecord(options) && options["include_usage"] === true,
    maxTokens: max ?? defaultMaxTokens,
    capped: max !== undefined,
    promptTokens: prompt,
  };
}

interface ErrorBody {
  error: { message: string; type: string; param: null; code: string | null };
}

/** OpenAI-style error body. */
export function errorBody(message: string, type: string, code: string | null = null): ErrorBody {
  return { error: { message, type, param: null, code } };
}

/**
 * One request's answer in its endpoint's format: the events to stream per token and at the end,
 * or the whole body at once.
 */
export interface ResponseFormat {
  /** Events carrying output tokens `from` .. `to - 1` (one, or several at a stream interval), in order. */
  tokenEvents(from: number, to: number): unknown[];
  /** Events after the last token (before `[DONE]`). */
  endEvents(): unknown[];
  /** The non-streaming body. */
  fullBody(): unknown;
}

interface Usage {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
  /** With a prefix cache, as OpenAI reports it. */
  prompt_tokens_details?: { cached_tokens: number };
}

function usageOf(req: InferenceRequest): Usage {
  const usage: Usage = {
    prompt_tokens: req.promptTokens,
    completion_tokens: req.maxTokens,
    total_tokens: req.promptTokens + req.maxTokens,
  };
  if (req.cachedTokens !== undefined) usage.prompt_tokens_details = { cached_tokens: req.cachedTokens };
  return usage;
}

/** SGLang's meta_info: prompt and completion tokens, and `cached_tokens` with a prefix cache. */
function metaTokens(req: InferenceRequest, completionTokens: number): Record<string, number> {
  const meta: Record<string, number> = {
    prompt_tokens: req.promptTokens,
    completion_tokens: completionTokens,
  };
  if (req.cachedTokens !== undefined) meta["cached_tokens"] = req.cachedTokens;
  return meta;
}

function openAiFinish(req: InferenceRequest): "length" | "stop" {
  return req.capped ? "length" : "stop";
}

class ChatFormat implements ResponseFormat {
  constructor(
    private readonly req: InferenceRequest,
    private readonly id: string,
    private readonly model: string,
    private readonly created: number,
  ) {}

  private chunk(delta: Record<string, string>, finish: string | null): Record<string, unknown> {
    const chunk: Record<string, unknown> = {
      id: this.id,
      object: "chat.completion.chunk",
      created: this.created,
      model: this.model,
      choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }],
    };
    // Like OpenAI: with include_usage every chunk carries `usage: null` until the usage chunk.
    if (this.req.includeUsage) chunk["usage"] = null;
    return chunk;
  }

  tokenEvents(from: number, to: number): unknown[] {
    const token = this.chunk({ content: tokensText(from, to) }, null);
    return from === 0 ? [this.chunk({ role: "assistant", content: "" }, null), token] : [token];
  }

  endEvents(): unknown[] {
    const events: unknown[] = [];
    if (this.req.maxTokens === 0) events.push(this.chunk({ role: "assistant", content: "" }, null));
    events.push(this.chunk({}, openAiFinish(this.req)));
    if (this.req.includeUsage) {
      events.push({
        id: this.id,
        object: "chat.completion.chunk",
        created: this.created,
        model: this.model,
        choices: [],
        usage: usageOf(this.req),
      });
    }
    return events;
  }

  fullBody(): unknown {
    return {
      id: this.id,
      object: "chat.completion",
      created: this.created,
      model: this.model,
      choices: [
        {
          index: 0,
          message: { role: "assistant", content: generatedText(this.req.maxTokens) },
          logprobs: null,
          finish_reason: openAiFinish(this.req),
        },
      ],
      ...(this.req.reportUsage === false ? {} : { usage: usageOf(this.req) }),
    };
  }
}

class CompletionFormat implements ResponseFormat {
  constructor(
    private readonly req: InferenceRequest,
    private readonly id: string,
    private readonly model: string,
    private readonly created: number,
  ) {}

  private chunk(text: string, finish: string | null): Record<string, unknown> {
    const chunk: Record<string, unknown> = {
      id: this.id,
      object: "text_completion",
      created: this.created,
      model: this.model,
      choices: [{ index: 0, text, logprobs: null, finish_reason: finish }],
    };
    if (this.req.includeUsage) chunk["usage"] = null;
    return chunk;
  }

  tokenEvents(from: number, to: number): unknown[] {
    return [this.chunk(tokensText(from, to), null)];
  }

  endEvents(): unknown[] {
    const events: unknown[] = [this.chunk("", openAiFinish(this.req))];
    if (this.req.includeUsage) {
      events.push({
        id: this.id,
        object: "text_completion",
        created: this.created,
        model: this.model,
        choices: [],
        usage: usageOf(this.req),
      });
    }
    return events;
  }

  fullBody(): unknown {
    return {
      id: this.id,
      object: "text_completion",
      created: this.created,
      model: this.model,
      choices: [
        {
          index: 0,
          text: generatedText(this.req.maxTokens),
          logprobs: null,
          finish_reason: openAiFinish(this.req),
        },
      ],
      ...(this.req.reportUsage === false ? {} : { usage: usageOf(this.req) }),
    };
  }
}

/**
 * SGLang native: each chunk carries the cumulative text and meta_info; the last token's chunk
 * carries the finish reason. SGLang stops on its max_new_tokens cap, so the reason is "length".
 */
class GenerateFormat implements ResponseFormat {
  private text = "";

  constructor(
    private readonly req: InferenceRequest,
    private readonly id: string,
  ) {}

  private finishReason(): { type: "length"; length: number } {
    return { type: "length", length: this.req.maxTokens };
  }

  private chunk(completionTokens: number, last: boolean): unknown {
    return {
      text: this.text,
      meta_info: {
        id: this.id,
        ...metaTokens(this.req, completionTokens),
        finish_reason: last ? this.finishReason() : null,
      },
      index: 0,
    };
  }

  tokenEvents(from: number, to: number): unknown[] {
    this.text += tokensText(from, to);
    return [this.chunk(to, to === this.req.maxTokens)];
  }

  endEvents(): unknown[] {
    return this.req.maxTokens === 0 ? [this.chunk(0, true)] : [];
  }

  fullBody(): unknown {
    return {
      text: generatedText(this.req.maxTokens),
      meta_info: {
        id: this.id,
        ...metaTokens(this.req, this.req.maxTokens),
        finish_reason: this.finishReason(),
      },
    };
  }
}

export function responseFormat(req: InferenceRequest, seq: number, model: string): ResponseFormat {
  const created = Math.floor(Date.now() / 1000);
  switch (req.endpoint) {
    case "chat":
      return new ChatFormat(req, `chatcmpl-mock-${seq}`, model, created);
    case "completion":
      return new CompletionFormat(req, `cmpl-mock-${seq}`, model, created);
    case "generate":
      return new GenerateFormat(req, `mock-${seq}`);
  }
}
