/**
 * Mock workers in a process of their own, for the soak: their event loop is not the gateway's, so
 * what they count (open requests, time above capacity) is not skewed by the gateway's load, and
 * the gateway process's memory is its own. Driven over IPC by test/soak/soak.ts: `stats`,
 * `restart` (index, downMs) and `close`. Exits when its parent goes away.
 */
import { type MockWorkerOptions, startMockWorker } from "../../src/mock-worker/index.js";

interface Command {
  id: number;
  cmd: "stats" | "restart" | "close";
  index?: number;
  downMs?: number;
}

const options = JSON.parse(process.env["SLUICE_SOAK_WORKERS"] ?? "[]") as MockWorkerOptions[];
const workers = await Promise.all(options.map((o) => startMockWorker(o)));
const send = (message: unknown, done?: () => void): void => {
  if (process.connected) process.send?.(message, undefined, {}, () => done?.());
};

process.on("message", (message: Command) => {
  const { id, cmd } = message;
  const run = async (): Promise<unknown> => {
    switch (cmd) {
      case "stats":
        return workers.map((w) => {
          const s = w.stats();
          delete s.lastRequestBody;
          delete s.lastRequestHeaders;
          return s;
        });
      case "restart":
        await workers[message.index ?? 0]!.restart({ downMs: message.downMs ?? 0 });
        return null;
      case "close":
        await Promise.all(workers.map((w) => w.close()));
        return null;
    }
  };
  run().then(
    (result) => send({ id, result }, cmd === "close" ? () => process.exit(0) : undefined),
    (err: unknown) => send({ id, error: String(err) }),
  );
});
process.on("disconnect", () => process.exit(0));
send({ type: "ready", workers: workers.map((w) => ({ url: w.url, port: w.port })) });
