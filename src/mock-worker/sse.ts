/**
 * Server-sent events as OpenAI and SGLang stream them: `data: <json>\n\n` frames ending in
 * `data: [DONE]\n\n`.
 */

import type { ServerResponse } from "node:http";

export const SSE_HEADERS = {
  "content-type": "text/event-stream; charset=utf-8",
  "cache-control": "no-cache",
} as const;

/** Writes one event; returns write()'s verdict so the caller can respect backpressure. */
export function writeEvent(res: ServerResponse, data: unknown): boolean {
  return res.write(`data: ${JSON.stringify(data)}\n\n`);
}

/** Writes the terminal `[DONE]` event and ends the response. */
export function endStream(res: ServerResponse): void {
  res.end("data: [DONE]\n\n");
}
