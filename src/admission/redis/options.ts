/**
 * The shared-state settings: `--state-url`, `--state-key-prefix`, `--replica-id`,
 * `--state-fail-mode`, `--lease-ttl-secs` (YAML `state_url`, `state_key_prefix`, `replica_id`,
 * `state_fail_mode`, `lease_ttl_secs`). Without a URL, admission and budgets stay in process.
 */
export const STATE_FAIL_MODES = ["local", "closed"] as const;
type StateFailMode = (typeof STATE_FAIL_MODES)[number];

export const DEFAULT_STATE_KEY_PREFIX = "sluice:";
export const DEFAULT_LEASE_TTL_SECS = 10;

export interface StateOptions {
  /** redis://[user:password@]host:port/db or rediss://... (TLS). */
  url: string;
  keyPrefix: string;
  /** This replica's name in the fleet (contracts/replica-id.ts; default hostname-pid). */
  replicaId: string;
  failMode: StateFailMode;
  leaseTtlSecs: number;
}

/** Why a state URL is unusable, or undefined when it is fine. */
export function stateUrlProblem(raw: string): string | undefined {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    return `"${raw}" is not a URL (expected redis://HOST:PORT/DB or rediss://...)`;
  }
  if (url.protocol !== "redis:" && url.protocol !== "rediss:") {
    return `"${raw}" must be a redis:// or rediss:// URL`;
  }
  const db = url.pathname.replace(/^\//, "");
  if (db !== "" && !/^\d+$/.test(db)) return `"${raw}": the database must be a number (redis://HOST:PORT/DB)`;
  return undefined;
}
