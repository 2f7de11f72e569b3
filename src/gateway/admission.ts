/**
 * The gateway's admission: the priority scheduler when enabled and valid, otherwise the legacy
 * limiter. The mode is decided once, after the first worker discovery, so reservations are
 * checked against real capacity; a scheduler that cannot be built fails safe to legacy with an
 * ERROR log that says why.
 */
import { readFile } from "node:fs/promises";
import type { Logger } from "pino";
import type { PriorityClass } from "../core/class.js";
import type { Clock } from "../core/clock.js";
import { parseSchedulerYaml, type SchedulerFileSettings } from "../core/config.js";
import { createScheduler, type Scheduler } from "../core/engine.js";
import type { SchedulerObserver } from "../core/events.js";
import { createLegacyLimiter, type LegacyLimiter } from "../core/legacy.js";

/** What a request holds while it runs; a scheduler Permit and a legacy permit both fit. */
export interface AdmissionTicket {
  readonly queueWaitMs: number;
  readonly admission: "fast" | "queued";
  release(): void;
  markFirstByte(): boolean;
  onPreempt(listener: (error: Error) => void): void;
}

export interface AdmissionRequest {
  priority: string | undefined;
  tenant: string;
  cost: number;
  signal: AbortSignal;
}

export type AdmissionMode = "scheduler" | "legacy";

export interface Admission {
  readonly mode: AdmissionMode;
  /** Why the scheduler is not in use, when it was enabled but failed safe. */
  readonly fallbackReason: string | undefined;
  readonly scheduler: Scheduler | undefined;
  readonly legacy: LegacyLimiter | undefined;
  acquire(request: AdmissionRequest): Promise<AdmissionTicket>;
  setCapacity(capacity: number): void;
}

export interface AdmissionOptions {
  enabled: boolean;
  defaultMaxClass: PriorityClass;
  configPath: string | undefined;
  capacity: number;
  legacy: {
    maxConcurrentRequests: number;
    queueSize: number;
    queueTimeoutSecs: number;
    rateLimitTokensPerSecond?: number | undefined;
  };
  observer?: SchedulerObserver | undefined;
  clock?: Clock | undefined;
  logger: Logger;
}

/** Loads and validates the priority-scheduler YAML (absent path -> built-in defaults). */
export async function loadSchedulerFile(path: string | undefined): Promise<SchedulerFileSettings> {
  if (path === undefined) return parseSchedulerYaml("");
  const text = await readFile(path, "utf8");
  return parseSchedulerYaml(text);
}

class SchedulerAdmission implements Admission {
  readonly mode = "scheduler" as const;
  readonly fallbackReason = undefined;
  readonly legacy = undefined;
  constructor(readonly scheduler: Scheduler) {}
  acquire(request: AdmissionRequest): Promise<AdmissionTicket> {
    return this.scheduler.acquire(request);
  }
  setCapacity(capacity: number): void {
    this.scheduler.setCapacity(capacity);
  }
}

class LegacyAdmission implements Admission {
  readonly mode = "legacy" as const;
  readonly scheduler = undefined;
  constructor(
    readonly legacy: LegacyLimiter,
    readonly fallbackReason: string | undefined,
  ) {}
  acquire(request: AdmissionRequest): Promise<AdmissionTicket> {
    return this.legacy.acquire(request);
  }
  setCapacity(): void {
    // Legacy admission limits by --max-concurrent-requests, not by discovered capacity.
  }
}

export async function createAdmission(options: AdmissionOptions): Promise<Admission> {
  const legacy = () =>
    createLegacyLimiter({
      maxConcurrentRequests: options.legacy.maxConcurrentRequests,
      queueSize: options.legacy.queueSize,
      queueTimeoutSecs: options.legacy.queueTimeoutSecs,
      rateLimitTokensPerSecond: options.legacy.rateLimitTokensPerSecond,
      ...(options.clock ? { clock: options.clock } : {}),
    });
  if (!options.enabled) return new LegacyAdmission(legacy(), undefined);
  try {
    const file = await loadSchedulerFile(options.configPath);
    const scheduler = createScheduler({
      capacity: options.capacity,
      classes: file.classes,
      tenantPolicies: file.tenantPolicies,
      defaultMaxClass: options.defaultMaxClass,
      ...(options.clock ? { clock: options.clock } : {}),
      ...(options.observer ? { observer: options.observer } : {}),
    });
    options.logger.info({ capacity: options.capacity }, "priority scheduler enabled");
    return new SchedulerAdmission(scheduler);
  } catch (err) {
    const reason = (err as Error).message;
    options.logger.error(
      { err: reason, configPath: options.configPath },
      `priority scheduler disabled, falling back to legacy admission: ${reason}`,
    );
    return new LegacyAdmission(legacy(), reason);
  }
}
