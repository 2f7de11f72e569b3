/**
 * The tenant policy in force: who a request's tenant is (API keys) and what that tenant may do
 * (the priority YAML's tenant policies). A reload replaces both together, and only when every file
 * is valid, so a bad file changes nothing.
 */
import type { BudgetBook } from "@sluice/scheduler/core/budgets.js";
import { clamp, type PriorityClass, parsePriority } from "@sluice/scheduler/core/class.js";
import type { SchedulerFileSettings, TenantPolicy } from "@sluice/scheduler/core/config.js";
import { ConfigError } from "@sluice/scheduler/core/errors.js";
import { loadSchedulerFile } from "../config/policy-file.js";
import type { FleetAdmission } from "./fleet/fleet-admission.js";
import type { GatewayOptions } from "./options.js";
import { TenantResolver } from "./tenancy/tenants.js";

/** What a reload updates besides the policy itself. */
interface ReloadTargets {
  readonly admission: FleetAdmission;
  readonly budgets: BudgetBook;
}

export class LivePolicy {
  private resolver: TenantResolver;
  private policies: ReadonlyMap<string, TenantPolicy>;

  constructor(
    private readonly options: GatewayOptions,
    policyFile: SchedulerFileSettings | undefined,
  ) {
    this.resolver = new TenantResolver(options);
    this.policies = policyFile?.tenantPolicies ?? new Map();
  }

  get tenants(): TenantResolver {
    return this.resolver;
  }

  get tenantPolicies(): ReadonlyMap<string, TenantPolicy> {
    return this.policies;
  }

  /** The class a request runs in: the one it asks for, capped by its tenant's `max_class`. */
  classFor(priority: string | undefined, tenant: string): PriorityClass {
    const cap = this.policies.get(tenant)?.max_class ?? this.options.priorityScheduler.defaultMaxClass;
    return clamp(parsePriority(priority).class, cap);
  }

  /** Re-reads the policy files; a bad file throws and the running policy stays in force. */
  async reload(targets: ReloadTargets): Promise<{ tenantPolicies: number }> {
    const { options } = this;
    // Parse everything first; apply only when every file is valid, so a bad file changes nothing.
    const configPath = options.priorityScheduler.configPath;
    const file = await loadSchedulerFile(configPath).catch((err: unknown) => {
      if (err instanceof ConfigError) throw err;
      // A missing or unreadable file is a bad file too: 400 invalid_config naming it, not a 500.
      const reason = (err as NodeJS.ErrnoException).code ?? (err as Error).message;
      throw new ConfigError("priority_scheduler_config", `cannot read ${configPath}: ${reason}`);
    });
    const gatewayFile = options.reloadGatewayConfig?.();
    const resolver = gatewayFile
      ? new TenantResolver({ ...options, apiKeys: gatewayFile.apiKeys })
      : this.resolver;
    targets.admission.setTenantPolicies(file.tenantPolicies, options.priorityScheduler.defaultMaxClass);
    targets.budgets.setPolicies(file.tenantPolicies, gatewayFile?.pricing ?? options.pricing ?? {});
    this.policies = file.tenantPolicies;
    this.resolver = resolver;
    options.logger.info({ tenantPolicies: file.tenantPolicies.size }, "policy reloaded");
    return { tenantPolicies: file.tenantPolicies.size };
  }
}
