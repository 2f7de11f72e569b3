/**
 * Every answer the gateway makes up itself (a rejection, an upstream failure, a bad request) is an
 * OpenAI-style JSON error body `{"error":{"message","type","code"}}` with `X-SMG-Error-Code`.
 */
import type { ServerResponse } from "node:http";
import { AdmissionError, ConfigError } from "../core/errors.js";

export interface GatewayErrorSpec {
  status: number;
  code: string;
  message: string;
  type?: string;
  headers?: Record<string, string>;
}

const TYPE_BY_STATUS: Record<number, string> = {
  400: "invalid_request_error",
  401: "authentication_error",
  403: "permission_error",
  404: "not_found_error",
  408: "timeout_error",
  413: "invalid_request_error",
  429: "rate_limit_error",
  499: "client_closed_request",
  502: "upstream_error",
  503: "service_unavailable",
  504: "timeout_error",
};

export class GatewayError extends Error {
  readonly status: number;
  readonly code: string;
  readonly headers: Record<string, string> | undefined;
  constructor(status: number, code: string, message: string, headers?: Record<string, string>) {
    super(message);
    this.status = status;
    this.code = code;
    this.headers = headers;
  }
}

export function specFromAdmissionError(error: AdmissionError): GatewayErrorSpec {
  const headers: Record<string, string> = {};
  if (error.retryAfterSecs !== undefined) headers["retry-after"] = String(error.retryAfterSecs);
  if (error.code === "scheduler_preempted") headers["x-smg-preempted"] = "true";
  return { status: error.status, code: error.code, message: error.message, headers };
}

export function specFromError(error: unknown): GatewayErrorSpec {
  if (error instanceof AdmissionError) return specFromAdmissionError(error);
  if (error instanceof ConfigError) return { status: 400, code: "invalid_config", message: error.message };
  if (error instanceof GatewayError) {
    return {
      status: error.status,
      code: error.code,
      message: error.message,
      ...(error.headers ? { headers: error.headers } : {}),
    };
  }
  return { status: 500, code: "internal_error", message: "internal gateway error" };
}

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

/** Writes the JSON error answer unless headers already went out (then the socket is cut). */
export function sendError(res: ServerResponse, spec: GatewayErrorSpec): void {
  if (res.headersSent) {
    res.destroy();
    return;
  }
  if (res.destroyed) return;
  const error = {
    message: spec.message,
    type: spec.type ?? TYPE_BY_STATUS[spec.status] ?? "api_error",
    code: spec.code,
  };
  sendJson(res, spec.status, { error }, { "x-smg-error-code": spec.code, ...spec.headers });
}
