/** Per-tenant in-flight and queued counts, for the admin status page. */

export interface TenantCounts {
  inflight: number;
  queued: number;
}

export class TenantActivity {
  private readonly counts = new Map<string, TenantCounts>();

  private get(tenant: string): TenantCounts {
    let c = this.counts.get(tenant);
    if (c === undefined) {
      c = { inflight: 0, queued: 0 };
      this.counts.set(tenant, c);
    }
    return c;
  }

  queued(tenant: string, delta: number): void {
    this.update(tenant, this.get(tenant), "queued", delta);
  }

  inflight(tenant: string, delta: number): void {
    this.update(tenant, this.get(tenant), "inflight", delta);
  }

  snapshot(): Map<string, TenantCounts> {
    return new Map([...this.counts].map(([t, c]) => [t, { ...c }]));
  }

  private update(tenant: string, c: TenantCounts, key: keyof TenantCounts, delta: number): void {
    c[key] += delta;
    // Idle tenants leave the table, so it holds only tenants with work.
    if (c.inflight === 0 && c.queued === 0) this.counts.delete(tenant);
  }
}
