/** Builds a policy by name: one instance per worker set (pool), each with its own state. */

import {
  NO_ROUTING_OBSERVER,
  type RoutingCandidate,
  type RoutingObserver,
  type RoutingPolicy,
} from "../contracts/routing-policy.js";
import { CacheAwarePolicy } from "./cache-aware.js";
import { LeastTokensPolicy } from "./least-tokens.js";
import type { RoutingOptions } from "./options.js";
import { PowerOfTwoPolicy } from "./power-of-two.js";
import { PrefixHashPolicy } from "./prefix-hash.js";
import { RandomPolicy } from "./random.js";
import { RoundRobinPolicy } from "./round-robin.js";
import { SessionPolicy } from "./session.js";

export function createRoutingPolicy<W extends RoutingCandidate>(
  options: RoutingOptions,
  observer: RoutingObserver = NO_ROUTING_OBSERVER,
  random: () => number = Math.random,
): RoutingPolicy<W> {
  switch (options.policy) {
    case "cache_aware":
      return new CacheAwarePolicy<W>(
        {
          cacheThreshold: options.cacheThreshold,
          balanceAbsThreshold: options.balanceAbsThreshold,
          balanceRelThreshold: options.balanceRelThreshold,
          maxTreeSize: options.cacheAwareMaxTreeSize,
        },
        observer,
      );
    case "prefix_hash":
      return new PrefixHashPolicy<W>(options, observer);
    case "session":
      return new SessionPolicy<W>(options.sessionHeader, observer, random);
    case "power_of_two":
      return new PowerOfTwoPolicy<W>(observer, random);
    case "round_robin":
      return new RoundRobinPolicy<W>(observer);
    case "random":
      return new RandomPolicy<W>(observer, random);
    case "least_tokens":
      return new LeastTokensPolicy<W>(observer);
  }
}
