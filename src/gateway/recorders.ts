/**
 * What the gateway records besides metrics: the usage ledger (docs/ledger.md), written in the
 * background, and OpenTelemetry traces (docs/tracing.md); and the one outcome sink every finished
 * request is recorded to.
 */
import type { OutcomeSink } from "../contracts/outcome.js";
import { startLedger } from "../ledger/index.js";
import type { LedgerWriter } from "../ledger/writer.js";
import type { SluiceMetrics } from "../metrics/index.js";
import type { GatewayTracing } from "../tracing/setup.js";
import type { GatewayOptions } from "./options.js";
import type { ShutdownList } from "./shutdown.js";

export interface Recorders {
  /** The usage ledger's writer, when `options.ledger` names one. */
  readonly ledger: LedgerWriter | undefined;
  /** Tracing, when `options.otlpEndpoint` is set. */
  readonly tracing: GatewayTracing | undefined;
}

export async function startRecorders(
  options: GatewayOptions,
  metrics: SluiceMetrics,
  stops: ShutdownList,
): Promise<Recorders> {
  const ledger = startLedger(options.ledger, options.logger, metrics.registry);
  if (ledger !== undefined) stops.add("ledger", () => ledger.close());
  // Loaded only when on: with tracing off the OpenTelemetry SDK is never imported (nor the metrics
  // SDK with metrics off).
  const tracing =
    options.otlpEndpoint === undefined
      ? undefined
      : await (await import("../tracing/setup.js")).GatewayTracing.start({
          endpoint: options.otlpEndpoint,
          metrics: options.otlpMetrics,
        });
  if (tracing !== undefined) stops.add("tracing", () => tracing.shutdown());
  return { ledger, tracing };
}

/** One sink recording to each given sink, in order; undefined when none is given. */
export function fanOut(sinks: ReadonlyArray<OutcomeSink | undefined>): OutcomeSink | undefined {
  const given = sinks.filter((s): s is OutcomeSink => s !== undefined);
  if (given.length <= 1) return given[0];
  return {
    record(outcome) {
      for (const sink of given) sink.record(outcome);
    },
  };
}
