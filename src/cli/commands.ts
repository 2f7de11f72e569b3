/**
 * The `sluice` subcommands: the one list that both `sluice --help` and the dispatch in main.ts read,
 * so the help never names a command that does not run, nor leaves one out. Each loads its module
 * only when chosen (the gateway's start stays free of DuckDB's and the simulator's imports).
 */

export interface Subcommand {
  readonly name: string;
  /** One line for `sluice --help`. */
  readonly summary: string;
  /** Runs the command with its own arguments (after its name). */
  run(argv: string[]): Promise<void>;
}

export const SUBCOMMANDS: readonly Subcommand[] = [
  {
    name: "demo",
    summary: "mock workers, the gateway and a mixed load, with a live table",
    run: async (argv) => (await import("./demo.js")).runDemo(argv),
  },
  {
    name: "mock-worker",
    summary: "a simulated OpenAI/SGLang-compatible worker (no GPU)",
    run: async (argv) => (await import("../mock-worker/cli.js")).runMockWorkerCli(argv),
  },
  {
    name: "simulate",
    summary: "a scenario's policies on simulated workers, in virtual time",
    run: async (argv) => (await import("./simulate.js")).runSimulateCli(argv),
  },
  {
    name: "report",
    summary: "per tenant and class: admissions, queue wait, tokens, cost",
    run: async (argv) => (await import("./report.js")).runReportCli(argv),
  },
  {
    name: "ledger",
    summary: 'SQL against the usage ledger: sluice ledger query "<SQL>"',
    run: async (argv) => (await import("./ledger.js")).runLedgerCli(argv),
  },
  {
    name: "check-config",
    summary: "validate the config files offline; print the per-class table",
    run: async (argv) => (await import("./check-config.js")).runCheckConfigCli(argv),
  },
];

export function findSubcommand(name: string): Subcommand | undefined {
  return SUBCOMMANDS.find((c) => c.name === name);
}
