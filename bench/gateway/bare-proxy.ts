/**
 * The floor for a Node proxy: the parts sluice is built from (node:http server, undici Pool with sluice's
 * pool options) and nothing else: read the body, pool.request, write status and headers, pipe the body.
 * No admission, no metrics, no cost estimate. Run as its own process:
 * `node --import tsx bench/gateway/bare-proxy.ts <upstream-url> <port>`.
 */
import { createServer } from "node:http";
import { Pool } from "undici";

const [upstream, portArg] = process.argv.slice(2);
if (upstream === undefined || portArg === undefined)
  throw new Error("usage: bare-proxy.ts <upstream-url> <port>");
const pool = new Pool(upstream, { connections: 256, pipelining: 1, keepAliveTimeout: 30_000 });
// Hop-by-hop headers, as sluice drops them; the request's length is undici's to set.
const HOP = ["connection", "keep-alive", "transfer-encoding", "upgrade"];
const DROP_REQUEST = new Set([...HOP, "host", "expect", "content-length"]);
const DROP_RESPONSE = new Set(HOP);

function without(headers: Record<string, string | string[] | undefined>, drop: Set<string>) {
  const out: Record<string, string | string[]> = {};
  for (const name in headers) if (!drop.has(name) && headers[name] !== undefined) out[name] = headers[name]!;
  return out;
}

const server = createServer({ keepAliveTimeout: 65_000, requestTimeout: 0 }, (req, res) => {
  const chunks: Buffer[] = [];
  req.on("data", (chunk: Buffer) => chunks.push(chunk));
  req.on("end", () => {
    const body = chunks.length === 0 ? null : chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks);
    pool
      .request({
        method: req.method as "POST",
        path: req.url ?? "/",
        headers: without(req.headers, DROP_REQUEST),
        body,
      })
      .then(
        (up) => {
          res.writeHead(up.statusCode, without(up.headers, DROP_RESPONSE));
          // .pipe, not stream.pipeline: on Node 20 pipeline builds an AbortError (with a stack) per call.
          up.body.on("error", () => res.destroy()).pipe(res);
        },
        () => res.writeHead(502).end(),
      );
  });
});
server.listen(Number(portArg), "127.0.0.1");
process.once("SIGTERM", () => server.close(() => process.exit(0)).closeAllConnections());
process.once("SIGINT", () => server.close(() => process.exit(0)).closeAllConnections());
