/** Reads a request body once, with a size limit (413 past it). */
import type { IncomingMessage } from "node:http";
import { GatewayError } from "./http-errors.js";

const EMPTY = Buffer.alloc(0);

export function readBody(req: IncomingMessage, limit: number): Promise<Buffer> {
  const declared = req.headers["content-length"];
  if (declared === undefined && req.headers["transfer-encoding"] === undefined) {
    req.resume();
    return Promise.resolve(EMPTY);
  }
  if (declared !== undefined && Number(declared) > limit) {
    req.resume();
    return Promise.reject(tooLarge(limit));
  }
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    const onData = (chunk: Buffer) => {
      size += chunk.length;
      if (size > limit) {
        cleanup();
        req.resume();
        reject(tooLarge(limit));
        return;
      }
      chunks.push(chunk);
    };
    const onEnd = () => {
      cleanup();
      resolve(chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, size));
    };
    const onError = (err: Error) => {
      cleanup();
      reject(err);
    };
    const onClose = () => {
      if (!req.complete) {
        cleanup();
        reject(
          new GatewayError(499, "client_closed_request", "the client closed the connection while sending"),
        );
      }
    };
    const cleanup = () => {
      req.off("data", onData);
      req.off("end", onEnd);
      req.off("error", onError);
      req.off("close", onClose);
    };
    req.on("data", onData);
    req.on("end", onEnd);
    req.on("error", onError);
    req.on("close", onClose);
  });
}

function tooLarge(limit: number): GatewayError {
  return new GatewayError(413, "payload_too_large", `the request body exceeds the limit of ${limit} bytes`);
}
