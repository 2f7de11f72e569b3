/**
 * The names of the span attributes sluice sets. Ours carry a `sluice.` prefix; where an OpenTelemetry
 * HTTP semantic convention covers the value, its name is used instead (docs/tracing.md).
 */
export {
  ATTR_ERROR_TYPE,
  ATTR_HTTP_REQUEST_METHOD,
  ATTR_HTTP_RESPONSE_STATUS_CODE,
  ATTR_HTTP_ROUTE,
  ATTR_SERVER_ADDRESS,
  ATTR_SERVER_PORT,
  ATTR_URL_FULL,
  ATTR_URL_PATH,
} from "@opentelemetry/semantic-conventions";

export const SPAN_REQUEST = "sluice.request";
export const SPAN_QUEUE = "sluice.queue";
export const SPAN_UPSTREAM = "sluice.upstream";
export const SPAN_STREAM = "sluice.stream";

export const ATTR_REQUEST_ID = "sluice.request_id";
export const ATTR_TENANT = "sluice.tenant";
export const ATTR_MODEL = "sluice.model";
export const ATTR_POOL = "sluice.pool";
export const ATTR_CLASS_REQUESTED = "sluice.class.requested";
export const ATTR_CLASS_EFFECTIVE = "sluice.class.effective";
/** Time the request waited for a slot, ms (requests that queued for one, granted or not). */
export const ATTR_QUEUE_WAIT_MS = "sluice.queue_wait_ms";
/** fast, queued or rejected. */
export const ATTR_ADMISSION = "sluice.admission";
/** ok, rejected, timeout, cancelled, preempted or error (the outcome record's `outcome`). */
export const ATTR_OUTCOME = "sluice.outcome";
/** The gateway's error code (docs/errors.md), when the request ended with one. */
export const ATTR_ERROR_CODE = "sluice.error_code";
export const ATTR_TOKENS_INPUT = "sluice.tokens.input";
export const ATTR_TOKENS_OUTPUT = "sluice.tokens.output";
/** The worker's URL. */
export const ATTR_WORKER = "sluice.worker";
/** Which dispatch of the request this upstream span is: 1 for the first, 2 for its first retry. */
export const ATTR_ATTEMPT = "sluice.attempt";
/** How many upstream attempts the request made (on the request span). */
export const ATTR_ATTEMPTS = "sluice.attempts";
