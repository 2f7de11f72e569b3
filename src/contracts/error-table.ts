/**
 * The one error table: every answer the gateway makes up itself is a row here, and every rejection
 * is built from its row. docs/errors.md lists the same rows; test/gateway/error-table.test.ts fails
 * when the two disagree.
 *
 * Columns: HTTP status; whether a client may retry the same request unchanged; the Retry-After rule
 * (`none`, a fixed number of seconds, or `computed` from the situation, e.g. a token bucket's refill);
 * the default message; the outcome record's kind for a request that ends with it (`rejected` unless
 * named: the gateway refused it); the anchor in docs/errors.md. Modelled on fastify's errors.js and
 * undici's errors: a stable code is the contract, the message is for people.
 */

import type { OutcomeKind } from "./outcome.js";

type RetryAfterRule = "none" | "computed" | number;

/** How a request that ends with an error code ended, in its outcome record (never `ok`). */
type ErrorOutcome = Exclude<OutcomeKind, "ok">;

interface ErrorRow {
  readonly status: number;
  readonly retryable: boolean;
  readonly retryAfter: RetryAfterRule;
  readonly message: string;
  readonly outcome: ErrorOutcome;
}

function row(
  status: number,
  retryable: boolean,
  retryAfter: RetryAfterRule,
  message: string,
  outcome: ErrorOutcome = "rejected",
): ErrorRow {
  return { status, retryable, retryAfter, message, outcome };
}

export const ERROR_TABLE = {
  // The priority scheduler (the contract's codes).
  scheduler_queue_full: row(429, true, "computed", "the class queue is full"),
  scheduler_queue_timeout: row(
    408,
    true,
    "computed",
    "the request waited its class's queue timeout without admission",
    "timeout",
  ),
  scheduler_preempted: row(
    503,
    true,
    "computed",
    "a higher class took the slot before the first byte",
    "preempted",
  ),
  scheduler_client_cancelled: row(499, false, "none", "the client went away", "cancelled"),
  // Shared state (Redis) unreachable with --state-fail-mode closed (docs/replicas.md).
  scheduler_unavailable: row(503, true, 1, "the shared scheduler state is unavailable"),
  // Shedding at the door (docs/adaptive.md).
  load_shed: row(503, true, "computed", "the gateway is shedding load; retry later"),
  // Legacy admission (scheduler disabled or failed safe).
  admission_queue_full: row(429, true, "computed", "the admission queue is full"),
  admission_queue_timeout: row(
    408,
    true,
    "computed",
    "the request waited the queue timeout without admission",
    "timeout",
  ),
  admission_client_cancelled: row(499, false, "none", "the client went away", "cancelled"),
  // Who is asking, and what the tenant may do.
  missing_api_key: row(401, false, "none", "authentication required: send Authorization: Bearer <key>"),
  invalid_api_key: row(401, false, "none", "the API key is not valid"),
  tenant_inactive: row(403, false, "none", "the tenant is suspended or outside its access windows"),
  model_not_allowed: row(403, false, "none", "the tenant may not use this model"),
  tenant_budget_exhausted: row(403, false, "computed", "the tenant's budget for this period is used up"),
  token_budget_exceeded: row(429, true, "computed", "the tenant is over its tokens per minute"),
  request_rate_exceeded: row(429, true, "computed", "the tenant is over its requests per minute"),
  // The request itself.
  invalid_request_target: row(400, false, "none", "the request target must be a path"),
  method_not_allowed: row(405, false, "none", "the method is not supported"),
  missing_host_header: row(400, false, "none", "an HTTP/1.1 request must carry a Host header"),
  unsupported_transfer_encoding: row(400, false, "none", "only plain chunked transfer encoding is supported"),
  upgrade_not_supported: row(400, false, "none", "sluice does not upgrade connections"),
  malformed_request: row(400, false, "none", "the request could not be parsed"),
  expectation_failed: row(417, false, "none", "only Expect: 100-continue is supported"),
  request_headers_too_large: row(431, false, "none", "the request line and headers are too large"),
  http_version_not_supported: row(505, false, "none", "only HTTP/1.0 and HTTP/1.1 are supported"),
  request_header_timeout: row(408, true, "none", "the request headers were not received in time", "timeout"),
  request_body_timeout: row(408, true, "none", "the request body stalled", "timeout"),
  request_body_too_slow: row(
    408,
    true,
    "none",
    "the request body did not arrive within the body deadline",
    "timeout",
  ),
  payload_too_large: row(413, false, "none", "the request body exceeds the size limit"),
  invalid_json: row(400, false, "none", "the request body is not valid JSON"),
  invalid_request_body: row(400, false, "none", "a request field has the wrong type or shape"),
  invalid_request: row(400, false, "none", "the request cannot be forwarded as sent"),
  too_many_connections: row(503, true, 1, "the gateway has too many client connections open"),
  // The workers.
  no_healthy_workers: row(503, true, "computed", "no healthy worker is available", "error"),
  worker_room_timeout: row(
    503,
    true,
    "computed",
    "no worker of the request's pool had room for it within the dispatch bound",
    "timeout",
  ),
  model_not_found: row(404, false, "none", "no worker serves this model"),
  upstream_unavailable: row(502, true, "none", "could not connect to the worker", "error"),
  upstream_reset: row(502, true, "none", "the worker closed the connection", "error"),
  upstream_bad_response: row(502, true, "none", "the worker sent a malformed HTTP response", "error"),
  upstream_timeout: row(504, true, "none", "the worker did not answer in time", "timeout"),
  // The gateway itself.
  internal_error: row(500, true, "none", "internal gateway error", "error"),
  metrics_failed: row(500, true, "none", "metrics collection failed"),
  // The admin API.
  invalid_admin_token: row(401, false, "none", "the admin API needs Authorization: Bearer <admin token>"),
  invalid_config: row(400, false, "none", "the configuration is invalid"),
  invalid_capacity: row(400, false, "none", "max_in_flight must be an integer >= 0"),
  not_found: row(404, false, "none", "no such route"),
  // A trusted inference gateway's headers (docs/kubernetes.md).
  invalid_inference_header: row(400, false, "none", "an inference gateway header has an invalid value"),
} as const satisfies Record<string, ErrorRow>;

export type ErrorCode = keyof typeof ERROR_TABLE;

export function isErrorCode(code: string): code is ErrorCode {
  return Object.hasOwn(ERROR_TABLE, code);
}

/** OpenAI's error `type` for a status. */
export function errorType(status: number): string {
  switch (status) {
    case 400:
    case 405:
    case 413:
    case 417:
    case 431:
    case 505:
      return "invalid_request_error";
    case 401:
      return "authentication_error";
    case 403:
      return "permission_error";
    case 404:
      return "not_found_error";
    case 408:
    case 504:
      return "timeout_error";
    case 429:
      return "rate_limit_error";
    case 499:
      return "client_closed_request";
    case 502:
      return "upstream_error";
    case 503:
      return "service_unavailable";
    default:
      return "api_error";
  }
}
