/**
 * deploy/sluice-replicas.yaml runs the priority scheduler for real: its ConfigMap's gateway file and
 * priority YAML, given to a real `sluice` process in front of the fleet the manifest is sized for
 * (two workers reporting 64 running requests, the fallback of a worker that reports none) and to
 * Redis as its replicas are, start the gateway in scheduler mode. Classes whose reservations exceed
 * the fleet's capacity would start it in legacy admission instead, with a log line and no error.
 */
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { parseAllDocuments } from "yaml";
import { type MockWorker, startMockWorker } from "../../src/mock-worker/index.js";
import { redisOrSkip, statePrefix } from "../admission/services.js";
import { exited, REPO_ROOT, startProcess } from "../helpers/cli-process.js";
import { sendTo, writeTempFile } from "../helpers/harness.js";
import { gatewayPort } from "./processes.js";

const MANIFEST = join(REPO_ROOT, "deploy/sluice-replicas.yaml");
const WORKER_SLOTS = 64;

interface ConfigMap {
  kind: string;
  metadata: { name: string };
  data: Record<string, string>;
}

/** The manifest's ConfigMap named `sluice`, whose files the gateway mounts at /etc/sluice. */
function manifestConfigMap(): ConfigMap {
  const docs = parseAllDocuments(readFileSync(MANIFEST, "utf8")).map((d) => d.toJS() as ConfigMap);
  const map = docs.find((d) => d?.kind === "ConfigMap" && d.metadata.name === "sluice");
  assert.ok(map, `${MANIFEST} has no ConfigMap named sluice`);
  return map;
}

test("the manifest's ConfigMap starts the gateway in scheduler mode on the fleet it is sized for", async (t) => {
  const redis = await redisOrSkip(t);
  if (redis === undefined) return;
  const { data } = manifestConfigMap();
  const gatewayYaml = data["gateway.yaml"];
  const priorityYaml = data["priority.yaml"];
  assert.ok(gatewayYaml && priorityYaml, "the ConfigMap holds gateway.yaml and priority.yaml");
  assert.match(priorityYaml, /^classes:/m, "priority.yaml sizes the classes for the fleet");

  const workers: MockWorker[] = [];
  t.after(() => Promise.all(workers.map((w) => w.close())));
  for (let i = 0; i < 2; i++) {
    workers.push(await startMockWorker({ port: 0, maxRunningRequests: WORKER_SLOTS }));
  }
  const priorityPath = await writeTempFile(t, "priority.yaml", priorityYaml);
  const [gatewayDoc] = parseAllDocuments(gatewayYaml);
  assert.ok(gatewayDoc);
  // Only what ties the file to the cluster changes: the workers, this machine's loopback and a free
  // port, the mounted priority file, a key prefix of this test's own. The admin listener (it needs
  // the token Secret) is not under test.
  gatewayDoc.set(
    "worker_urls",
    workers.map((w) => w.url),
  );
  gatewayDoc.set("host", "127.0.0.1");
  gatewayDoc.set("port", 0);
  gatewayDoc.set("priority_scheduler_config", priorityPath);
  gatewayDoc.set("state_key_prefix", statePrefix(t, redis));
  gatewayDoc.delete("admin_host");
  gatewayDoc.delete("admin_port");
  const gatewayPath = await writeTempFile(t, "gateway.yaml", gatewayDoc.toString());

  // As the Deployment runs it: the file, then the Redis URL and the replica id on the command line.
  const cli = join(REPO_ROOT, "src/cli/main.ts");
  const args = ["--config", gatewayPath, "--state-url", redis, "--replica-id", "deploy-test"];
  const { child, out } = startProcess(process.execPath, ["--import", "tsx", cli, ...args], REPO_ROOT);
  t.after(async () => {
    child.kill("SIGKILL");
    await exited(child);
  });
  const port = await gatewayPort(child, out);
  const metrics = await sendTo(`http://127.0.0.1:${port}`, "/metrics");
  assert.equal(metrics.status, 200);

  assert.doesNotMatch(out.stdout + out.stderr, /falling back to legacy admission/);
  assert.match(metrics.text, /^sluice_admission_mode\{mode="scheduler"\} 1$/m);
  assert.match(metrics.text, /^sluice_capacity \d+$/m);
  const capacity = Number(/^sluice_capacity (\d+)$/m.exec(metrics.text)![1]);
  assert.equal(capacity, 2 * WORKER_SLOTS, "the capacity the two workers report");
  assert.match(metrics.text, /^smg_scheduler_inflight\{[^}]*class="interactive"[^}]*\} 0$/m);
});
