/**
 * A fleet over one Redis, as the shared-state tests set it up: mock workers in this process (closed
 * after the test), `sluice` replicas as child processes with the priority scheduler on, sharing a key
 * prefix of the test's own (its keys dropped after the test). Each test keeps its own traffic.
 */
import type { TestContext } from "node:test";
import type { Redis } from "ioredis";
import { stringify } from "yaml";
import { sha256Hex } from "../../src/gateway/tenancy/tenants.js";
import { type MockWorker, type MockWorkerOptions, startMockWorker } from "../../src/mock-worker/index.js";
import { keyOf, writeTempFile } from "../helpers/harness.js";
import { type Replica, redisClient, startReplica, stateArgs, statePrefix } from "./services.js";

export interface RedisFleetSpec {
  /** The Redis the replicas share (from redisOrSkip, or a private redis-server's url). */
  readonly redisUrl: string;
  /** One mock worker for each. */
  readonly workers: readonly MockWorkerOptions[];
  readonly replicas: number;
  /** The priority scheduler's YAML (--priority-scheduler-config). */
  readonly schedulerYaml: string;
  /** API keys by tenant, written as a gateway config (--config); none, no config. */
  readonly apiKeys?: Readonly<Record<string, string>>;
  /** --priority-scheduler-default-max-class. */
  readonly defaultMaxClass?: string;
  /** More --state-* flags (fail mode, lease TTL). */
  readonly stateFlags?: readonly string[];
  /** Flags every replica gets after the rest (a ledger, a default output). */
  readonly flags?: readonly string[];
  /** Flags one replica gets after `flags`, by its index. */
  readonly replicaFlags?: (index: number) => readonly string[];
  /** An admin API on each replica (see ADMIN_TOKEN). */
  readonly admin?: boolean;
}

export interface RedisFleet {
  readonly redisUrl: string;
  readonly prefix: string;
  readonly workers: MockWorker[];
  readonly replicas: Replica[];
  /** Each replica's port, in order. */
  readonly ports: number[];
  /** A client for reading the shared state (opened on first use, closed after the test). */
  readonly redis: Redis;
}

/** Each tenant's key as the harness makes it (keyOf), for RedisFleetSpec.apiKeys. */
export function harnessKeys(...tenants: string[]): Record<string, string> {
  return Object.fromEntries(tenants.map((tenant) => [tenant, keyOf(tenant)]));
}

export async function startRedisFleet(t: TestContext, spec: RedisFleetSpec): Promise<RedisFleet> {
  const workers = await Promise.all(spec.workers.map((options) => startMockWorker(options)));
  t.after(() => Promise.all(workers.map((w) => w.close())));
  const configFlags: string[] = [];
  if (spec.apiKeys !== undefined) {
    const apiKeys = Object.entries(spec.apiKeys).map(([tenant, key]) => ({ sha256: sha256Hex(key), tenant }));
    configFlags.push("--config", await writeTempFile(t, "gateway.yaml", stringify({ api_keys: apiKeys })));
  }
  const priority = await writeTempFile(t, "priority.yaml", spec.schedulerYaml);
  const prefix = statePrefix(t, spec.redisUrl);
  const flags = [
    ...configFlags,
    "--worker-urls",
    ...workers.map((w) => w.url),
    "--priority-scheduler-enabled",
    ...(spec.defaultMaxClass === undefined
      ? []
      : ["--priority-scheduler-default-max-class", spec.defaultMaxClass]),
    "--priority-scheduler-config",
    priority,
    ...stateArgs(spec.redisUrl, prefix, [...(spec.stateFlags ?? [])]),
    ...(spec.flags ?? []),
  ];
  const replicas = await Promise.all(
    Array.from({ length: spec.replicas }, (_, i) =>
      startReplica(t, [...flags, ...(spec.replicaFlags?.(i) ?? [])], spec.admin),
    ),
  );
  let redis: Redis | undefined;
  return {
    redisUrl: spec.redisUrl,
    prefix,
    workers,
    replicas,
    ports: replicas.map((r) => Number(new URL(r.url).port)),
    get redis() {
      redis ??= redisClient(t, spec.redisUrl);
      return redis;
    },
  };
}
