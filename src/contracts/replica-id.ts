/**
 * A gateway replica's name: in the shared state's keys and lease records, and in the ledger's
 * `replica` column, so a row can be traced to the replica the fleet status shows. `--replica-id`
 * sets it; by default it is `hostname-pid`, so two gateways on one host, or a restarted one, never
 * share one.
 */
import { hostname } from "node:os";

/** Letters, digits and `. _ : @ -`, 1..128: safe inside Redis keys and lease records. */
export const REPLICA_ID_PATTERN = /^[A-Za-z0-9._:@-]{1,128}$/;

/** `hostname-pid`, the host's characters outside the pattern replaced by `-`. */
export function defaultReplicaId(): string {
  const host = hostname().replace(/[^A-Za-z0-9._:@-]/g, "-") || "sluice";
  return `${host}-${process.pid}`.slice(0, 128);
}
