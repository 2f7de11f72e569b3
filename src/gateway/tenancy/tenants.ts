/**
 * Who is asking. The tenant key comes from authentication, never from a header a client can set:
 * a bearer token whose SHA-256 is listed in `api_keys` is tenant `auth:<name>`. Deployments behind
 * an auth proxy may opt in to a trusted header (`header:<value>`), and deployments behind a Gateway
 * API inference gateway to its fairness id (`fairness:<id>`, inference-gateway-headers.ts). Everyone
 * else is `anonymous`, or refused with 401 when auth is required.
 */
import { hash } from "node:crypto";
import type { IncomingHttpHeaders } from "node:http";
import { ConfigError } from "@sluice/scheduler/core/errors.js";
import type { InferenceGatewaySettings } from "../../config/inference-objectives.js";
import { GatewayError } from "../../contracts/gateway-error.js";
import { firstHeaderValue } from "../http/headers.js";
import type { ApiKeySpec } from "../options.js";
import {
  applyObjective,
  dropInferenceGatewayHeaders,
  fairnessTenant,
  type ResolvedObjective,
} from "./inference-gateway-headers.js";

export const ANONYMOUS_TENANT = "anonymous";

interface TenantResolverOptions {
  apiKeys: ApiKeySpec[];
  trustedTenantHeader?: string | null | undefined;
  /** `--inference-gateway-headers` on: the fairness id and objective headers are trusted. */
  inferenceGateway?: InferenceGatewaySettings | undefined;
  requireAuth: boolean;
}

export function sha256Hex(text: string): string {
  // The one-shot form: no Hash object per request (2.5x faster than createHash for a short key).
  return hash("sha256", text, "hex");
}

export class TenantResolver {
  private readonly byHash = new Map<string, string>();
  /**
   * Keys already seen to match, with their tenant: a returning key costs a map lookup, not a
   * SHA-256. Only keys whose digest is listed go in, so it holds at most one entry per `api_keys`
   * row; a reload builds a new resolver, and so forgets them. The map compares a presented key
   * with a stored one only when their string hashes agree, and V8 seeds those per process: a
   * client cannot steer toward a stored key any more than through the digest.
   */
  private readonly verified = new Map<string, string>();
  private readonly trustedHeader: string | undefined;
  private readonly requireAuth: boolean;
  private readonly inferenceGateway: InferenceGatewaySettings | undefined;

  constructor(options: TenantResolverOptions) {
    options.apiKeys.forEach((key, i) => {
      const hash = key.sha256.toLowerCase();
      if (!/^[0-9a-f]{64}$/.test(hash)) {
        throw new ConfigError(`api_keys[${i}].sha256`, "must be 64 hex characters (the SHA-256 of the key)");
      }
      if (!key.tenant || /[\s:]/.test(key.tenant)) {
        throw new ConfigError(`api_keys[${i}].tenant`, "must be a non-empty name without spaces or ':'");
      }
      this.byHash.set(hash, `auth:${key.tenant}`);
    });
    this.trustedHeader = options.trustedTenantHeader ? options.trustedTenantHeader.toLowerCase() : undefined;
    this.requireAuth = options.requireAuth;
    this.inferenceGateway = options.inferenceGateway;
  }

  /** Resolves the tenant key, or throws a 401 GatewayError. */
  resolve(headers: IncomingHttpHeaders): string {
    const auth = headers.authorization;
    if (auth !== undefined && this.byHash.size > 0) {
      const match = /^Bearer\s+(.+)$/i.exec(auth.trim());
      if (match) {
        const key = match[1]!;
        const known = this.verified.get(key);
        if (known !== undefined) return known;
        // Looking up the digest, not the key, leaks nothing useful through timing: an attacker
        // cannot steer the digest's bytes toward a stored one.
        const tenant = this.byHash.get(sha256Hex(key));
        if (tenant !== undefined) {
          this.verified.set(key, tenant);
          return tenant;
        }
      }
      if (this.requireAuth) throw new GatewayError("invalid_api_key", "the API key is not valid");
    }
    if (this.trustedHeader !== undefined) {
      const v = firstHeaderValue(headers[this.trustedHeader]);
      if (v !== undefined && v.trim() !== "") return `header:${v.trim()}`;
    }
    if (this.inferenceGateway !== undefined) {
      const tenant = fairnessTenant(headers);
      if (tenant !== undefined) return tenant;
    }
    if (this.requireAuth) {
      // A key was presented but matched none (also when no keys are configured): invalid, not missing.
      if (auth !== undefined && auth.trim() !== "") {
        throw new GatewayError("invalid_api_key", "the API key is not valid");
      }
      throw new GatewayError("missing_api_key", "authentication required: send Authorization: Bearer <key>");
    }
    return ANONYMOUS_TENANT;
  }

  /**
   * The inference gateway's objective, when trusted: its class becomes the request's class input
   * (400 invalid_inference_header for a malformed value). When not trusted, both inference headers
   * are removed from the request instead, and nothing is returned.
   */
  applyInferenceHeaders(headers: IncomingHttpHeaders): ResolvedObjective | undefined {
    if (this.inferenceGateway === undefined) {
      dropInferenceGatewayHeaders(headers);
      return undefined;
    }
    return applyObjective(headers, this.inferenceGateway);
  }
}
