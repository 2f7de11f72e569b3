/**
 * Tenant budgets, checked before a request is queued (obleth's rule: queue for transient
 * contention, reject only when an explicit limit is crossed). A rejection carries a reason code;
 * the gateway's error table gives its HTTP status (403 for the first three, 429 for the last):
 *
 *   tenant_inactive          suspended (`active: false`) or outside every access window
 *   model_not_allowed        the model is not on the tenant's allowlist
 *   tenant_budget_exhausted  the term budget (tokens or USD) of the current UTC day/month is used up
 *                            (retryAfterSecs: until the period ends)
 *   token_budget_exceeded    the per-minute token bucket cannot cover the estimate (retryAfterSecs)
 *   request_rate_exceeded    the per-minute request bucket has no whole request left (retryAfterSecs)
 *
 * An admitted request holds its estimate against the bucket and the term budgets; `settle` corrects
 * them by actual - estimate once the worker reports usage (or keeps the estimate when none comes),
 * and `refund` gives the hold back when the request was never served. Pure and synchronous: time
 * comes from the injected clock.
 */
import { type AccessWindow, inWindow, parseAccessWindow } from "./access-window.js";
import { type Clock, realClock } from "./clock.js";
import type { BudgetPeriod, Pricing, TenantPolicy } from "./config.js";

export type BudgetRejectionReason =
  | "tenant_inactive"
  | "model_not_allowed"
  | "tenant_budget_exhausted"
  | "token_budget_exceeded"
  | "request_rate_exceeded";

export interface BudgetRejection {
  ok: false;
  code: BudgetRejectionReason;
  message: string;
  /**
   * Seconds until the refusal can end: a bucket's refill to what the request needs, or the end of
   * the budget period (UTC day or month).
   */
  retryAfterSecs?: number;
}

export interface Usage {
  inputTokens: number;
  outputTokens: number;
}

/** What an admitted request holds until it settles. */
export interface BudgetHold {
  ok: true;
  readonly tenant: string;
  readonly model: string | undefined;
  readonly estimate: Usage;
  settled: boolean;
  /** Term period the hold was taken in (a hold from a past period does not touch the new one). */
  readonly periodStart: number;
}

export interface BudgetRemaining {
  tokens_per_minute?: number;
  requests_per_minute?: number;
  budget_tokens?: number;
  budget_cost_usd?: number;
}

interface TenantAccount {
  bucket: number;
  /** The request bucket's level (requests_per_minute), refilled with the token bucket. */
  requests: number;
  refilledAt: number;
  periodStart: number;
  usedTokens: number;
  usedUsd: number;
}

interface CompiledPolicy {
  policy: TenantPolicy;
  windows: AccessWindow[] | undefined;
  models: Set<string> | undefined;
}

export function periodStart(period: BudgetPeriod, epochMs: number): number {
  const d = new Date(epochMs);
  return period === "day"
    ? Date.UTC(d.getUTCFullYear(), d.getUTCMonth(), d.getUTCDate())
    : Date.UTC(d.getUTCFullYear(), d.getUTCMonth(), 1);
}

/** When the period that contains `epochMs` ends (the next UTC midnight, or the next month's first). */
export function periodEnd(period: BudgetPeriod, epochMs: number): number {
  const d = new Date(epochMs);
  return period === "day"
    ? Date.UTC(d.getUTCFullYear(), d.getUTCMonth(), d.getUTCDate() + 1)
    : Date.UTC(d.getUTCFullYear(), d.getUTCMonth() + 1, 1);
}

/** Whole seconds (at least 1) until the budget period that contains `epochMs` ends. */
export function secsToPeriodEnd(period: BudgetPeriod, epochMs: number): number {
  return Math.max(1, Math.ceil((periodEnd(period, epochMs) - epochMs) / 1000));
}

/** Whole seconds (at least 1) until a bucket refilling `perMinute` a minute holds `need` again. */
export function secsToRefill(level: number, need: number, perMinute: number): number {
  return Math.max(1, Math.ceil(((need - level) * 60) / perMinute));
}

export class BudgetBook {
  private policies = new Map<string, CompiledPolicy>();
  private pricing: Pricing;
  private readonly accounts = new Map<string, TenantAccount>();
  private readonly clock: Clock;

  constructor(options: { policies?: ReadonlyMap<string, TenantPolicy>; pricing?: Pricing; clock?: Clock }) {
    this.clock = options.clock ?? realClock;
    this.pricing = options.pricing ?? {};
    this.setPolicies(options.policies ?? new Map(), this.pricing);
  }

