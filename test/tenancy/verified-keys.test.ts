/**
 * The resolver remembers the keys it has verified (a returning key skips the SHA-256): the answers
 * stay those of the digest lookup, whatever was seen before, and a reloaded resolver starts afresh.
 */
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { test } from "node:test";
import { GatewayError } from "../../src/contracts/gateway-error.js";
import { TenantResolver } from "../../src/gateway/tenancy/tenants.js";

const KEY = "sk-test-acme-0123456789";
const OTHER = "sk-test-beta-9876543210";
const sha256 = (text: string) => createHash("sha256").update(text).digest("hex");
const bearer = (key: string) => ({ authorization: `Bearer ${key}` });

function refusedWith(resolver: TenantResolver, key: string, code: string): void {
  assert.throws(
    () => resolver.resolve(bearer(key)),
    (err: unknown) => err instanceof GatewayError && err.code === code,
    `${key} is refused with ${code}`,
  );
}

test("a verified key resolves the same every time; near misses stay refused", () => {
  const resolver = new TenantResolver({
    apiKeys: [
      { sha256: sha256(KEY), tenant: "acme" },
      { sha256: sha256(OTHER), tenant: "beta" },
    ],
    requireAuth: true,
  });
  for (let i = 0; i < 3; i++) {
    assert.equal(resolver.resolve(bearer(KEY)), "auth:acme");
    assert.equal(resolver.resolve({ authorization: `bearer   ${KEY}  ` }), "auth:acme");
    assert.equal(resolver.resolve(bearer(OTHER)), "auth:beta");
    // A prefix, an extension and a one-character change of a verified key are other keys.
    refusedWith(resolver, KEY.slice(0, -1), "invalid_api_key");
    refusedWith(resolver, `${KEY}0`, "invalid_api_key");
    refusedWith(resolver, `${KEY.slice(0, -1)}8`, "invalid_api_key");
  }
});

test("a reloaded resolver without a key refuses it, though the old one had verified it", () => {
  const before = new TenantResolver({
    apiKeys: [{ sha256: sha256(KEY), tenant: "acme" }],
    requireAuth: true,
  });
  assert.equal(before.resolve(bearer(KEY)), "auth:acme");
  const after = new TenantResolver({
    apiKeys: [{ sha256: sha256(OTHER), tenant: "beta" }],
    requireAuth: true,
  });
  refusedWith(after, KEY, "invalid_api_key");
  assert.equal(after.resolve(bearer(OTHER)), "auth:beta");
  // The old resolver is unchanged by the new one.
  assert.equal(before.resolve(bearer(KEY)), "auth:acme");
});

test("without require_auth a wrong key falls back to anonymous, verified keys or not", () => {
  const resolver = new TenantResolver({
    apiKeys: [{ sha256: sha256(KEY), tenant: "acme" }],
    requireAuth: false,
  });
  assert.equal(resolver.resolve(bearer(KEY)), "auth:acme");
  assert.equal(resolver.resolve(bearer(OTHER)), "anonymous");
  assert.equal(resolver.resolve(bearer(KEY)), "auth:acme");
});
