/** zod issues as ConfigErrors that name the key, with the core's wording for unknown keys. */

import { CONFIG_MESSAGES } from "@sluice/scheduler/core/config.js";
import { ConfigError } from "@sluice/scheduler/core/errors.js";
import type { z } from "zod";

/** Turns the first zod issue into a ConfigError naming the key (`prefix` is prepended to its path). */
export function toConfigError(error: z.ZodError, prefix = ""): ConfigError {
  const issue = error.issues[0];
  if (issue === undefined) return new ConfigError(prefix, "invalid");
  const path = [prefix, ...issue.path.map(String)].filter((p) => p !== "").join(".");
  if (issue.code === "unrecognized_keys") {
    const key = issue.keys[0] ?? "";
    const at = path ? `${path}.${key}` : key;
    // The mapping of class names, not any key that happens to end in "classes" (a tenant "auth:classes").
    if (issue.path.at(-1) === "classes" && issue.path.at(-2) !== "tenant_policies") {
      return new ConfigError(at, CONFIG_MESSAGES.unknownClass);
    }
    return new ConfigError(at, CONFIG_MESSAGES.unknownKey);
  }
  return new ConfigError(path, issue.message);
}
