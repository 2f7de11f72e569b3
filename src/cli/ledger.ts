/**
 * `sluice ledger query "<SQL>" [--ledger duckdb:PATH|postgres://...] [--format table|json|csv]`:
 * runs SQL against the usage ledger (docs/ledger.md). The ledger is the `--ledger` flag, else the
 * `ledger` key of `--config`, else the gateway's default (duckdb:sluice-ledger.duckdb).
 */
import { Command, InvalidArgumentError, Option } from "commander";
import { loadGatewayFile } from "../config/gateway-file.js";
import { formatResult, OUTPUT_FORMATS, type OutputFormat } from "../ledger/format.js";
import { type LedgerReader, openLedgerReader } from "../ledger/query.js";
import { DEFAULT_LEDGER, type LedgerTarget, parseLedgerTarget } from "../ledger/target.js";

export interface LedgerCliOptions {
  ledger: string;
  config?: string;
  format: OutputFormat;
  snapshot?: boolean;
}

/** The options every ledger-reading command shares. */
export function addLedgerOptions(cmd: Command): Command {
  return cmd
    .option("--ledger <target>", "duckdb:PATH | postgres://USER@HOST:PORT/DB", DEFAULT_LEDGER)
    .option("--config <path>", "gateway YAML whose `ledger` key names the ledger (--ledger wins)")
    .addOption(
      new Option("--format <format>", OUTPUT_FORMATS.join(" | ")).default("table").argParser((raw) => {
        if (!(OUTPUT_FORMATS as readonly string[]).includes(raw)) {
          throw new InvalidArgumentError(`must be one of ${OUTPUT_FORMATS.join(", ")}`);
        }
        return raw;
      }),
    )
    .option("--snapshot", "DuckDB held by a running gateway: query a copy of the file taken now");
}

/** A subcommand whose errors come back to main (which prints one line and exits 2). */
export function quietCommand(name: string): Command {
  const cmd = new Command(name);
  cmd.exitOverride();
  cmd.configureOutput({ writeErr: () => {}, writeOut: (s) => process.stdout.write(s) });
  cmd.showHelpAfterError(false);
  return cmd;
}

/** The ledger target of a command: --ledger given, else the --config file's `ledger`, else the default. */
export function ledgerTarget(cmd: Command, options: LedgerCliOptions): LedgerTarget {
  let raw = options.ledger;
  if (cmd.getOptionValueSource("ledger") !== "cli" && options.config !== undefined) {
    const file = loadGatewayFile(options.config);
    if (typeof file.ledger === "string") raw = file.ledger;
  }
  try {
    return parseLedgerTarget(raw);
  } catch (err) {
    throw new InvalidArgumentError(`--ledger: ${(err as Error).message}`);
  }
}

export async function withReader<T>(
  target: LedgerTarget,
  options: LedgerCliOptions,
  fn: (reader: LedgerReader) => Promise<T>,
): Promise<T> {
  const reader = await openLedgerReader(target, { snapshot: options.snapshot === true });
  try {
    return await fn(reader);
  } finally {
    await reader.close();
  }
}

export async function runLedgerCli(argv: string[]): Promise<void> {
  const program = quietCommand("sluice ledger")
    .description("the usage ledger (docs/ledger.md)")
    .usage("query [options] <sql>");
  const query = addLedgerOptions(
    program
      .command("query")
      .description("run SQL against the ledger (tables usage and usage_minute)")
      .argument("<sql>", 'the query, e.g. "SELECT tenant_id, count() FROM usage GROUP BY 1"'),
  );
  program.argument("[command]").action((name: string | undefined) => {
    const usage = 'sluice ledger query "<SQL>" (sluice ledger query --help)';
    throw new InvalidArgumentError(
      name === undefined ? `missing command: ${usage}` : `unknown command "${name}": ${usage}`,
    );
  });
  query.action(async (sql: string, options: LedgerCliOptions) => {
    const target = ledgerTarget(query, options);
    const result = await withReader(target, options, (reader) => reader.query(sql));
    process.stdout.write(formatResult(result, options.format, { terminal: process.stdout.isTTY === true }));
  });
  await program.parseAsync(argv, { from: "user" });
}
