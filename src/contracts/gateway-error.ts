/**
 * The gateway's error class: a refusal or failure with a stable code, whose status and Retry-After
 * come from the code's row in the error table. Any layer may raise one; only the HTTP front writes
 * it (gateway/http/http-errors.ts).
 */
import { AdmissionError, BudgetRefusedError, ConfigError } from "@sluice/scheduler/core/errors.js";
import { ERROR_TABLE, type ErrorCode, isErrorCode } from "./error-table.js";

/** Retry-After is a whole number of seconds, never more than a day (a daily budget's reset). */
export const MAX_RETRY_AFTER_SECS = 86_400;

/** Renders a Retry-After value: a non-negative integer number of seconds, capped. */
export function retryAfter(secs: number): string {
  if (secs === Number.POSITIVE_INFINITY) return String(MAX_RETRY_AFTER_SECS);
  if (!Number.isFinite(secs) || secs <= 0) return "0";
  return String(Math.min(Math.ceil(secs), MAX_RETRY_AFTER_SECS));
}

interface GatewayErrorOptions {
  /** The request field at fault (OpenAI's `param`). */
  param?: string | undefined;
  /** For rows whose Retry-After is `computed`. */
  retryAfterSecs?: number | undefined;
  /** Extra answer headers. */
  headers?: Record<string, string> | undefined;
}

/** A rejection the gateway answers; status and Retry-After come from the code's table row. */
export class GatewayError extends Error {
  override readonly name = "GatewayError";
  readonly code: ErrorCode;
  readonly status: number;
  readonly param: string | undefined;
  readonly headers: Record<string, string> | undefined;
  readonly retryAfterSecs: number | undefined;

  constructor(code: ErrorCode, message?: string, options: GatewayErrorOptions = {}) {
    const row = ERROR_TABLE[code];
    super(message ?? row.message);
    this.code = code;
    this.status = row.status;
    this.param = options.param;
    this.headers = options.headers;
    this.retryAfterSecs =
      typeof row.retryAfter === "number"
        ? row.retryAfter
        : row.retryAfter === "computed"
          ? options.retryAfterSecs
          : undefined;
  }
}

/** The answer for any thrown value: its table row, or 500 internal_error for the unexpected. */
export function toGatewayError(error: unknown): GatewayError {
  if (error instanceof GatewayError) return error;
  if (error instanceof AdmissionError) {
    return new GatewayError(error.code, error.message, { retryAfterSecs: error.retryAfterSecs });
  }
  if (error instanceof BudgetRefusedError) {
    return new GatewayError(error.code, error.message, { retryAfterSecs: error.retryAfterSecs });
  }
  if (error instanceof ConfigError) return new GatewayError("invalid_config", error.message);
  const code = (error as { code?: unknown } | null)?.code;
  if (typeof code === "string" && isErrorCode(code) && error instanceof Error) {
    return new GatewayError(code, error.message);
  }
  return new GatewayError("internal_error");
}
