/**
 * The dashboard page and its assets, served from the admin listener without a token (they hold no
 * data; every data call of the page sends the token). A fixed table of paths, so nothing outside it
 * is ever read (no path from the request reaches the file system). The page's files live in `web/`
 * at the package root, two levels above this module both under src/ (tsx) and dist/ (built); the
 * chart library comes from its npm package. Every answer forbids inline script and anything not
 * from this origin (Content-Security-Policy).
 */
import { readFile } from "node:fs/promises";
import type { IncomingMessage, ServerResponse } from "node:http";
import { createRequire } from "node:module";
import { fileURLToPath } from "node:url";
import { GatewayError } from "../contracts/gateway-error.js";
import { sendError } from "../gateway/http/http-errors.js";

const DASHBOARD_PATH = "/dashboard";

const WEB_DIR = new URL("../../web/", import.meta.url);
const require = createRequire(import.meta.url);

const TYPES = {
  html: "text/html; charset=utf-8",
  js: "text/javascript; charset=utf-8",
  css: "text/css; charset=utf-8",
  svg: "image/svg+xml",
} as const;

interface Asset {
  /** Resolved on first use, so a missing file fails that request, not the gateway's start. */
  file: () => string;
  type: string;
}

const web = (name: string) => () => fileURLToPath(new URL(name, WEB_DIR));

const ASSETS: ReadonlyMap<string, Asset> = new Map([
  [DASHBOARD_PATH, { file: web("dashboard.html"), type: TYPES.html }],
  [`${DASHBOARD_PATH}/dashboard.js`, { file: web("dashboard.js"), type: TYPES.js }],
  [`${DASHBOARD_PATH}/dashboard.css`, { file: web("dashboard.css"), type: TYPES.css }],
  [`${DASHBOARD_PATH}/favicon.svg`, { file: web("favicon.svg"), type: TYPES.svg }],
  [
    `${DASHBOARD_PATH}/uplot.js`,
    { file: () => require.resolve("uplot/dist/uPlot.iife.min.js"), type: TYPES.js },
  ],
  [
    `${DASHBOARD_PATH}/uplot.css`,
    { file: () => require.resolve("uplot/dist/uPlot.min.css"), type: TYPES.css },
  ],
]);

/** Only this origin's scripts, styles and connections; no inline script or style, no framing. */
const DASHBOARD_CSP =
  "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; " +
  "base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

const COMMON_HEADERS: Readonly<Record<string, string>> = {
  "content-security-policy": DASHBOARD_CSP,
  "x-content-type-options": "nosniff",
  "referrer-policy": "no-referrer",
  "x-frame-options": "DENY",
  // Small files, and a new gateway version must serve its own: revalidate every time.
  "cache-control": "no-cache",
};

const cache = new Map<string, Buffer>();

async function load(path: string, asset: Asset): Promise<Buffer> {
  let body = cache.get(path);
  if (body === undefined) {
    body = await readFile(asset.file());
    cache.set(path, body);
  }
  return body;
}

/** True for the page's own paths: `/dashboard` and anything under `/dashboard/`. */
export function isDashboardPath(path: string): boolean {
  return path === DASHBOARD_PATH || path.startsWith(`${DASHBOARD_PATH}/`);
}

/**
 * Answers a request for a dashboard path: the asset (GET, HEAD), a redirect from `/dashboard/` to
 * the page (its relative links assume `/dashboard`), 404 for any other path, 405 for other methods.
 */
export async function serveDashboardAsset(
  req: IncomingMessage,
  res: ServerResponse,
  path: string,
): Promise<void> {
  req.resume();
  if (req.method !== "GET" && req.method !== "HEAD") {
    throw new GatewayError("method_not_allowed", `${req.method} is not allowed on ${path}; use GET`, {
      headers: { allow: "GET, HEAD" },
    });
  }
  if (path === `${DASHBOARD_PATH}/`) {
    res.writeHead(308, { location: "../dashboard", "content-length": 0 });
    res.end();
    return;
  }
  const asset = ASSETS.get(path);
  if (asset === undefined) throw new GatewayError("not_found", `no dashboard asset ${path}`);
  let body: Buffer;
  try {
    body = await load(path, asset);
  } catch (err) {
    // The package is incomplete: say which file, rather than a bare 500.
    const reason = (err as NodeJS.ErrnoException).code ?? (err as Error).message;
    sendError(
      res,
      new GatewayError("internal_error", `the dashboard asset ${path} cannot be read: ${reason}`),
    );
    return;
  }
  res.writeHead(200, { ...COMMON_HEADERS, "content-type": asset.type, "content-length": body.length });
  if (req.method === "HEAD") res.end();
  else res.end(body);
}
