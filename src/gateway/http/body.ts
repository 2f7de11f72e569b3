/**
 * Reads a request body once: at most `limit` bytes (413 past it), with no more than `idleMs`
 * of silence between chunks (408 `request_body_timeout` past it), all of it within `deadlineMs`
 * (408 `request_body_too_slow` past it: a body trickled a byte at a time is never idle, but it
 * ends). A request holds no slot and no queue place while its body arrives: admission starts only
 * once the body is complete.
 */
import type { IncomingMessage } from "node:http";
import { GatewayError } from "../../contracts/gateway-error.js";
import { FRAMING_ERROR } from "./client-guard.js";

const EMPTY = Buffer.alloc(0);

export function readBody(
  req: IncomingMessage,
  limit: number,
  idleMs: number,
  deadlineMs: number,
): Promise<Buffer> {
  const declared = req.headers["content-length"];
  if (declared === undefined && req.headers["transfer-encoding"] === undefined) {
    return Promise.resolve(EMPTY);
  }
  if (declared !== undefined && Number(declared) > limit) return Promise.reject(tooLarge(limit));
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    const socket = req.socket;
    const onData = (chunk: Buffer) => {
      size += chunk.length;
      if (size > limit) {
        cleanup();
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
          new GatewayError("scheduler_client_cancelled", "the client closed the connection while sending"),
        );
      }
    };
    const onFraming = (err: NodeJS.ErrnoException) => {
      cleanup();
      // Node's own whole-request bound (client-guard.ts) is the same kind of deadline.
      if (err.code === "ERR_HTTP_REQUEST_TIMEOUT") return onDeadline();
      reject(
        new GatewayError(
          "malformed_request",
          `the request body could not be parsed (${err.code ?? "framing error"})`,
        ),
      );
    };
    const onDeadline = () => {
      cleanup();
      reject(
        new GatewayError(
          "request_body_too_slow",
          `the request body did not arrive within ${deadlineMs / 1000} s`,
        ),
      );
    };
    const onIdle = () => {
      cleanup();
      reject(
        new GatewayError("request_body_timeout", `the request body stalled for more than ${idleMs / 1000} s`),
      );
    };
    const cleanup = () => {
      clearTimeout(deadline);
      req.off("data", onData);
      req.off("end", onEnd);
      req.off("error", onError);
      req.off("close", onClose);
      socket.setTimeout(0);
      req.off("timeout", onIdle);
      req.off(FRAMING_ERROR, onFraming);
    };
    // The socket's own idle timer (no timer of ours per request). Node hands a socket timeout to
    // the incomplete request's 'timeout' listeners, and destroys the socket only when there is none.
    socket.setTimeout(idleMs);
    // One timer per body being read (a request without a body never gets here).
    const deadline = setTimeout(onDeadline, deadlineMs);
    req.once("timeout", onIdle);
    req.once(FRAMING_ERROR, onFraming);
    req.on("data", onData);
    req.on("end", onEnd);
    req.on("error", onError);
    req.on("close", onClose);
  });
}

function tooLarge(limit: number): GatewayError {
  return new GatewayError("payload_too_large", `the request body exceeds the limit of ${limit} bytes`);
}
