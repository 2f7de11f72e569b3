/**
 * Helpers of the money tests (issue 35, items 1, 2, 3, 7 and 8): budget holds per request whatever
 * the client's X-Request-Id, the reservation for requests without max_tokens, streams without usage
 * counted, one ledger row per request, the real queue wait. Requests go over raw loopback sockets
 * (test/security/raw.ts): what a client library would hide (a second answer, an echoed header) is
 * seen as sent.
 */
import type { OutcomeRecord } from "../../src/contracts/outcome.js";
import { type RawResponse, rawExchange } from "../security/raw.js";
import { PROMPT } from "./harness.js";

export type { RawResponse };

/** A chat body without max_tokens (unless `extra` sets one). */
export function unlimitedChat(extra: Record<string, unknown> = {}): Record<string, unknown> {
  return { model: "mock-llm", messages: [{ role: "user", content: PROMPT }], ...extra };
}

/**
 * One POST over its own raw socket (`Connection: close`): the first response, or undefined when the
 * gateway sent none (cut, or nothing within `waitMs`). `extra` headers are sent as given.
 */
export async function rawPost(
  port: number,
  body: Record<string, unknown> | string,
  headers: Record<string, string> = {},
  options: { path?: string; waitMs?: number } = {},
): Promise<RawResponse | undefined> {
  const text = typeof body === "string" ? body : JSON.stringify(body);
  let head = `POST ${options.path ?? "/v1/chat/completions"} HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n`;
  head += `Content-Length: ${Buffer.byteLength(text)}\r\nConnection: close\r\n`;
  for (const [name, value] of Object.entries(headers)) head += `${name}: ${value}\r\n`;
  const result = await rawExchange(port, `${head}\r\n${text}`, { waitMs: options.waitMs ?? 15_000 });
  return result.responses[0];
}

/** Tokens a record was charged (0 when nothing was). */
export function charged(o: OutcomeRecord): number {
  return (o.inputTokens ?? 0) + (o.outputTokens ?? 0);
}

/** The worker's usage of a whole (non-stream) answer: its total tokens; 0 for an error. */
export function usageTotal(res: RawResponse | undefined): number {
  if (res === undefined || res.status !== 200) return 0;
  const doc = JSON.parse(res.body) as { usage?: { total_tokens?: number } };
  return doc.usage?.total_tokens ?? 0;
}

/** Counts of answers by `status code` (`200`, `403 tenant_budget_exhausted`, `none`). */
export function tally(replies: Array<RawResponse | undefined>): Record<string, number> {
  const out: Record<string, number> = {};
  for (const r of replies) {
    const key =
      r === undefined ? "none" : r.status === 200 ? "200" : `${r.status} ${r.headers["x-smg-error-code"]}`;
    out[key] = (out[key] ?? 0) + 1;
  }
  return out;
}
