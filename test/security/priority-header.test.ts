/**
 * Issue 35, item 4: `x-smg-priority` reaches the worker as the class the request was admitted
 * under (after the tenant's `max_class` clamp), never as the client sent it: SGLang's own scheduler
 * reads the header. The worker here records every request's headers; the requests go over raw
 * sockets so no client library adds or drops a header. Failed on 40ea629 (the worker saw `system`).
 */
import assert from "node:assert/strict";
import { createServer, type IncomingHttpHeaders } from "node:http";
import type { AddressInfo } from "node:net";
import { describe, type TestContext, test } from "node:test";
import { keyOf, smallSchedulerYaml, startFleet } from "../helpers/harness.js";
import { CHAT, rawChat, rawExchange } from "./raw.js";

/** An OpenAI-shaped worker that records the headers of every request it gets. */
async function recordingWorker(t: TestContext): Promise<{ url: string; seen: IncomingHttpHeaders[] }> {
  const seen: IncomingHttpHeaders[] = [];
  const server = createServer((req, res) => {
    if (req.method === "GET") {
      const models = req.url === "/v1/models";
      res.writeHead(models || req.url === "/health" ? 200 : 404, { "content-type": "application/json" });
      res.end(models ? '{"object":"list","data":[{"id":"mock-llm","object":"model"}]}' : "{}");
      return;
    }
    seen.push({ ...req.headers });
    req.resume();
    req.on("end", () => {
      const body = JSON.stringify({
        id: "x",
        object: "chat.completion",
        model: "mock-llm",
        choices: [{ index: 0, message: { role: "assistant", content: "ok" }, finish_reason: "stop" }],
        usage: { prompt_tokens: 3, completion_tokens: 1, total_tokens: 4 },
      });
      res.writeHead(200, { "content-type": "application/json", "content-length": Buffer.byteLength(body) });
      res.end(body);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  t.after(
    () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  );
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, seen };
}

const YAML = smallSchedulerYaml({
  tenant_policies: {
    "auth:capped": { max_class: "default" },
    "auth:ops": { max_class: "system" },
  },
});

describe("x-smg-priority forwarded as the effective class", () => {
  for (const mode of ["scheduler", "legacy"] as const) {
    test(`${mode} admission: the worker sees the class after the clamp, never the one asked for`, async (t) => {
      const worker = await recordingWorker(t);
      const fleet = await startFleet(t, {
        workers: [],
        extraWorkers: [{ url: worker.url, capacity: 4 }],
        schedulerYaml: YAML,
        tenants: ["capped", "ops"],
        priorityScheduler: { enabled: mode === "scheduler", defaultMaxClass: "interactive" },
      });
      assert.equal(fleet.gateway.admission.mode, mode);
      const auth = (tenant: string) => `Authorization: Bearer ${keyOf(tenant)}\r\n`;
      const cases: Array<{ headers: string; want: string; what: string }> = [
        {
          headers: `${auth("capped")}X-SMG-Priority: system\r\n`,
          want: "default",
          what: "capped asks system",
        },
        { headers: `${auth("capped")}x-smg-priority:  SYSTEM \r\n`, want: "default", what: "odd spelling" },
        { headers: `${auth("capped")}x-smg-priority: bulk\r\n`, want: "bulk", what: "below the ceiling" },
        { headers: auth("capped"), want: "default", what: "no header" },
        { headers: `${auth("capped")}x-smg-priority: urgent\r\n`, want: "default", what: "unknown value" },
        { headers: `${auth("ops")}x-smg-priority: system\r\n`, want: "system", what: "ops may ask system" },
        { headers: "x-smg-priority: system\r\n", want: "interactive", what: "anonymous: default ceiling" },
        {
          headers: `${auth("capped")}x-smg-priority: system\r\nx-smg-priority: system\r\n`,
          want: "default",
          what: "the header twice",
        },
      ];
      for (const c of cases) {
        const before = worker.seen.length;
        const r = await rawExchange(fleet.gateway.port, rawChat(CHAT, c.headers));
        assert.equal(r.responses[0]?.status, 200, `${c.what}: ${r.raw.slice(0, 300)}`);
        assert.equal(worker.seen.length, before + 1, c.what);
        assert.equal(worker.seen[before]!["x-smg-priority"], c.want, c.what);
      }
    });
  }
});
