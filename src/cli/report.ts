/**
 * `sluice report --since 1h [--ledger ...] [--format table|json|csv]`: per tenant and class,
 * admission counts, queue-wait p50/p99, tokens in/out, cost and error codes, from the ledger; the
 * table ends with notes on what each column counts.
 */
import { InvalidArgumentError } from "commander";
import { formatResult, jsonText, terminalSafe } from "../ledger/format.js";
import { buildReport, parseSince, REPORT_DECIMALS, REPORT_NOTES, reportTable } from "../ledger/report.js";
import { addLedgerOptions, type LedgerCliOptions, ledgerTarget, quietCommand, withReader } from "./ledger.js";

export async function runReportCli(argv: string[]): Promise<void> {
  const cmd = addLedgerOptions(
    quietCommand("sluice report")
      .description("per tenant and class: admissions, queue wait, tokens, cost and error codes")
      .option("--since <when>", "window start: a duration (30s, 15m, 1h, 7d) or a date", "1h"),
  );
  cmd.action(async (options: LedgerCliOptions & { since: string }) => {
    let since: number;
    try {
      since = parseSince(options.since);
    } catch (err) {
      throw new InvalidArgumentError((err as Error).message);
    }
    const target = ledgerTarget(cmd, options);
    const report = await withReader(target, options, (reader) => buildReport(reader, since));
    if (options.format === "json") {
      process.stdout.write(`${jsonText(report)}\n`);
      return;
    }
    const table = reportTable(report);
    if (options.format === "table") {
      process.stdout.write(`since ${report.since} until ${report.until} (${terminalSafe(report.ledger)})\n`);
    }
    process.stdout.write(
      formatResult(table, options.format, {
        terminal: process.stdout.isTTY === true,
        decimals: REPORT_DECIMALS,
      }),
    );
    // What each column counts, under the table; CSV stays data only.
    if (options.format === "table") process.stdout.write(`${REPORT_NOTES.join("\n")}\n`);
  });
  await cmd.parseAsync(argv, { from: "user" });
}
