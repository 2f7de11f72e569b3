/**
 * The budget store in Redis mode: the same BudgetBook interface the gateway's policy stage and
 * lease use (src/core/budgets.ts is the in-process store), with the accounts in Redis.
 *
 * - `check` runs the checks that need no account (suspended, windows, models) at once and returns
 *   a hold whose reservation is still to be made: the admission backend reserves it inside its
 *   admit script (reserve-then-reconcile, one round trip for both), keyed by the gateway's id for
 *   the request (`sluice_request_id`, unique per request; never the client's X-Request-Id, which a
 *   client may send on every request: docs/replicas.md).
 * - `settle` / `refund` ride on the slot's release script when the hold belongs to a slot still
 *   being released, else run one budget script; both are idempotent by that id.
 * - While Redis is away (fail mode local) the book answers from a local BudgetBook whose limits are
 *   this replica's share (tokens_per_minute / N, what was left of each term budget / N); the usage
 *   served meanwhile is added to Redis when it returns.
 */

import {
  BudgetBook,
  type BudgetHold,
  type BudgetRejection,
  type BudgetRemaining,
  periodStart,
  secsToPeriodEnd,
  type Usage,
} from "@sluice/scheduler/core/budgets.js";
import type { Clock } from "@sluice/scheduler/core/clock.js";
import type { Pricing, TenantPolicy } from "@sluice/scheduler/core/config.js";
import { BudgetRefusedError } from "@sluice/scheduler/core/errors.js";
import type { Redis } from "ioredis";
import { newRequestId } from "../../contracts/request-id.js";
import type { StateKeys } from "./keys.js";
import { runScript } from "./scripts.js";

/** A hold whose tokens live in Redis. */
export class SharedHold implements BudgetHold {
  readonly ok = true;
  settled = false;
  /** The reservation is in Redis (made by the admit script or `reserve`). */
  reserved = false;
  /** Set by settle/refund while the slot's release is pending: the release script applies it. */
  closing: { op: "s" | "k" | "r"; dTokens: number; dUsd: number } | undefined;
  /** A release that will carry this hold's settlement is pending. */
  ridesOnRelease = false;
  /** The local share's hold that stands for this one (Redis was away at admission). */
  delegate: BudgetHold | undefined;

  constructor(
    readonly tenant: string,
    readonly model: string | undefined,
    readonly estimate: Usage,
    readonly periodStart: number,
    /**
     * The gateway's id for the request (`sluice_request_id`, unique per request), never the client's
     * X-Request-Id: the hold's key in Redis, so every request holds its own reservation.
     */
    public requestId: string,
    readonly tokens: number,
    readonly usd: number,
    readonly policy: TenantPolicy,
  ) {}

  get tpm(): number {
    return this.policy.tokens_per_minute ?? -1;
  }

  /** Keys and arguments of a reservation inside a script (admit: ARGV +10..+16). */
  reservationArgs(): Array<string | number> {
    return [
      this.tokens,
      this.usd,
      this.tpm,
      this.policy.budget_tokens ?? -1,
      this.policy.budget_cost_usd ?? -1,
      this.periodStart,
      this.policy.requests_per_minute ?? -1,
    ];
  }
}

/** The refusal for a reservation the script refused (`tokens`, `usd`, `tpm` or `rpm`). */
export function budgetRefusal(hold: SharedHold, reason: string, detail: string): BudgetRefusedError {
  const { tenant, policy } = hold;
  const period = policy.budget_period ?? "month";
  if (reason === "tpm") {
    return new BudgetRefusedError(
      "token_budget_exceeded",
      `tenant ${tenant} is over its ${policy.tokens_per_minute} tokens per minute`,
      Number(detail),
    );
  }
  if (reason === "rpm") {
    return new BudgetRefusedError(
      "request_rate_exceeded",
      `tenant ${tenant} is over its ${policy.requests_per_minute} requests per minute`,
      Number(detail),
    );
  }
  const unit = reason === "usd" ? "USD" : "tokens";
  const limit = reason === "usd" ? policy.budget_cost_usd : policy.budget_tokens;
  return new BudgetRefusedError(
    "tenant_budget_exhausted",
    `tenant ${tenant} has used its ${limit} ${unit} budget for this ${period} (UTC): ${Number(detail)} left, the request needs ${reason === "usd" ? hold.usd : hold.tokens}`,
    // Nothing frees up before the period ends (Redis time and this replica's agree to the second).
    secsToPeriodEnd(period, Date.now()),
  );
}

