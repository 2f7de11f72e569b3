/**
 * The `--otlp-endpoint` value: checked at parse time, and turned into the URL spans are posted to.
 * Kept apart from the SDK setup so the command line can check it without loading OpenTelemetry.
 */

const TRACES_PATH = "/v1/traces";
const METRICS_PATH = "/v1/metrics";

/**
 * Where spans are posted: `<endpoint>/v1/traces`, as the OTLP/HTTP spec builds the signal URL from
 * a base endpoint (an endpoint already ending in /v1/traces is taken as is).
 */
export function tracesUrl(endpoint: string): string {
  const url = new URL(endpoint);
  const path = url.pathname.replace(/\/+$/, "");
  url.pathname = path.endsWith(TRACES_PATH) ? path : `${path}${TRACES_PATH}`;
  return url.href;
}

/**
 * Where metrics are posted: `<endpoint>/v1/metrics`. An endpoint given as the traces URL
 * (ending in /v1/traces) has that signal path swapped for the metrics one.
 */
export function metricsUrl(endpoint: string): string {
  const url = new URL(endpoint);
  let path = url.pathname.replace(/\/+$/, "");
  if (path.endsWith(TRACES_PATH)) path = path.slice(0, -TRACES_PATH.length);
  url.pathname = path.endsWith(METRICS_PATH) ? path : `${path}${METRICS_PATH}`;
  return url.href;
}

/** What is wrong with an `--otlp-endpoint` value, or undefined when it is usable. */
export function otlpEndpointProblem(raw: string): string | undefined {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    return "must be an http:// or https:// URL, e.g. http://collector:4318";
  }
  if (url.protocol !== "http:" && url.protocol !== "https:")
    return `must be an http:// or https:// URL (OTLP over HTTP), got ${url.protocol}//`;
  if (url.search !== "" || url.hash !== "") return "must not carry a query or a fragment";
  return undefined;
}
