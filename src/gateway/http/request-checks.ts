/**
 * Checks on the request line and framing, before anything else looks at a request. What fails here
 * is the client's fault, is answered 400 by the gateway, and never reaches a worker.
 */
import type { IncomingMessage } from "node:http";
import { GatewayError } from "../../contracts/gateway-error.js";

/**
 * More header lines than any real client sends; refused here (431) so that the answer does not
 * depend on the worker's or Node's own limits, which differ between Node lines.
 */
const MAX_HEADER_COUNT = 256;

/** Throws a 400 GatewayError for a request the gateway will not forward. */
export function checkRequest(req: IncomingMessage): void {
  if (req.rawHeaders.length > MAX_HEADER_COUNT * 2) {
    throw new GatewayError(
      "request_headers_too_large",
      `the request has ${req.rawHeaders.length / 2} header lines; at most ${MAX_HEADER_COUNT} are accepted`,
    );
  }
  const url = req.url ?? "";
  // Only origin-form targets: asterisk-form (`OPTIONS *`) and absolute-form (`http://x/y`,
  // `ftp://...`) are for proxies and servers, not for a worker's API.
  if (url.charCodeAt(0) !== 0x2f /* "/" */ || url.startsWith("//")) {
    throw new GatewayError(
      "invalid_request_target",
      `the request target must be a path starting with "/", got ${JSON.stringify(url.slice(0, 64))}`,
    );
  }
  if (req.headers.host === undefined && req.httpVersionMajor === 1 && req.httpVersionMinor >= 1) {
    throw new GatewayError("missing_host_header", "an HTTP/1.1 request must carry a Host header");
  }
  const te = req.headers["transfer-encoding"];
  if (te !== undefined && te.trim().toLowerCase() !== "chunked") {
    throw new GatewayError(
      "unsupported_transfer_encoding",
      `Transfer-Encoding ${JSON.stringify(te.slice(0, 64))} is not supported; send a Content-Length or plain "chunked"`,
    );
  }
  // sluice never upgrades a connection; it ignores `Upgrade` (a hop-by-hop header) on requests
  // it can frame. Node's parser cannot report a broken chunked body after an upgrade offer (it
  // stops delivering it), so that combination is refused outright.
  if (te !== undefined && req.headers.upgrade !== undefined) {
    throw new GatewayError(
      "upgrade_not_supported",
      "a request offering a protocol upgrade cannot carry a chunked body; sluice does not upgrade connections",
    );
  }
}

/** The path without its query string. */
export function pathOf(url: string): string {
  const q = url.indexOf("?");
  return q === -1 ? url : url.slice(0, q);
}
