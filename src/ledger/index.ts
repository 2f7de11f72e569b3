/**
 * The usage ledger: one `usage` row per request (the gateway's outcome record), stored in DuckDB
 * (embedded, the CLI's default), PostgreSQL (shared by replicas) or nowhere (off). docs/ledger.md.
 */
import type { Logger } from "pino";
import type { Registry } from "prom-client";
import { DuckDbSink } from "./duckdb.js";
import { PostgresSink } from "./postgres.js";
import type { LedgerSink } from "./sink.js";
import type { LedgerTarget } from "./target.js";
import { type LedgerOptions, LedgerWriter } from "./writer.js";

export { DuckDbSink } from "./duckdb.js";
export { PostgresSink } from "./postgres.js";
export { type LedgerRow, toLedgerRow, USAGE_COLUMNS } from "./row.js";
export { type LedgerSink, LedgerUnavailableError } from "./sink.js";
export {
  DEFAULT_LEDGER,
  DEFAULT_RETENTION_DAYS,
  describeTarget,
  type LedgerTarget,
  parseLedgerTarget,
} from "./target.js";
export {
  LEDGER_DEFAULTS,
  LEDGER_METRIC_NAMES,
  type LedgerOptions,
  type LedgerStats,
  LedgerWriter,
} from "./writer.js";

/** The sink a target names (undefined for `off`). */
function createSink(target: LedgerTarget): LedgerSink | undefined {
  switch (target.kind) {
    case "off":
      return undefined;
    case "duckdb":
      return new DuckDbSink(target.path);
    case "postgres":
      return new PostgresSink(target.url);
    case "sink":
      return target.sink;
  }
}

/**
 * A started ledger writer for these options, or undefined when there is no ledger (no options, or
 * `off`). Its metrics go into `registry`. It never throws for a sink that is down: it logs and retries.
 */
export function startLedger(
  options: LedgerOptions | undefined,
  logger: Logger,
  registry?: Registry,
): LedgerWriter | undefined {
  if (options === undefined) return undefined;
  const { target, ...settings } = options;
  const sink = createSink(target);
  if (sink === undefined) return undefined;
  const writer = new LedgerWriter(sink, settings, logger, registry);
  writer.start();
  return writer;
}