interface SharedBudgetOptions {
  policies: ReadonlyMap<string, TenantPolicy>;
  pricing: Pricing;
  clock: Clock;
  client: Redis;
  keys: StateKeys;
  /** Redis can be used now. */
  up: () => boolean;
  /** A command failed: Redis may be away. */
  failed: (error: unknown) => void;
  /** Replicas alive when last seen (the local share's divisor). */
  replicas: () => number;
  onRoundTrip?: (op: string, seconds: number) => void;
}

function hasAccount(policy: TenantPolicy | undefined): policy is TenantPolicy {
  return (
    policy !== undefined &&
    (policy.tokens_per_minute !== undefined ||
      policy.requests_per_minute !== undefined ||
      policy.budget_tokens !== undefined ||
      policy.budget_cost_usd !== undefined)
  );
}

export class SharedBudgetBook extends BudgetBook {
  private readonly shared: SharedBudgetOptions;
  private sharedPolicies: ReadonlyMap<string, TenantPolicy>;
  private sharedPricing: Pricing;
  /** Last known remaining per tenant (refreshed by `refresh`). */
  private readonly cached = new Map<string, BudgetRemaining>();
  /** The local share while Redis is away. */
  private local: BudgetBook | undefined;
  /** Usage served on the local share, per tenant, to add to Redis on return. */
  private readonly localUsage = new Map<string, { tokens: number; usd: number }>();
  private readonly localHolds = new WeakSet<BudgetHold>();

  constructor(options: SharedBudgetOptions) {
    super({ policies: options.policies, pricing: options.pricing, clock: options.clock });
    this.shared = options;
    this.sharedPolicies = options.policies;
    this.sharedPricing = options.pricing;
  }

  override setPolicies(policies: ReadonlyMap<string, TenantPolicy>, pricing: Pricing): void {
    super.setPolicies(policies, pricing);
    // The base constructor calls this before the fields above exist.
    if (this.shared === undefined) return;
    this.sharedPolicies = policies;
    this.sharedPricing = pricing;
    if (this.local !== undefined) this.goLocal();
  }

  override check(tenant: string, model: string | undefined, estimate: Usage): BudgetHold | BudgetRejection {
    if (this.local !== undefined) {
      const verdict = this.local.check(tenant, model, estimate);
      if (verdict.ok) this.localHolds.add(verdict);
      return verdict;
    }
    const epoch = this.epoch();
    const refused = this.checkAccess(tenant, model, epoch);
    if (refused !== undefined) return refused;
    const policy = this.policyOf(tenant);
    if (!hasAccount(policy)) return { ok: true, tenant, model, estimate, settled: false, periodStart: 0 };
    const start = periodStart(policy.budget_period ?? "month", epoch);
    return new SharedHold(
      tenant,
      model,
      estimate,
      start,
      // Replaced by the request's own id at admission (the same: unique per request).
      newRequestId(),
      estimate.inputTokens + estimate.outputTokens,
      this.costUsd(model, estimate),
      policy,
    );
  }

  /** Reserves a hold with its own round trip (when no admit script carries it). Throws the refusal. */
  async reserve(hold: SharedHold): Promise<void> {
    const id = hold.requestId;
    const started = performance.now();
    const verdict = (await runScript(
      this.shared.client,
      "sluiceBudgetOp",
      [this.shared.keys.budget(hold.tenant), this.shared.keys.hold(hold.tenant, id)],
      ["reserve", ...hold.reservationArgs()],
    )) as string[];
    this.shared.onRoundTrip?.("budget", (performance.now() - started) / 1000);
    // "dup": this hold's own reservation is already in Redis (the id is the gateway's, unique).
    if (verdict[0] === "ok") this.noteReserved(hold);
    if (verdict[0] === "ok" || verdict[0] === "dup") hold.reserved = true;
    else throw budgetRefusal(hold, verdict[0]!, verdict[1] ?? "0");
  }

  /** Moves a not-yet-reserved shared hold onto the local share (Redis went away meanwhile). */
  reserveLocally(hold: SharedHold): BudgetHold {
    this.goLocal();
    const verdict = this.local!.check(hold.tenant, hold.model, hold.estimate);
    if (!verdict.ok) {
      throw new BudgetRefusedError(verdict.code, verdict.message, verdict.retryAfterSecs);
    }
    this.localHolds.add(verdict);
    return verdict;
  }

