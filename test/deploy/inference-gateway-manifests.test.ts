/**
 * The Kubernetes manifests of docs/kubernetes.md: deploy/sluice-behind-inference-gateway.yaml and
 * deploy/sluice-as-inference-gateway.yaml. Every document parses; the sluice containers' args and
 * SLUICE_* variables name real options; the ConfigMaps' gateway files load; the routes set the
 * headers and objectives sluice reads; KEDA's query names the series and pool sluice exports. And
 * the behind-the-gateway ConfigMap, given to a real `sluice` process in front of mock workers,
 * takes the tenant and the class from the headers the routes set.
 */
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, test } from "node:test";
import { parseAllDocuments, parse as parseYaml } from "yaml";
import { envOf, flagOf, OPTION_KEYS } from "../../src/config/gateway-option-table.js";
import { resolveGatewaySettings } from "../../src/config/resolve-gateway-settings.js";
import { FAIRNESS_ID_HEADER, OBJECTIVE_HEADER } from "../../src/gateway/tenancy/inference-gateway-headers.js";
import { FLOW_CONTROL_METRIC_NAMES } from "../../src/metrics/flow-control.js";
import { type MockWorker, startMockWorker } from "../../src/mock-worker/index.js";
import { exited, REPO_ROOT, startProcess } from "../helpers/cli-process.js";
import { chatBody, metric, parseScrape, sendTo, writeTempFile } from "../helpers/harness.js";
import { gatewayPort } from "./processes.js";

const BEHIND = join(REPO_ROOT, "deploy/sluice-behind-inference-gateway.yaml");
const AS_GATEWAY = join(REPO_ROOT, "deploy/sluice-as-inference-gateway.yaml");

// biome-ignore lint/suspicious/noExplicitAny: manifests are free-form documents
type Manifest = any;

function documents(path: string): Manifest[] {
  return parseAllDocuments(readFileSync(path, "utf8")).map((d) => {
    assert.deepEqual(d.errors, [], `${path}: a document does not parse`);
    return d.toJS() as Manifest;
  });
}

function ofKind(docs: Manifest[], kind: string): Manifest[] {
  return docs.filter((d) => d.kind === kind);
}

const FLAGS = new Set(OPTION_KEYS.map(flagOf));
/** SLUICE_* variables: the options', plus the admin token, which is only read from the environment. */
const ENV_NAMES = new Set([...OPTION_KEYS.map(envOf), "SLUICE_ADMIN_TOKEN"]);

function sluiceContainers(docs: Manifest[]): Manifest[] {
  return ofKind(docs, "Deployment")
    .flatMap((d) => d.spec.template.spec.containers)
    .filter((c: Manifest) => String(c.image).includes("/sluice:"));
}

/** The gateway file of the ConfigMap, with its priority file written beside it, as settings. */
async function configMapSettings(t: import("node:test").TestContext, docs: Manifest[]) {
  const [map] = ofKind(docs, "ConfigMap");
  const priorityPath = await writeTempFile(t, "priority.yaml", map.data["priority.yaml"]);
  const gateway = parseYaml(map.data["gateway.yaml"]) as Record<string, unknown>;
  gateway.priority_scheduler_config = priorityPath;
  const gatewayPath = await writeTempFile(t, "gateway.yaml", JSON.stringify(gateway));
  return {
    gateway,
    settings: resolveGatewaySettings({
      commandLine: { config: gatewayPath },
      // As the Deployment gives it, from its Secret.
      env: { SLUICE_ADMIN_TOKEN: "admin-token-from-the-secret" },
    }),
  };
}

