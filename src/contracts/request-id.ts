/**
 * Two ids per request (docs/ledger.md, "Request ids"):
 *
 * - the gateway's own, `sluice_request_id`: made here for every request, unique across replicas and
 *   restarts in practice (a random per-process prefix and a counter: far cheaper than a UUID per
 *   request). It keys what must be one per request: the budget hold in Redis and the ledger row.
 * - the correlation id, `X-Request-Id` on every answer: the client's own when it sent a usable one,
 *   else the gateway's. A client chooses it freely (the same one on every request, say), so nothing
 *   that must be unique is ever keyed by it; it is echoed and stored (`request_id`).
 */
import { randomBytes } from "node:crypto";

/** 48 random bits: two processes share a prefix with a chance of 2^-48 per pair. */
const PREFIX = randomBytes(6).toString("hex");
let counter = 0;

/** A client id is used as is when it is 1..128 characters of `A-Z a-z 0-9 . _ : -`. */
const USABLE = /^[A-Za-z0-9._:-]{1,128}$/;

/** A new gateway-made id: never the same twice in this process, nor (in practice) in any other. */
export function newRequestId(): string {
  counter = (counter + 1) % Number.MAX_SAFE_INTEGER;
  return `${PREFIX}-${counter.toString(36)}`;
}

/** The correlation id: the client's `X-Request-Id` when usable, else `fallback` (else a new id). */
export function requestIdFor(header: string | string[] | undefined, fallback?: string): string {
  if (typeof header === "string" && USABLE.test(header)) return header;
  return fallback ?? newRequestId();
}
