/**
 * The request as policies see it: the body the gateway already parsed (cost.ts) and the headers.
 * The prompt text is built on first use only, so policies that never read it (round robin, power of
 * two, session) cost nothing for it.
 */
import type { IncomingHttpHeaders } from "node:http";
import type { RoutingRequest } from "../contracts/routing-policy.js";
import type { OutstandingWork } from "./outstanding-work.js";

/**
 * The prompt as one string: each chat message as `role\ncontent\n` (text parts of a content array
 * in order), then `prompt`, `input` and SGLang `text` (strings as they are, token ids as
 * `id,id,`). Two requests share a prefix of this text when they share a prefix of messages, which
 * is what a worker's prefix cache can reuse. Concatenation builds a rope; no character is copied
 * until a policy reads it.
 */
export function promptTextOf(doc: Record<string, unknown> | undefined): string {
  if (doc === undefined) return "";
  let text = "";
  const messages = doc.messages;
  if (Array.isArray(messages)) {
    for (const message of messages) {
      if (message === null || typeof message !== "object") continue;
      const m = message as { role?: unknown; content?: unknown };
      text += `${typeof m.role === "string" ? m.role : ""}\n`;
      text = appendContent(text, m.content);
      text += "\n";
    }
  }
  for (const key of ["prompt", "input", "text"] as const) {
    const value = doc[key];
    if (value !== undefined && value !== null) text = appendPromptLike(text, value);
  }
  return text;
}

function appendContent(text: string, content: unknown): string {
  if (typeof content === "string") return text + content;
  if (!Array.isArray(content)) return text;
  for (const part of content) {
    if (typeof part === "string") text += part;
    else if (part !== null && typeof part === "object") {
      const t = (part as { text?: unknown }).text;
      if (typeof t === "string") text += t;
    }
  }
  return text;
}

function appendPromptLike(text: string, value: unknown): string {
  if (typeof value === "string") return text + value;
  if (typeof value === "number") return `${text}${value},`;
  if (!Array.isArray(value)) return text;
  for (const item of value) text = appendPromptLike(text, item);
  return text;
}

/** A RoutingRequest over a parsed body and the request's headers. */
export class BodyRoutingRequest implements RoutingRequest {
  private text: string | undefined;

  /** Tokens outstanding per worker (`least_tokens`); undefined: not counted. */
  readonly outstandingTokens: ((url: string) => number) | undefined;

  constructor(
    readonly json: Record<string, unknown> | undefined,
    private readonly headers: IncomingHttpHeaders,
    work?: OutstandingWork,
  ) {
    this.outstandingTokens = work === undefined ? undefined : (url) => work.of(url);
  }

  promptText(): string {
    this.text ??= promptTextOf(this.json);
    return this.text;
  }

  header(name: string): string | undefined {
    const value = this.headers[name];
    return Array.isArray(value) ? value[0] : value;
  }
}