describe("deploy/: the inference gateway manifests", () => {
  for (const path of [BEHIND, AS_GATEWAY]) {
    test(`${path.slice(REPO_ROOT.length)}: every document is a named object; sluice's args and variables are real`, () => {
      const docs = documents(path);
      assert.ok(docs.length >= 4);
      for (const d of docs) {
        assert.equal(typeof d.apiVersion, "string");
        assert.equal(typeof d.kind, "string");
        assert.equal(typeof d.metadata?.name, "string");
      }
      const containers = sluiceContainers(docs);
      assert.equal(containers.length, 1);
      for (const c of containers) {
        for (const arg of c.args as string[]) {
          const flag = arg.split("=")[0]!;
          assert.ok(FLAGS.has(flag), `${arg}: no such flag`);
        }
        for (const e of c.env as Array<{ name: string }>) {
          if (e.name.startsWith("SLUICE_")) assert.ok(ENV_NAMES.has(e.name), `${e.name}: no such variable`);
        }
        // The config the args name is the ConfigMap's file, mounted where they say.
        const config = (c.args as string[]).find((a) => a.startsWith("--config="))!.slice("--config=".length);
        const mount = c.volumeMounts.find((m: Manifest) => config.startsWith(`${m.mountPath}/`));
        assert.ok(mount, `${config} is on a mounted volume`);
      }
    });
  }

  test("behind a gateway: the headers are trusted, and the routes set them to objectives sluice lists", async (t) => {
    const docs = documents(BEHIND);
    const { settings } = await configMapSettings(t, docs);
    const trusted = settings.inferenceGateway;
    assert.ok(trusted, "inference_gateway_headers is on");
    const routes = ofKind(docs, "HTTPRoute");
    assert.ok(routes.length >= 2);
    for (const route of routes) {
      for (const rule of route.spec.rules) {
        const set = rule.filters.find((f: Manifest) => f.type === "RequestHeaderModifier")
          .requestHeaderModifier.set as Array<{ name: string; value: string }>;
        const byName = new Map(set.map((h) => [h.name, h.value]));
        // `set`, not `add`: the gateway replaces whatever a client sent.
        assert.ok(byName.has(FAIRNESS_ID_HEADER), `${route.metadata.name} sets the fairness id`);
        const objective = byName.get(OBJECTIVE_HEADER);
        assert.ok(
          objective !== undefined && trusted.objectives.has(objective),
          `${route.metadata.name}: ${objective}`,
        );
        for (const ref of rule.backendRefs) {
          assert.ok(
            ofKind(docs, "Service").some((s) => s.metadata.name === ref.name),
            `${ref.name} is a Service here`,
          );
        }
      }
    }
  });

  test("as the gateway: the headers are not trusted, and KEDA sums sluice's queue over its pool", async (t) => {
    const docs = documents(AS_GATEWAY);
    const { settings } = await configMapSettings(t, docs);
    assert.equal(settings.inferenceGateway, undefined);
    const [scaled] = ofKind(docs, "ScaledObject");
    const query = scaled.spec.triggers[0].metadata.query as string;
    assert.match(
      query,
      new RegExp(`^sum\\(${FLOW_CONTROL_METRIC_NAMES.queueSize}\\{inference_pool="([^"]+)"\\}\\)$`),
    );
    const pool = /inference_pool="([^"]+)"/.exec(query)![1];
    // A pool is named after its alphabetically first model.
    const models = [...new Set(settings.workers.flatMap((w) => w.models ?? []))].sort();
    assert.equal(pool, models[0]);
    // The scaled StatefulSet's pods are the workers sluice lists, up to the maximum.
    const target = ofKind(docs, "StatefulSet").find(
      (s) => s.metadata.name === scaled.spec.scaleTargetRef.name,
    );
    assert.ok(target);
    assert.equal(settings.workers.length, scaled.spec.maxReplicaCount);
  });

  test("behind a gateway, for real: the routes' headers pick the tenant and the class", async (t) => {
    const docs = documents(BEHIND);
    const [map] = ofKind(docs, "ConfigMap");
    const workers: MockWorker[] = [];
    t.after(() => Promise.all(workers.map((w) => w.close())));
    for (let i = 0; i < 2; i++) workers.push(await startMockWorker({ port: 0, maxRunningRequests: 64 }));
    const priorityPath = await writeTempFile(t, "priority.yaml", map.data["priority.yaml"]);
    const [gatewayDoc] = parseAllDocuments(map.data["gateway.yaml"]);
    assert.ok(gatewayDoc);
    gatewayDoc.set(
      "worker_urls",
      workers.map((w) => w.url),
    );
    gatewayDoc.set("host", "127.0.0.1");
    gatewayDoc.set("port", 0);
    gatewayDoc.set("priority_scheduler_config", priorityPath);
    gatewayDoc.delete("admin_host");
    gatewayDoc.delete("admin_port");
    const gatewayPath = await writeTempFile(t, "gateway.yaml", gatewayDoc.toString());
    const cli = join(REPO_ROOT, "src/cli/main.ts");
    const { child, out } = startProcess(
      process.execPath,
      ["--import", "tsx", cli, "--config", gatewayPath],
      REPO_ROOT,
    );
    t.after(async () => {
      child.kill("SIGKILL");
      await exited(child);
    });
    const base = `http://127.0.0.1:${await gatewayPort(child, out)}`;

    // What the batch route sends: objective batch (-10: bulk), fairness id nightly-etl.
    const batch = { [OBJECTIVE_HEADER]: "batch", [FAIRNESS_ID_HEADER]: "nightly-etl" };
    const reply = await sendTo(base, "/v1/chat/completions", {
      method: "POST",
      headers: batch,
      body: chatBody(),
    });
    assert.equal(reply.status, 200, reply.text);
    // The chat route's objective premium (100: interactive), under nightly-etl's max_class bulk.
    const capped = { [OBJECTIVE_HEADER]: "premium", [FAIRNESS_ID_HEADER]: "nightly-etl" };
    assert.equal(
      (await sendTo(base, "/v1/chat/completions", { method: "POST", headers: capped, body: chatBody() }))
        .status,
      200,
    );
    const s = parseScrape((await sendTo(base, "/metrics")).text);
    assert.match(s.text, /^sluice_admission_mode\{mode="scheduler"\} 1$/m);
    assert.equal(metric(s, "smg_scheduler_admit_total", { class: "bulk", outcome: "admitted" }), 2);
    assert.equal(
      metric(s, "smg_scheduler_clamp_total", {
        tenant: "fairness:nightly-etl",
        requested_class: "interactive",
        effective_class: "bulk",
      }),
      1,
    );
  });
});