  /** A request queued on the local share moves to Redis: its local hold is given back. */
  dropDelegate(hold: SharedHold): void {
    const delegate = hold.delegate;
    if (delegate === undefined) return;
    hold.delegate = undefined;
    if (!delegate.settled) this.local?.refund(delegate);
  }

  override settle(hold: BudgetHold, actual: Usage | undefined): void {
    if (hold instanceof SharedHold) {
      if (hold.settled) return;
      hold.settled = true;
      if (hold.delegate !== undefined) {
        this.settleLocal(hold.delegate, actual);
        return;
      }
      const dIn = actual === undefined ? 0 : actual.inputTokens - hold.estimate.inputTokens;
      const dOut = actual === undefined ? 0 : actual.outputTokens - hold.estimate.outputTokens;
      const dUsd = this.costUsd(hold.model, { inputTokens: dIn, outputTokens: dOut });
      this.close(hold, actual === undefined ? "k" : "s", dIn + dOut, dUsd);
      return;
    }
    if (this.localHolds.has(hold)) this.settleLocal(hold, actual);
  }

  override refund(hold: BudgetHold): void {
    if (hold instanceof SharedHold) {
      if (hold.settled) return;
      hold.settled = true;
      if (hold.delegate !== undefined) {
        this.settleLocal(hold.delegate, undefined, true);
        return;
      }
      this.close(hold, "r", 0, 0);
      return;
    }
    if (this.localHolds.has(hold)) this.settleLocal(hold, undefined, true);
  }

  /**
   * A reservation of this replica's went through: what is left, as last read from Redis, goes down
   * by it at once, so the next answer's rate-limit headers count it before the next refresh reads
   * the fleet-wide figures (docs/rate-limit-headers.md).
   */
  noteReserved(hold: SharedHold): void {
    const left = this.cached.get(hold.tenant) ?? this.full(hold.policy);
    const next: BudgetRemaining = { ...left };
    if (next.tokens_per_minute !== undefined)
      next.tokens_per_minute = Math.max(0, next.tokens_per_minute - hold.tokens);
    if (next.requests_per_minute !== undefined)
      next.requests_per_minute = Math.max(0, next.requests_per_minute - 1);
    if (next.budget_tokens !== undefined) next.budget_tokens = Math.max(0, next.budget_tokens - hold.tokens);
    if (next.budget_cost_usd !== undefined)
      next.budget_cost_usd = Math.max(0, next.budget_cost_usd - hold.usd);
    this.cached.set(hold.tenant, next);
  }

  override remaining(tenant: string): BudgetRemaining {
    if (this.local !== undefined) return this.local.remaining(tenant);
    const policy = this.policyOf(tenant);
    if (!hasAccount(policy)) return {};
    return this.cached.get(tenant) ?? this.full(policy);
  }

  private full(policy: TenantPolicy): BudgetRemaining {
    const out: BudgetRemaining = {};
    if (policy.tokens_per_minute !== undefined) out.tokens_per_minute = policy.tokens_per_minute;
    if (policy.requests_per_minute !== undefined) out.requests_per_minute = policy.requests_per_minute;
    if (policy.budget_tokens !== undefined) out.budget_tokens = policy.budget_tokens;
    if (policy.budget_cost_usd !== undefined) out.budget_cost_usd = policy.budget_cost_usd;
    return out;
  }

  private close(hold: SharedHold, op: "s" | "k" | "r", dTokens: number, dUsd: number): void {
    if (!hold.reserved) return;
    hold.closing = { op, dTokens, dUsd };
    // The slot's release script carries it (one round trip for both).
    if (hold.ridesOnRelease) return;
    this.closeNow(hold);
  }

  /** Sends a hold's settlement on its own (the hold had no slot, or its slot was preempted). */
  closeNow(hold: SharedHold): void {
    const closing = hold.closing;
    if (closing === undefined || !this.shared.up()) return;
    hold.closing = undefined;
    const started = performance.now();
    runScript(
      this.shared.client,
      "sluiceBudgetOp",
      [this.shared.keys.budget(hold.tenant), this.shared.keys.hold(hold.tenant, hold.requestId)],
      ["close", closing.op, closing.dTokens, closing.dUsd, hold.tpm],
    ).then(
      () => this.shared.onRoundTrip?.("budget", (performance.now() - started) / 1000),
      (err: unknown) => this.shared.failed(err),
    );
  }

