#!/usr/bin/env node
/**
 * `sluice`: the gateway (default), or one of the subcommands in commands.ts (`sluice --help` lists
 * them); `sluice help <command>` and `sluice --version` too.
 */
import { ConfigError } from "@sluice/scheduler/core/errors.js";
import { CommanderError, InvalidArgumentError } from "commander";
import { pino } from "pino";
import { reloadGatewayFile } from "../config/gateway-file.js";
import { startSettings } from "../config/resolve-gateway-settings.js";
import { startGatewayWithDashboard } from "../dashboard/gateway-with-dashboard.js";
import { terminalSafeMessage } from "../ledger/format.js";
import { findSubcommand, SUBCOMMANDS, type Subcommand } from "./commands.js";
import { parseGatewayArgs } from "./flags.js";
import { packageVersion, topLevelHelp } from "./help.js";

async function runGatewayCli(argv: string[]): Promise<void> {
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

/** The gateway's run: no subcommand, so the arguments are its flags (or none). */
function isGatewayRun(argv: readonly string[]): boolean {
  return argv.length === 0 || argv[0]!.startsWith("-");
}

export async function main(argv: string[]): Promise<number> {
  const [sub, ...rest] = argv;
  try {
    if (sub === "--version" || sub === "-V") {
      process.stdout.write(`sluice ${packageVersion()}\n`);
    } else if (sub === "help" || (isGatewayRun(argv) && (argv.includes("--help") || argv.includes("-h")))) {
      const name = sub === "help" && rest[0]?.startsWith("-") === false ? rest[0] : undefined;
      if (name === undefined) process.stdout.write(topLevelHelp(SUBCOMMANDS));
      else await subcommandNamed(name).run(["--help"]);
    } else if (isGatewayRun(argv)) {
      await runGatewayCli(argv);
    } else {
      await subcommandNamed(sub!).run(rest);
    }
    return 0;
  } catch (err) {
    // check-config printed its problems; its exit code says there were some.
    if (err instanceof Error && err.name === "CheckFailed")
      return (err as Error & { exitCode: number }).exitCode;
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

function subcommandNamed(name: string): Subcommand {
  const found = findSubcommand(name);
  if (found === undefined) {
    const names = SUBCOMMANDS.map((c) => c.name).join(", ");
    throw new InvalidArgumentError(`unknown command "${name}": the commands are ${names} (sluice --help)`);
  }
  return found;
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