  /** Replaces policies and prices (reload); usage so far in the current period is kept. */
  setPolicies(policies: ReadonlyMap<string, TenantPolicy>, pricing: Pricing): void {
    const compiled = new Map<string, CompiledPolicy>();
    for (const [tenant, policy] of policies) {
      compiled.set(tenant, {
        policy,
        windows: policy.access_windows?.map(parseAccessWindow),
        models: policy.models ? new Set(policy.models) : undefined,
      });
    }
    this.policies = compiled;
    this.pricing = pricing;
  }

  /** True when the tenant has any rule this book enforces (so the gateway can skip the rest). */
  governs(tenant: string): boolean {
    const c = this.policies.get(tenant);
    if (c === undefined) return false;
    const p = c.policy;
    return (
      p.active === false ||
      c.windows !== undefined ||
      c.models !== undefined ||
      p.tokens_per_minute !== undefined ||
      p.requests_per_minute !== undefined ||
      p.budget_tokens !== undefined ||
      p.budget_cost_usd !== undefined
    );
  }

  costUsd(model: string | undefined, usage: Usage): number {
    const price = model === undefined ? undefined : this.pricing[model];
    if (price === undefined) return 0;
    return (usage.inputTokens * price.input_per_mtok + usage.outputTokens * price.output_per_mtok) / 1e6;
  }

  /** The tenant's policy, if it has one (a shared budget store keeps its accounts elsewhere). */
  policyOf(tenant: string): TenantPolicy | undefined {
    return this.policies.get(tenant)?.policy;
  }

  /** The checks that need no account: suspended, outside its windows, model not allowed. */
  checkAccess(tenant: string, model: string | undefined, epoch = this.epoch()): BudgetRejection | undefined {
    const compiled = this.policies.get(tenant);
    if (compiled === undefined) return undefined;
    if (compiled.policy.active === false) {
      return { ok: false, code: "tenant_inactive", message: `tenant ${tenant} is suspended` };
    }
    if (compiled.windows !== undefined && !compiled.windows.some((w) => inWindow(w, epoch))) {
      return {
        ok: false,
        code: "tenant_inactive",
        message: `tenant ${tenant} is outside its access windows (${compiled.windows.map((w) => w.text).join("; ")})`,
      };
    }
    if (compiled.models !== undefined && (model === undefined || !compiled.models.has(model))) {
      return {
        ok: false,
        code: "model_not_allowed",
        message: `tenant ${tenant} may not use model ${model === undefined ? "(none given)" : JSON.stringify(model)}`,
      };
    }
    return undefined;
  }

  /** Runs the checks in order; on success the estimate is held against the tenant's budgets. */
  check(tenant: string, model: string | undefined, estimate: Usage): BudgetHold | BudgetRejection {
    const compiled = this.policies.get(tenant);
    const epoch = this.epoch();
    if (compiled === undefined) return { ok: true, tenant, model, estimate, settled: false, periodStart: 0 };
    const { policy } = compiled;
    const refused = this.checkAccess(tenant, model, epoch);
    if (refused !== undefined) return refused;
    const account = this.account(tenant, policy, epoch);
    const tokens = estimate.inputTokens + estimate.outputTokens;
    if (policy.budget_tokens !== undefined && account.usedTokens >= policy.budget_tokens) {
      return this.exhausted(tenant, policy, "tokens", policy.budget_tokens, epoch);
    }
    if (policy.budget_cost_usd !== undefined && account.usedUsd >= policy.budget_cost_usd) {
      return this.exhausted(tenant, policy, "USD", policy.budget_cost_usd, epoch);
    }
    const tpm = policy.tokens_per_minute;
    // A request larger than the whole bucket waits for a full bucket rather than never passing.
    const need = tpm === undefined ? 0 : Math.min(tokens, tpm);
    if (tpm !== undefined && account.bucket < need) {
      return {
        ok: false,
        code: "token_budget_exceeded",
        message: `tenant ${tenant} is over its ${tpm} tokens per minute`,
        retryAfterSecs: secsToRefill(account.bucket, need, tpm),
      };
    }
    const rpm = policy.requests_per_minute;
    // A limit under one request a minute still lets one through once the bucket is full.
    const needRequest = rpm === undefined ? 0 : Math.min(1, rpm);
    if (rpm !== undefined && account.requests < needRequest) {
      return {
        ok: false,
        code: "request_rate_exceeded",
        message: `tenant ${tenant} is over its ${rpm} requests per minute`,
        retryAfterSecs: secsToRefill(account.requests, needRequest, rpm),
      };
    }
    // Both buckets are taken only once both have room, so a refusal takes nothing.
    if (tpm !== undefined) account.bucket -= tokens;
    if (rpm !== undefined) account.requests -= 1;
    account.usedTokens += tokens;
    account.usedUsd += this.costUsd(model, estimate);
    return { ok: true, tenant, model, estimate, settled: false, periodStart: account.periodStart };
  }

