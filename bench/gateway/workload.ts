/**
 * What the gateway bench sends, and the sluice configuration it is sent to. Four tenants, each known by
 * its API key (`api_keys` in the gateway's --config, with `require_auth`), and each allowed every class.
 * The requests cycle through the 16 (tenant, class) pairs, so that all four `x-smg-priority` classes and
 * all four tenants are in use all the time. Every target gets the same requests, the same headers
 * included: the direct run and the bare proxy carry the same bytes as sluice.
 */
import { createHash } from "node:crypto";

export const REQUEST_PATH = "/v1/chat/completions";
export const CLASSES = ["system", "interactive", "default", "bulk"] as const;
export const STREAM_TOKENS = 64;

/** Tenant names, their fair-share weights, and the bearer keys their clients send. */
export const TENANTS = [
  { name: "alpha", weight: 1, key: "sk-bench-alpha-3f9c1e7a5b2d4c6e8f0a1b3c" },
  { name: "beta", weight: 2, key: "sk-bench-beta-7d2e4f6a8b0c1d3e5f7a9b1c" },
  { name: "gamma", weight: 3, key: "sk-bench-gamma-1a3b5c7d9e0f2a4b6c8d0e2f" },
  { name: "delta", weight: 4, key: "sk-bench-delta-9e8d7c6b5a4f3e2d1c0b9a8f" },
] as const;

/** Small non-streaming chat request: one output token. */
export const REQUEST_BODY = JSON.stringify({
  model: "mock-llm",
  messages: [{ role: "user", content: "hi" }],
  max_tokens: 1,
});

/**
 * Streaming chat request: 64 tokens as server-sent events. It does not ask for usage itself, as most
 * clients do not: sluice then asks the worker for it and strips the extra usage event.
 */
export const STREAM_BODY = JSON.stringify({
  model: "mock-llm",
  messages: [{ role: "user", content: "hi" }],
  max_tokens: STREAM_TOKENS,
  stream: true,
});

export interface RequestVariant {
  tenant: string;
  priority: (typeof CLASSES)[number];
  headers: Record<string, string>;
  body: string;
}

/**
 * The 16 (tenant, class) pairs, ordered so that consecutive requests differ in both tenant and class.
 */
export function requestVariants(body: string): RequestVariant[] {
  const out: RequestVariant[] = [];
  for (let k = 0; k < TENANTS.length * CLASSES.length; k++) {
    const tenant = TENANTS[k % TENANTS.length]!;
    const priority = CLASSES[(k + Math.floor(k / TENANTS.length)) % CLASSES.length]!;
    out.push({
      tenant: tenant.name,
      priority,
      headers: {
        "content-type": "application/json",
        authorization: `Bearer ${tenant.key}`,
        "x-smg-priority": priority,
      },
      body,
    });
  }
  return out;
}

/** The variants, starting at the i-th: instances started together do not all send the same one first. */
export function rotated<T>(list: readonly T[], i: number): T[] {
  const at = i % list.length;
  return [...list.slice(at), ...list.slice(0, at)];
}

const sha256 = (text: string) => createHash("sha256").update(text).digest("hex");

/** The gateway's --config: the tenants' API keys (by SHA-256), authentication required. */
export function gatewayConfigYaml(): string {
  return [
    "require_auth: true",
    "api_keys:",
    ...TENANTS.map((t) => `  - { sha256: "${sha256(t.key)}", tenant: ${t.name} }`),
    "",
  ].join("\n");
}

/**
 * The priority scheduler's YAML: small reservations that fit the worker's slots (so admission never
 * queues), and a policy per tenant that allows every class, with different fair-share weights.
 */
export function priorityYaml(): string {
  return [
    "classes:",
    "  system: { reserved_floor: 4, reserved_per_slot: 0 }",
    "  interactive: { reserved_floor: 8, reserved_per_slot: 0 }",
    "  default: { reserved_floor: 0, reserved_per_slot: 0 }",
    "  bulk: { reserved_floor: 0, reserved_per_slot: 0 }",
    "tenant_policies:",
    ...TENANTS.map((t) => `  "auth:${t.name}": { max_class: system, weight: ${t.weight} }`),
    "",
  ].join("\n");
}
