/**
 * `X-Request-Id` on every answer: the client's own id when it sent a usable one, else a new one.
 * New ids are a random per-process prefix and a counter: unique across replicas and restarts in
 * practice, and far cheaper than a UUID per request.
 */
import { randomBytes } from "node:crypto";

const PREFIX = randomBytes(6).toString("hex");
let counter = 0;

/** A client id is used as is when it is 1..128 characters of `A-Z a-z 0-9 . _ : -`. */
const USABLE = /^[A-Za-z0-9._:-]{1,128}$/;

export function requestIdFor(header: string | string[] | undefined): string {
  if (typeof header === "string" && USABLE.test(header)) return header;
  counter = (counter + 1) % Number.MAX_SAFE_INTEGER;
  return `${PREFIX}-${counter.toString(36)}`;
}