  /** Corrects the hold by actual - estimate; without usage the estimate stands. Idempotent. */
  settle(hold: BudgetHold, actual: Usage | undefined): void {
    if (hold.settled) return;
    hold.settled = true;
    if (actual === undefined) return;
    this.adjust(
      hold,
      actual.inputTokens - hold.estimate.inputTokens,
      actual.outputTokens - hold.estimate.outputTokens,
    );
  }

  /** Gives the whole hold back: the request was never served (rejected, preempted, failed). */
  refund(hold: BudgetHold): void {
    if (hold.settled) return;
    hold.settled = true;
    this.adjust(hold, -hold.estimate.inputTokens, -hold.estimate.outputTokens);
  }

  /** What is left of each budget the tenant has, in the current period. */
  remaining(tenant: string): BudgetRemaining {
    const compiled = this.policies.get(tenant);
    if (compiled === undefined) return {};
    const { policy } = compiled;
    const account = this.account(tenant, policy, this.epoch());
    const out: BudgetRemaining = {};
    if (policy.tokens_per_minute !== undefined) out.tokens_per_minute = Math.max(0, account.bucket);
    if (policy.requests_per_minute !== undefined) out.requests_per_minute = Math.max(0, account.requests);
    if (policy.budget_tokens !== undefined)
      out.budget_tokens = Math.max(0, policy.budget_tokens - account.usedTokens);
    if (policy.budget_cost_usd !== undefined)
      out.budget_cost_usd = Math.max(0, policy.budget_cost_usd - account.usedUsd);
    return out;
  }

  /** Tenants that have a policy (for status and metrics). */
  tenants(): string[] {
    return [...this.policies.keys()];
  }

  private adjust(hold: BudgetHold, dIn: number, dOut: number): void {
    const compiled = this.policies.get(hold.tenant);
    if (compiled === undefined) return;
    const account = this.account(hold.tenant, compiled.policy, this.epoch());
    const dTokens = dIn + dOut;
    if (compiled.policy.tokens_per_minute !== undefined) {
      account.bucket = Math.min(compiled.policy.tokens_per_minute, account.bucket - dTokens);
    }
    // Usage counts in the period it was taken in; a new period starts clean.
    if (account.periodStart === hold.periodStart) {
      account.usedTokens = Math.max(0, account.usedTokens + dTokens);
      account.usedUsd = Math.max(
        0,
        account.usedUsd + this.costUsd(hold.model, { inputTokens: dIn, outputTokens: dOut }),
      );
    }
  }

  protected exhausted(
    tenant: string,
    policy: TenantPolicy,
    unit: string,
    limit: number,
    epoch: number,
  ): BudgetRejection {
    const period = policy.budget_period ?? "month";
    return {
      ok: false,
      code: "tenant_budget_exhausted",
      message: `tenant ${tenant} has used its ${limit} ${unit} budget for this ${period} (UTC)`,
      // Nothing frees up before the period ends: usage is only ever settled, never refilled.
      retryAfterSecs: secsToPeriodEnd(period, epoch),
    };
  }

  protected epoch(): number {
    return this.clock.epochMs();
  }

  private account(tenant: string, policy: TenantPolicy, epoch: number): TenantAccount {
    const start = periodStart(policy.budget_period ?? "month", epoch);
    const now = this.clock.now();
    let account = this.accounts.get(tenant);
    if (account === undefined) {
      account = {
        bucket: policy.tokens_per_minute ?? Number.POSITIVE_INFINITY,
        requests: policy.requests_per_minute ?? Number.POSITIVE_INFINITY,
        refilledAt: now,
        periodStart: start,
        usedTokens: 0,
        usedUsd: 0,
      };
      this.accounts.set(tenant, account);
      return account;
    }
    if (account.periodStart !== start) {
      account.periodStart = start;
      account.usedTokens = 0;
      account.usedUsd = 0;
    }
    const elapsed = Math.max(0, now - account.refilledAt);
    account.bucket = refilled(account.bucket, policy.tokens_per_minute, elapsed);
    account.requests = refilled(account.requests, policy.requests_per_minute, elapsed);
    account.refilledAt = now;
    return account;
  }
}

/**
 * A per-minute bucket's level after `elapsed` ms. Without a limit the level is unbounded, so a limit
 * added by a reload starts full; capped on every read, so a reload that lowers it takes effect at once.
 */
function refilled(level: number, perMinute: number | undefined, elapsed: number): number {
  if (perMinute === undefined) return Number.POSITIVE_INFINITY;
  return Math.min(perMinute, level + (elapsed * perMinute) / 60_000);
}
