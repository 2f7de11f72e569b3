/**
 * Redis key names. Every key of a deployment shares one hash tag, so a Redis Cluster keeps them in
 * one slot and every script may touch any of them; a pool's keys carry its name, so several
 * admission backends (one per model pool) share one Redis:
 *
 *   <prefix>{<tag>}:pool:<pool>:<name>   a pool's admission state (pool-state.ts lists the names)
 *   <prefix>{<tag>}:budget:<tenant>      a tenant's bucket and term usage
 *   <prefix>{<tag>}:hold:<tenant>:<id>  one request's budget hold, by the gateway's request id
 *                                        (sluice_request_id, never the client's; expires after a day)
 *   <prefix>{<tag>}:ch:<replica token>   a replica's wake-up channel; `ch:*` is the fleet's
 *
 * The tag is the prefix without braces and trailing separators (`sluice:` -> `sluice:{sluice}:`);
 * a prefix that already holds a `{...}` tag is used as it is.
 */
const CLASS_KEYS = ["pre", "q", "qa"] as const;

export interface PoolKeys {
  /** Every key of the pool's admission state (listing and tests; the scripts derive them from st). */
  readonly all: readonly string[];
  /** The pool's settings and counters; KEYS[1] of every pool script. */
  readonly st: string;
  /** Leases held: id -> expiry ms. */
  readonly leases: string;
}

export class StateKeys {
  readonly base: string;

  constructor(prefix: string) {
    if (/\{[^{}]+\}/.test(prefix)) this.base = prefix;
    else {
      const tag = prefix.replace(/[{}]/g, "").replace(/[:._-]+$/, "") || "sluice";
      this.base = `${prefix}{${tag}}:`;
    }
  }

  pool(name: string): PoolKeys {
    const p = `${this.base}pool:${name}:`;
    const all = [
      `${p}st`,
      `${p}capd`,
      `${p}leases`,
      `${p}lmeta`,
      `${p}claims`,
      `${p}rl`,
      `${p}replicas`,
      `${p}rinfo`,
    ];
    for (const name of CLASS_KEYS) for (let r = 0; r < 4; r++) all.push(`${p}${name}${r}`);
    all.push(`${p}tmeta`);
    for (let r = 0; r < 4; r++) all.push(`${p}vt${r}`);
    all.push(`${p}capr`);
    return { all, st: all[0]!, leases: all[2]! };
  }

  budget(tenant: string): string {
    return `${this.base}budget:${tenant}`;
  }

  hold(tenant: string, requestId: string): string {
    return `${this.base}hold:${tenant}:${requestId}`;
  }

  /** Stands in for the budget keys of a script call that has no budget hold (same slot, never written). */
  get noBudget(): string {
    return `${this.base}budget:-`;
  }

  get channelPrefix(): string {
    return `${this.base}ch:`;
  }

  channel(replicaToken: string): string {
    return `${this.base}ch:${replicaToken}`;
  }

  get fleetChannel(): string {
    return `${this.base}ch:*`;
  }
}
