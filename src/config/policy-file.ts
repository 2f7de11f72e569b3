/**
 * Loads the priority-scheduler YAML (`--priority-scheduler-config`); absent path -> built-in
 * defaults. Its errors name the file, the line and the key, with a "did you mean" for a near miss:
 * the gateway falls back to legacy admission on them, and the operator has to find the mistake.
 */
import { readFile } from "node:fs/promises";
import { PRIORITY_CLASSES } from "@sluice/scheduler/core/class.js";
import type { SchedulerFileSettings } from "@sluice/scheduler/core/config.js";
import { ConfigError } from "@sluice/scheduler/core/errors.js";
import { isMap, isScalar, LineCounter, type Node, parseDocument } from "yaml";
import { SchedulerFileError } from "../contracts/scheduler-fallback.js";
import { nearMiss } from "./near-miss.js";
import {
  classSettingsSchema,
  parseSchedulerConfig,
  parseSchedulerYaml,
  schedulerFileSchema,
  tenantPolicySchema,
} from "./scheduler-file.js";

export async function loadSchedulerFile(path: string | undefined): Promise<SchedulerFileSettings> {
  if (path === undefined) return parseSchedulerYaml("");
  let text: string;
  try {
    text = await readFile(path, "utf8");
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code ?? (err as Error).message;
    throw new SchedulerFileError(
      "config_missing",
      "priority_scheduler_config",
      `cannot read ${path}: ${code} (check --priority-scheduler-config)`,
    );
  }
  return parseSchedulerFile(path, text);
}

/** The file's text to settings; a mistake throws a SchedulerFileError naming `file:line: key`. */
function parseSchedulerFile(file: string, text: string): SchedulerFileSettings {
  const lines = new LineCounter();
  const doc = parseDocument(text, { lineCounter: lines });
  const syntax = doc.errors[0];
  if (syntax !== undefined) {
    const line = syntax.linePos?.[0].line;
    const where = line === undefined ? file : `${file}:${line}`;
    throw new SchedulerFileError("config_invalid", where, `invalid YAML: ${syntax.message.split("\n")[0]}`);
  }
  try {
    return parseSchedulerConfig(doc.toJS());
  } catch (err) {
    if (!(err instanceof ConfigError)) throw err;
    const found = locate(doc.contents, err.path);
    const line = found?.node.range ? lines.linePos(found.node.range[0]).line : undefined;
    const where = line === undefined ? file : `${file}:${line}`;
    const hint = found ? suggestion(found) : undefined;
    const reason = hint ? `${err.reason} (did you mean ${hint}?)` : err.reason;
    throw new SchedulerFileError("config_invalid", err.path ? `${where}: ${err.path}` : where, reason);
  }
}

interface Located {
  /** The keys walked to reach the node (a tenant name may hold dots: one key). */
  readonly keys: readonly string[];
  /** The key's node (its line is the key's line). */
  readonly node: Node;
  /** The key's value node. */
  readonly value: unknown;
}

/** The key node a dotted error path names, trying the longest key first at each level. */
function locate(root: unknown, path: string): Located | undefined {
  if (path === "") return undefined;
  const walk = (node: unknown, rest: string[], keys: string[]): Located | undefined => {
    if (!isMap(node)) return undefined;
    for (let n = rest.length; n >= 1; n--) {
      const key = rest.slice(0, n).join(".");
      const pair = node.items.find((p) => isScalar(p.key) && String(p.key.value) === key);
      if (pair === undefined) continue;
      if (n === rest.length) return { keys: [...keys, key], node: pair.key as Node, value: pair.value };
      const deeper = walk(pair.value, rest.slice(n), [...keys, key]);
      if (deeper !== undefined) return deeper;
    }
    return undefined;
  };
  return walk(root, path.split("."), []);
}

/** A near miss for a mistyped key, class name or max_class value. */
function suggestion({ keys, value }: Located): string | undefined {
  const typed = keys.at(-1)!;
  const parent = keys.slice(0, -1);
  let known: readonly string[] = [];
  if (parent.length === 0) known = Object.keys(schedulerFileSchema.shape);
  else if (parent.length === 1 && parent[0] === "classes") known = PRIORITY_CLASSES;
  else if (parent.length === 2 && parent[0] === "classes") known = Object.keys(classSettingsSchema.shape);
  else if (parent.length === 2 && parent[0] === "tenant_policies") {
    known = Object.keys(tenantPolicySchema.shape);
    if (typed === "max_class")
      return isScalar(value) ? nearMiss(String(value.value), PRIORITY_CLASSES) : undefined;
  }
  return known.includes(typed) ? undefined : nearMiss(typed, known);
}
