/**
 * What `sluice --help` and `sluice --version` print. The top-level help names every subcommand
 * (from SUBCOMMANDS) and then the gateway's own options, since running the gateway is what `sluice`
 * without a subcommand does.
 */
import { readFileSync } from "node:fs";
import type { Subcommand } from "./commands.js";
import { buildCommand } from "./flags.js";

/** The package's version, from its package.json (two levels up from src/cli and from dist/cli). */
export function packageVersion(): string {
  const text = readFileSync(new URL("../../package.json", import.meta.url), "utf8");
  const version = (JSON.parse(text) as { version?: unknown }).version;
  if (typeof version !== "string") throw new Error("package.json has no version");
  return version;
}

export function topLevelHelp(commands: readonly Subcommand[]): string {
  const width = Math.max(...commands.map((c) => c.name.length));
  const row = (name: string, text: string) => `  ${name.padEnd(width)}  ${text}`;
  // The gateway's help, without its usage line: ours says both ways to call sluice.
  const gateway = buildCommand()
    .helpInformation()
    .replace(/^Usage:[^\n]*\n\n/, "");
  return [
    "Usage: sluice [options]              run the gateway (its options below)",
    "       sluice <command> [options]    run a command",
    "       sluice help <command>         a command's usage and options",
    "       sluice --version              print the version",
    "",
    "Commands:",
    ...commands.map((c) => row(c.name, c.summary)),
    "",
    gateway,
  ].join("\n");
}
