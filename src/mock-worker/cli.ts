/**
 * `sluice mock-worker`: runs the mock worker from the command line until SIGINT/SIGTERM.
 */

import { realpathSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { Command, InvalidArgumentError } from "commander";
import { ENGINES, type Engine } from "./engine-view.js";
import { startMockWorker } from "./server.js";

function nonNegative(value: string): number {
  const n = Number(value);
  if (value.trim() === "" || !Number.isFinite(n) || n < 0) {
    throw new InvalidArgumentError("expected a non-negative number");
  }
  return n;
}

function integer(min: number): (value: string) => number {
  return (value) => {
    const n = Number(value);
    if (value.trim() === "" || !Number.isInteger(n) || n < min) {
      throw new InvalidArgumentError(`expected an integer >= ${min}`);
    }
    return n;
  };
}

function engine(value: string): Engine {
  const found = ENGINES.find((e) => e === value);
  if (found === undefined) throw new InvalidArgumentError(`expected one of ${ENGINES.join(", ")}`);
  return found;
}

interface CliOptions {
  port: number;
  host: string;
  engine?: Engine;
  kvTokens?: number;
  blockSize?: number;
  maxRunningRequests?: number;
  ttftMs: number;
  tokenDelayMs: number;
  batchSlowdown: number;
  knee: number;
  kneeSlowdown: number;
  defaultMaxTokens: number;
  streamInterval: number;
  model: string;
  strictModels: boolean;
  reportCapacity: boolean;
  reportStreamInterval: boolean;
  usage: boolean;
  reportedCapacity?: unknown;
  contextLength: number;
  prefixCacheTokens: number;
  prefillMsPerToken: number;
}

/** A JSON value when the text parses as one (`0`, `-5`, `1e12`, `null`), else the text itself (`lots`). */
function jsonOrText(value: string): unknown {
  try {
    return JSON.parse(value);
  } catch {
    return value;
  }
}

/** The `mock-worker` sub-command: its flags (docs/mock-worker.md lists each one) and defaults. */
export function mockWorkerCommand(): Command {
  return (
    new Command("sluice mock-worker")
      .description("Simulated OpenAI/SGLang-compatible inference worker (no GPU)")
      // Not 30000, the gateway's default: a worker and a gateway started with defaults both listen.
      .option("--port <port>", "port to listen on (0 = ephemeral)", integer(0), 8000)
      .option("--host <host>", "address to bind", "127.0.0.1")
      .option(
        "--engine <name>",
        "serve this engine's own signals too: vllm (/metrics, max_model_len, no /get_server_info) or sglang (/metrics, max_total_num_tokens); turns the KV model on",
        engine,
      )
      .option(
        "--max-running-requests <n>",
        "concurrent generations; more wait in a FIFO (default 64, 256 with --engine vllm)",
        integer(1),
      )
      .option(
        "--kv-tokens <n>",
        "KV cache capacity in tokens: requests wait when their prompt does not fit, the newest running one is preempted when growth does not",
        integer(1),
      )
      .option(
        "--block-size <n>",
        "tokens per KV block (vLLM's --block-size; default 16 with --engine vllm, else 1)",
        integer(1),
      )
      .option("--ttft-ms <ms>", "base time to first token", nonNegative, 20)
      .option("--token-delay-ms <ms>", "base inter-token delay", nonNegative, 5)
      .option("--batch-slowdown <fraction>", "delay added per extra running request", nonNegative, 0.02)
      .option("--knee <n>", "concurrency past which delays rise steeply (0 = none)", integer(0), 0)
      .option(
        "--knee-slowdown <fraction>",
        "delay multiplier added per running request past the knee",
        nonNegative,
        0.5,
      )
      .option(
        "--stream-interval <n>",
        "output tokens per streamed event (as SGLang's flag; speculative decoding also sends several)",
        integer(1),
        1,
      )
      .option("--default-max-tokens <n>", "output length when a request sets none", integer(0), 16)
      .option(
        "--model <names>",
        "model to serve; comma-separated for several (aliases, LoRA adapters), listed at /v1/models",
        "mock-llm",
      )
      .option(
        "--strict-models",
        "answer 404 model_not_found to a request for a model not served (as vLLM does)",
      )
      .option("--no-report-capacity", "omit max_running_requests from /get_server_info")
      .option(
        "--no-usage",
        "never report usage: no usage chunk in streams (stream_options ignored), none in answers",
      )
      .option(
        "--no-report-stream-interval",
        "omit stream_interval from /get_server_info (several tokens an event, as speculative decoding sends, unannounced)",
      )
      .option(
        "--reported-capacity <value>",
        "report this max_running_requests at /get_server_info, valid or not (JSON, else a string)",
        jsonOrText,
      )
      .option(
        "--context-length <n>",
        "prompt + output tokens beyond this are refused (400)",
        integer(1),
        131072,
      )
      .option(
        "--prefix-cache-tokens <n>",
        "prefix cache size in tokens (LRU of 16-token blocks; 0 = none): TTFT grows with the uncached prompt tokens",
        integer(0),
        0,
      )
      .option(
        "--prefill-ms-per-token <ms>",
        "with a prefix cache: prefill time per uncached prompt token, added to the TTFT",
        nonNegative,
        0.05,
      )
  );
}

/**
 * Parses the sub-command's own arguments (no node/script prefix, e.g. `["--port", "8001"]`),
 * starts the worker, prints its address and resolves once a signal has closed it.
 */
export async function runMockWorkerCli(argv: string[]): Promise<void> {
  const program = mockWorkerCommand();
  await program.parseAsync(argv, { from: "user" });
  const opts = program.opts<CliOptions>();
  const models = opts.model
    .split(",")
    .map((m) => m.trim())
    .filter((m) => m !== "");
  if (models.length === 0) throw new InvalidArgumentError("--model: name at least one model");

  const worker = await startMockWorker({
    port: opts.port,
    host: opts.host,
    ...(opts.engine !== undefined ? { engine: opts.engine } : {}),
    ...(opts.kvTokens !== undefined ? { kvTokens: opts.kvTokens } : {}),
    ...(opts.blockSize !== undefined ? { kvBlockSize: opts.blockSize } : {}),
    ...(opts.maxRunningRequests !== undefined ? { maxRunningRequests: opts.maxRunningRequests } : {}),
    ttftMs: opts.ttftMs,
    tokenDelayMs: opts.tokenDelayMs,
    batchSlowdown: opts.batchSlowdown,
    knee: opts.knee,
    kneeSlowdown: opts.kneeSlowdown,
    defaultMaxTokens: opts.defaultMaxTokens,
    streamInterval: opts.streamInterval,
    model: models[0]!,
    servedModels: models,
    strictModels: opts.strictModels === true,
    reportCapacity: opts.reportCapacity,
    reportStreamInterval: opts.reportStreamInterval,
    reportUsage: opts.usage,
    reportedCapacity: opts.reportedCapacity,
    contextLength: opts.contextLength,
    prefixCacheTokens: opts.prefixCacheTokens,
    prefillMsPerToken: opts.prefillMsPerToken,
  });
  const stats = worker.stats();
  const kv = stats.kv === undefined ? "" : `, kv_tokens=${stats.kv.capacityTokens}`;
  const imitating = opts.engine === undefined ? "" : `, engine=${opts.engine}`;
  process.stdout.write(
    `mock worker listening on ${worker.url} (max_running_requests=${stats.maxRunningRequests}${kv}${imitating})\n`,
  );

  await new Promise<void>((resolve) => {
    const stop = (): void => {
      process.off("SIGINT", stop);
      process.off("SIGTERM", stop);
      resolve();
    };
    process.on("SIGINT", stop);
    process.on("SIGTERM", stop);
  });
  await worker.close();
}

// Runnable on its own too: `node --import tsx src/mock-worker/cli.ts --port 8001`.
function isMain(): boolean {
  const entry = process.argv[1];
  if (entry === undefined) return false;
  try {
    return realpathSync(entry) === realpathSync(fileURLToPath(import.meta.url));
  } catch {
    return false;
  }
}

if (isMain()) {
  runMockWorkerCli(process.argv.slice(2)).catch((err: unknown) => {
    process.stderr.write(`${err instanceof Error ? err.message : String(err)}\n`);
    process.exitCode = 1;
  });
}
