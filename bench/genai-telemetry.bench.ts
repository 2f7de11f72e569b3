/**
 * What GenAI telemetry costs per request, in CPU: the request's span set driven in a loop (a chat
 * request, its upstream call, a JSON answer read for its model and finish reasons), with traces
 * only, then with GenAI metrics too, both exporting to a loopback sink that counts what it gets.
 *
 *   node --import tsx bench/genai-telemetry.bench.ts [requests]
 */
import { createServer, type IncomingMessage } from "node:http";
import type { AddressInfo } from "node:net";
import type { OutcomeRecord } from "../src/contracts/outcome.js";
import { GatewayTracing } from "../src/tracing/setup.js";

const REQUESTS = Number(process.argv[2] ?? 5000);
const ANSWER = Buffer.from(
  JSON.stringify({
    id: "chatcmpl-1",
    object: "chat.completion",
    model: "llama-3-8b",
    choices: [
      { index: 0, message: { role: "assistant", content: "word ".repeat(64) }, finish_reason: "stop" },
    ],
    usage: { prompt_tokens: 40, completion_tokens: 64, total_tokens: 104 },
  }),
);

let posted = 0;
const sink = createServer((req, res) => {
  req.resume();
  req.on("end", () => {
    posted++;
    res.writeHead(200, { "content-type": "application/json" }).end("{}");
  });
});
await new Promise<void>((resolve) => sink.listen(0, "127.0.0.1", resolve));
const endpoint = `http://127.0.0.1:${(sink.address() as AddressInfo).port}`;

const req = { method: "POST", url: "/v1/chat/completions", headers: {} } as unknown as IncomingMessage;
const ask = { model: "llama-3-8b", json: { model: "llama-3-8b", max_tokens: 64 } };

function record(i: number): OutcomeRecord {
  return {
    tsMs: Date.now(),
    requestId: `r${i}`,
    tenantId: "auth:acme",
    model: "llama-3-8b",
    requestedClass: "interactive",
    effectiveClass: "interactive",
    admission: "fast",
    outcome: "ok",
    status: 200,
    errorCode: undefined,
    queueWaitMs: 0.2,
    ttftMs: 120,
    durationMs: 900,
    estimatedTokens: 104,
    inputTokens: 40,
    outputTokens: 64,
    tokenSource: "reported",
    costUsd: undefined,
    worker: "http://10.0.0.1:8000",
  };
}

async function run(metrics: boolean): Promise<number> {
  const tracing = await GatewayTracing.start({ endpoint, metrics });
  const before = process.cpuUsage();
  for (let i = 0; i < REQUESTS; i++) {
    const spans = tracing.startRequest(req, `r${i}`);
    spans.queueStarted();
    spans.admitted("fast");
    spans.attemptStarted(
      "http://10.0.0.1:8000",
      { method: "POST", path: "/v1/chat/completions" },
      ask,
      "vllm",
    );
    const watch = spans.watchAnswer("application/json", undefined)!;
    spans.firstByte();
    watch.transform(ANSWER);
    spans.exchangeDone(200, { inputTokens: 40, outputTokens: 64 });
    spans.ended(record(i), "llama-3-8b");
    // Let the batch processor export as it would between requests.
    if (i % 256 === 255) await new Promise((resolve) => setImmediate(resolve));
  }
  await tracing.shutdown();
  const used = process.cpuUsage(before);
  return (used.user + used.system) / REQUESTS;
}

// One warm-up of each, then the measured rounds.
await run(false);
await run(true);
const tracesOnly: number[] = [];
const withMetrics: number[] = [];
for (let round = 0; round < 3; round++) {
  tracesOnly.push(await run(false));
  withMetrics.push(await run(true));
}
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
console.log(`requests per round: ${REQUESTS}, posts received: ${posted}`);
console.log(
  `traces only:           ${median(tracesOnly).toFixed(1)} µs CPU per request (${tracesOnly.map((x) => x.toFixed(1)).join(", ")})`,
);
console.log(
  `traces + GenAI metrics: ${median(withMetrics).toFixed(1)} µs CPU per request (${withMetrics.map((x) => x.toFixed(1)).join(", ")})`,
);
sink.close();