  private settleLocal(hold: BudgetHold, actual: Usage | undefined, refund = false): void {
    if (hold.settled) return;
    const book = this.local;
    const usage = refund ? undefined : (actual ?? hold.estimate);
    if (book !== undefined) {
      if (refund) book.refund(hold);
      else book.settle(hold, actual);
    }
    hold.settled = true;
    if (usage === undefined) return;
    const entry = this.localUsage.get(hold.tenant) ?? { tokens: 0, usd: 0 };
    entry.tokens += usage.inputTokens + usage.outputTokens;
    entry.usd += this.costUsd(hold.model, usage);
    this.localUsage.set(hold.tenant, entry);
  }

  /** Redis is away: answer from this replica's share of each limit. */
  goLocal(): void {
    const n = Math.max(1, this.shared.replicas());
    const policies = new Map<string, TenantPolicy>();
    for (const [tenant, policy] of this.sharedPolicies) {
      const left = this.cached.get(tenant);
      const share: TenantPolicy = { ...policy };
      if (policy.tokens_per_minute !== undefined) share.tokens_per_minute = policy.tokens_per_minute / n;
      if (policy.requests_per_minute !== undefined)
        share.requests_per_minute = policy.requests_per_minute / n;
      if (policy.budget_tokens !== undefined)
        share.budget_tokens = (left?.budget_tokens ?? policy.budget_tokens) / n;
      if (policy.budget_cost_usd !== undefined)
        share.budget_cost_usd = (left?.budget_cost_usd ?? policy.budget_cost_usd) / n;
      policies.set(tenant, share);
    }
    const wasLocal = this.local !== undefined;
    this.local = new BudgetBook({ policies, pricing: this.sharedPricing, clock: this.shared.clock });
    if (!wasLocal) this.localUsage.clear();
  }

  get isLocal(): boolean {
    return this.local !== undefined;
  }

  /** Redis is back: add what was served on the local share, then use Redis again. */
  async rejoin(): Promise<void> {
    const epoch = this.epoch();
    for (const [tenant, usage] of this.localUsage) {
      const policy = this.policyOf(tenant);
      if (!hasAccount(policy)) continue;
      await runScript(
        this.shared.client,
        "sluiceBudgetAdd",
        [this.shared.keys.budget(tenant)],
        [
          usage.tokens,
          usage.usd,
          policy.tokens_per_minute ?? -1,
          periodStart(policy.budget_period ?? "month", epoch),
        ],
      );
    }
    this.localUsage.clear();
    this.local = undefined;
    await this.refresh();
  }

  /** Reads what is left of every tenant's budgets (status and metrics). */
  async refresh(): Promise<void> {
    const tenants: string[] = [];
    const keys: string[] = [];
    const args: number[] = [];
    const epoch = this.epoch();
    for (const tenant of this.tenants()) {
      const policy = this.policyOf(tenant);
      if (!hasAccount(policy)) continue;
      tenants.push(tenant);
      keys.push(this.shared.keys.budget(tenant));
      args.push(
        policy.tokens_per_minute ?? -1,
        periodStart(policy.budget_period ?? "month", epoch),
        policy.requests_per_minute ?? -1,
      );
    }
    if (tenants.length === 0) return;
    const out = (await runScript(this.shared.client, "sluiceBudgetPeek", keys, args)) as string[];
    tenants.forEach((tenant, i) => {
      const policy = this.policyOf(tenant)!;
      const left: BudgetRemaining = {};
      const level = Number(out[4 * i]);
      const used = Number(out[4 * i + 1]);
      const usd = Number(out[4 * i + 2]);
      const requests = Number(out[4 * i + 3]);
      if (policy.tokens_per_minute !== undefined) left.tokens_per_minute = Math.max(0, level);
      if (policy.requests_per_minute !== undefined) left.requests_per_minute = Math.max(0, requests);
      if (policy.budget_tokens !== undefined) left.budget_tokens = Math.max(0, policy.budget_tokens - used);
      if (policy.budget_cost_usd !== undefined)
        left.budget_cost_usd = Math.max(0, policy.budget_cost_usd - usd);
      this.cached.set(tenant, left);
    });
  }
}
