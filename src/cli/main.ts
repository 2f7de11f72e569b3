#!/usr/bin/env node
/**
 * `sluice`: the gateway (default), `sluice mock-worker` (a simulated inference worker),
 * `sluice demo` (two mock workers, the gateway and a mixed-priority load with a live table), and
 * `sluice ledger query` / `sluice report` (the usage ledger, docs/ledger.md).
 */
import { ConfigError } from "@sluice/scheduler/core/errors.js";
import { CommanderError } from "commander";
import { pino } from "pino";
import { reloadGatewayFile } from "../config/gateway-file.js";
import { startSettings } from "../config/resolve-gateway-settings.js";
import { startGatewayWithDashboard } from "../dashboard/gateway-with-dashboard.js";
import { terminalSafeMessage } from "../ledger/format.js";
import { runMockWorkerCli } from "../mock-worker/cli.js";
import { parseGatewayArgs } from "./flags.js";

export async function runGatewayCli(argv: string[]): Promise<void> {
  const flags = parseGatewayArgs(argv);
  const logger = pino({ level: flags.logLevel, base: { service: "sluice" } });
  const gateway = await startGatewayWithDashboard({
    ...startSettings(flags),
    reloadGatewayConfig: flags.configPath ? () => reloadGatewayFile(flags.configPath!) : undefined,
    logger,
  });
  // SIGHUP re-reads the policy files, like POST /api/v1/reload; a bad file keeps the running policy.
  process.on("SIGHUP", () => {
    gateway
      .reload()
      .catch((err: Error) => logger.error({ err: err.message }, `reload rejected: ${err.message}`));
  });
  // The first SIGTERM or SIGINT drains (requests already received finish, for at most
  // --drain-timeout-secs), then flushes the ledger; a second one cuts what is still running.
  let stopping = false;
  const stop = (signal: string) => {
    if (stopping) {
      logger.warn({ signal }, "second signal: cutting the requests still running");
      void gateway.close().then(() => process.exit(0));
      return;
    }
    stopping = true;
    logger.info({ signal, drainTimeoutSecs: flags.drainTimeoutSecs }, "shutting down");
    void gateway.close({ drainMs: flags.drainTimeoutSecs * 1000 }).then(() => process.exit(0));
  };
  process.on("SIGINT", () => stop("SIGINT"));
  process.on("SIGTERM", () => stop("SIGTERM"));
}

export async function main(argv: string[]): Promise<number> {
  const [sub, ...rest] = argv;
  try {
    if (sub === "mock-worker") await runMockWorkerCli(rest);
    else if (sub === "demo") {
      const { runDemo } = await import("./demo.js");
      await runDemo(rest);
    } else if (sub === "simulate") {
      const { runSimulateCli } = await import("./simulate.js");
      await runSimulateCli(rest);
    } else if (sub === "ledger") {
      const { runLedgerCli } = await import("./ledger.js");
      await runLedgerCli(rest);
    } else if (sub === "report") {
      const { runReportCli } = await import("./report.js");
      await runReportCli(rest);
    } else await runGatewayCli(argv);
    return 0;
  } catch (err) {
    if (err instanceof CommanderError) {
      if (err.exitCode === 0) return 0; // --help, --version
      process.stderr.write(`sluice: ${err.message.replace(/^error: /, "")}\n`);
      return 2;
    }
    if (err instanceof ConfigError) {
      process.stderr.write(`sluice: ${err.message}\n`);
      return 2;
    }
    const e = err as NodeJS.ErrnoException;
    // A ledger query's error may quote a stored string (a client's model): no raw control bytes.
    const message = terminalSafeMessage(e.message);
    process.stderr.write(
      `sluice: ${e.code === "EADDRINUSE" ? `port already in use (${message})` : message}\n`,
    );
    return 1;
  }
}

const invokedDirectly = process.argv[1] !== undefined && /[\\/]cli[\\/]main\.(ts|js)$/.test(process.argv[1]);
if (invokedDirectly) {
  main(process.argv.slice(2)).then(
    (code) => {
      if (code !== 0) process.exit(code);
    },
    (err) => {
      process.stderr.write(`sluice: ${(err as Error).message}\n`);
      process.exit(1);
    },
  );
}
