/**
 * Every answer the gateway makes up itself (a rejection, an upstream failure, a bad request) is an
 * OpenAI-style JSON error body `{"error":{"message","type","code"}}` (plus `param` when a request
 * field is at fault) with `X-SMG-Error-Code`, built from its row in the error table.
 */
import type { ServerResponse } from "node:http";
import { errorType } from "../../contracts/error-table.js";
import { type GatewayError, retryAfter } from "../../contracts/gateway-error.js";

/** Writes a JSON answer with its length. */
export function sendJson(
  res: ServerResponse,
  status: number,
  value: unknown,
  headers: Record<string, string> = {},
): void {
  const body = JSON.stringify(value);
  res.writeHead(status, {
    "content-type": "application/json",
    "content-length": Buffer.byteLength(body),
    ...headers,
  });
  res.end(body);
}

function errorHeaders(error: GatewayError): Record<string, string> {
  const headers: Record<string, string> = { "x-smg-error-code": error.code };
  if (error.retryAfterSecs !== undefined) headers["retry-after"] = retryAfter(error.retryAfterSecs);
  if (error.code === "scheduler_preempted") headers["x-smg-preempted"] = "true";
  if (error.headers !== undefined) Object.assign(headers, error.headers);
  return headers;
}

function errorBody(error: GatewayError): string {
  const type = errorType(error.status);
  // `param` (OpenAI's field name) only when a request field is at fault.
  const body =
    error.param !== undefined
      ? { message: error.message, type, param: error.param, code: error.code }
      : { message: error.message, type, code: error.code };
  return JSON.stringify({ error: body });
}

/** Writes the JSON error answer unless headers already went out (then the socket is cut). */
export function sendError(res: ServerResponse, error: GatewayError, extra?: Record<string, string>): void {
  if (res.headersSent) {
    res.destroy();
    return;
  }
  if (res.destroyed) return;
  const body = errorBody(error);
  res.writeHead(error.status, {
    "content-type": "application/json",
    "content-length": Buffer.byteLength(body),
    ...errorHeaders(error),
    ...extra,
  });
  res.end(body);
}

const REASON: Record<number, string> = {
  400: "Bad Request",
  405: "Method Not Allowed",
  408: "Request Timeout",
  413: "Content Too Large",
  417: "Expectation Failed",
  431: "Request Header Fields Too Large",
  503: "Service Unavailable",
  505: "HTTP Version Not Supported",
};

/**
 * A whole error answer as raw bytes, for sockets that have no ServerResponse (Node's own parse
 * errors, CONNECT, connections past the cap). It always closes the connection.
 */
export function rawErrorResponse(error: GatewayError, requestId: string): string {
  const body = errorBody(error);
  let head = `HTTP/1.1 ${error.status} ${REASON[error.status] ?? "Error"}\r\n`;
  head += "content-type: application/json\r\n";
  head += `content-length: ${Buffer.byteLength(body)}\r\n`;
  head += `x-request-id: ${requestId}\r\n`;
  const headers = errorHeaders(error);
  for (const name in headers) head += `${name}: ${headers[name]}\r\n`;
  return `${head}connection: close\r\n\r\n${body}`;
}
