/**
 * An option's value from its layers, first found wins: the command line, the environment variable
 * (`SLUICE_<KEY>`; an empty value counts as unset), the `--config` file, the row's default. Every
 * layer goes through the row's own parser, so the rules cannot drift between them; an error names
 * the flag (commander), the variable or the file's key.
 */
import { ConfigError } from "@sluice/scheduler/core/errors.js";
import type { GatewayFile } from "./gateway-file.js";
import {
  envOf,
  GATEWAY_OPTIONS,
  OPTION_KEYS,
  type OptionKey,
  type OptionRow,
  type OptionValues,
} from "./gateway-option-table.js";

export type Environment = Readonly<Record<string, string | undefined>>;

interface OptionLayers {
  /** What the command line gave, already parsed, by key (keys it did not give are absent). */
  commandLine: Partial<OptionValues>;
  env: Environment;
  file: GatewayFile;
  /** The file's path, for error messages. */
  filePath: string | undefined;
}

/** The variable's value, or undefined when it is unset or empty. */
export function envValue(env: Environment, name: string): string | undefined {
  const raw = env[name];
  return raw === undefined || raw === "" ? undefined : raw;
}

/** Every option's value, typed by its row. */
export function resolveOptionValues(layers: OptionLayers): OptionValues {
  const values: Partial<Record<OptionKey, unknown>> = {};
  for (const key of OPTION_KEYS) values[key] = resolveOne(key, layers);
  // Each value came through its row's parser (or is its row's default), hence of the row's type.
  return values as OptionValues;
}

function resolveOne(key: OptionKey, layers: OptionLayers): unknown {
  const row: OptionRow<unknown> = GATEWAY_OPTIONS[key];
  if (key in layers.commandLine) return layers.commandLine[key];
  const fromEnv = envValue(layers.env, envOf(key));
  if (fromEnv !== undefined) return parseEnv(key, row, fromEnv);
  if (row.inFile && key in layers.file) return parseYaml(key, row, layers.file[key], layers.filePath);
  return row.default;
}

function parseEnv(key: OptionKey, row: OptionRow<unknown>, raw: string): unknown {
  const name = envOf(key);
  try {
    if (row.kind === "switch") {
      if (raw === "true" || raw === "1") return true;
      if (raw === "false" || raw === "0") return false;
      throw new ConfigError(name, "must be true, false, 1 or 0");
    }
    if (row.kind === "list")
      return raw
        .split(/[\s,]+/)
        .filter((item) => item !== "")
        .map(row.parse);
    return row.parse(raw);
  } catch (err) {
    if (err instanceof ConfigError) throw err;
    throw new ConfigError(name, (err as Error).message);
  }
}

/** A YAML value through the flag's own parser; errors name the file's key. */
function parseYaml(
  key: OptionKey,
  row: OptionRow<unknown>,
  value: unknown,
  path: string | undefined,
): unknown {
  const where = `${path}: ${key}`;
  if (row.kind === "switch") {
    if (typeof value !== "boolean") throw new ConfigError(where, "must be true or false");
    return value;
  }
  const one = (v: unknown) => {
    if (typeof v !== "string" && typeof v !== "number")
      throw new ConfigError(where, "must be a string or a number");
    try {
      return row.parse(String(v));
    } catch (err) {
      throw new ConfigError(where, (err as Error).message);
    }
  };
  if (row.kind === "list") return (Array.isArray(value) ? value : [value]).map(one);
  return one(value);
}
