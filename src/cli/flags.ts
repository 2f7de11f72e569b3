/**
 * The `sluice` gateway command line: commander wired from the option table
 * (src/config/gateway-option-table.ts), whose rows give every flag's name, argument, parser,
 * default and help line. What the command line leaves out comes from the environment, then the
 * `--config` file, then the default (src/config/resolve-gateway-settings.ts).
 */
import { Command, Option } from "commander";
import {
  flagOf,
  GATEWAY_OPTIONS,
  OPTION_KEYS,
  type OptionKey,
  type OptionValues,
} from "../config/gateway-option-table.js";
import type { GatewaySettings } from "../config/gateway-settings.js";
import type { Environment } from "../config/option-layers.js";
import { resolveGatewaySettings } from "../config/resolve-gateway-settings.js";

// Where the gateway's tests and embedders have always found it.
export { reloadGatewayFile } from "../config/gateway-file.js";

/** Commander's attribute name for an option key (`state_url` -> `stateUrl`). */
function attributeOf(key: OptionKey): string {
  return key.replace(/_([a-z])/g, (_, c: string) => c.toUpperCase());
}

export function buildCommand(): Command {
  const cmd = new Command("sluice")
    .description("Priority-aware admission control gateway for LLM inference workers")
    .allowExcessArguments(false)
    .showHelpAfterError("(run sluice --help for the flags)")
    .addHelpText(
      "after",
      "\nEvery flag can also be set in the environment, as SLUICE_ and its name in upper snake case\n" +
        "(--state-url: SLUICE_STATE_URL), or in the --config file by its snake_case name (state_url).\n" +
        "The command line wins over the environment, the environment over the file, the file over the default.",
    );
  for (const key of OPTION_KEYS) {
    const row = GATEWAY_OPTIONS[key];
    const opt = new Option(row.arg === undefined ? flagOf(key) : `${flagOf(key)} ${row.arg}`, row.help);
    if (row.kind === "list") {
      opt.argParser((raw: string, prev: unknown[] | undefined) => [...(prev ?? []), row.parse(raw)]);
    } else if (row.kind === "value") opt.argParser(row.parse);
    // Shown in --help; the value itself is taken from the row when no layer gives one.
    if (row.default !== undefined) opt.default(row.default);
    cmd.addOption(opt);
    // A switch that is on by default is turned off with --no-<flag> (commander pairs the two).
    if (row.kind === "switch" && row.default === true) {
      cmd.addOption(new Option(`--no-${flagOf(key).slice(2)}`, `turn ${flagOf(key)} off`));
    }
  }
  return cmd;
}

/** Parses argv (without node and script), with the environment, into validated gateway settings. */
export function parseGatewayArgs(argv: string[], env: Environment = process.env): GatewaySettings {
  const cmd = buildCommand();
  cmd.exitOverride();
  cmd.configureOutput({ writeErr: () => {}, writeOut: (s) => process.stdout.write(s) });
  cmd.parse(argv, { from: "user" });
  const given = cmd.opts();
  // Commander parsed each argument with its row's parser; a default it filled in is not "given".
  const commandLine: Partial<OptionValues> = Object.fromEntries(
    OPTION_KEYS.filter((key) => cmd.getOptionValueSource(attributeOf(key)) === "cli").map((key) => [
      key,
      given[attributeOf(key)],
    ]),
  );
  return resolveGatewaySettings({ commandLine, env });
}
