/**
 * The two ways sluice ships, each built from a clean copy of the repository with npm's cache only
 * (never the registry):
 *
 * - the Dockerfile: scripts/dockerfile-steps.sh runs its stages as plain commands (the build stage
 *   with dev dependencies, the runtime stage with production dependencies only) and starts the
 *   image in front of a mock worker until the image's own HEALTHCHECK passes and /health answers;
 * - the npm package: `npm pack` of that build stage (the scheduler workspace bundled), installed
 *   with production dependencies only, runs `sluice --version` and serves /health in front of its
 *   own `sluice mock-worker`.
 *
 * Slow (two npm installs and a TypeScript build, 2-4 minutes on a busy 2-core machine), so it runs
 * once per CI run: on the machine's Node, not again on the pinned lines of scripts/node-lines.lock.
 */
import assert from "node:assert/strict";
import type { ChildProcess } from "node:child_process";
import { existsSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { mkdir, mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { exited, REPO_ROOT, type Run, startProcess } from "../helpers/cli-process.js";
import { sendTo } from "../helpers/harness.js";
import { consumerLock, type PackageLock, type PackedManifest } from "./consumer-lock.js";
import { gatewayPort, printed, run } from "./processes.js";

const TOOLS_DIR = process.env.SLUICE_TOOLS_DIR ?? join(REPO_ROOT, ".tools");
const PINNED_LINE = process.execPath.startsWith(TOOLS_DIR);
const SKIP = PINNED_LINE
  ? `runs once, on the machine's Node (this is ${process.version} from ${TOOLS_DIR})`
  : false;
const SLOW_MS = 10 * 60_000;

function assertRan(what: string, r: Run): void {
  assert.equal(r.code, 0, `${what} exited ${r.code}\n--- stdout\n${r.stdout}\n--- stderr\n${r.stderr}`);
}

let workDir = "";
let steps: Run | undefined;
const started: ChildProcess[] = [];

before(
  async () => {
    if (SKIP) return;
    workDir = await mkdtemp(join(tmpdir(), "sluice-deploy-"));
    const script = join(REPO_ROOT, "scripts/dockerfile-steps.sh");
    steps = await run("bash", [script, "--offline", "--dir", workDir], REPO_ROOT);
  },
  { timeout: SLOW_MS },
);

after(async () => {
  for (const child of started) child.kill("SIGKILL");
  await Promise.all(started.map((c) => exited(c)));
  if (workDir) await rm(workDir, { recursive: true, force: true });
});

test("the Dockerfile's steps build an image that serves /health", { skip: SKIP, timeout: SLOW_MS }, () => {
  assert.ok(steps);
  assertRan("scripts/dockerfile-steps.sh", steps);
  assert.match(steps.stdout, /^serves \/health: 200 /m);
  const app = join(workDir, "stages/runtime/app");
  assert.ok(existsSync(join(app, "node_modules/@sluice/scheduler/dist/index.js")), "the scheduler is built");
  for (const dev of ["typescript", "tsx", "@biomejs/biome"]) {
    assert.ok(
      !existsSync(join(app, "node_modules", dev)),
      `the runtime stage holds no dev dependency (${dev})`,
    );
  }
});

test("the packed package, installed with production dependencies only, runs the gateway", {
  skip: SKIP,
  timeout: SLOW_MS,
}, async () => {
  assert.ok(steps?.code === 0, "the build stage is there (the Dockerfile's steps ran)");
  const build = join(workDir, "stages/build/src");
  // The build stage's own npm cache: a copy of this machine's, which this test leaves untouched.
  const env = {
    ...process.env,
    npm_config_cache: join(workDir, "stages/build/root/.npm"),
    npm_config_offline: "true",
  };
  const packDir = join(workDir, "pack");
  await mkdir(packDir);
  assertRan(
    "npm pack",
    await run("npm", ["pack", "--ignore-scripts", "--pack-destination", packDir], build, env),
  );
  const [tarball] = readdirSync(packDir).filter((f) => f.endsWith(".tgz"));
  assert.ok(tarball, `npm pack wrote a tarball in ${packDir}`);
  const packed = JSON.parse(readFileSync(join(build, "package.json"), "utf8")) as PackedManifest;
  const listing = await run("tar", ["tzf", join(packDir, tarball)], packDir);
  assertRan("tar tzf", listing);
  assert.match(listing.stdout, /^package\/node_modules\/@sluice\/scheduler\/dist\/index\.js$/m, "bundled");
  assert.match(listing.stdout, /^package\/LICENSE$/m);

  const consumer = join(workDir, "consumer");
  await mkdir(consumer);
  const name = "sluice-install-check";
  const repoLock = JSON.parse(readFileSync(join(REPO_ROOT, "package-lock.json"), "utf8")) as PackageLock;
  const tarballPath = join(packDir, tarball);
  const lock = consumerLock(repoLock, packed, tarballPath, name);
  writeFileSync(join(consumer, "package-lock.json"), `${JSON.stringify(lock, null, 2)}\n`);
  writeFileSync(
    join(consumer, "package.json"),
    `${JSON.stringify({ name, private: true, dependencies: { [packed.name]: `file:${tarballPath}` } }, null, 2)}\n`,
  );
  assertRan(
    "npm ci --omit=dev",
    await run("npm", ["ci", "--omit=dev", "--no-audit", "--no-fund"], consumer, env),
  );
  const modules = join(consumer, "node_modules");
  assert.ok(existsSync(join(modules, "sluice/node_modules/@sluice/scheduler/dist/index.js")));
  for (const dev of ["typescript", "tsx", "@biomejs/biome"]) {
    assert.ok(!existsSync(join(modules, dev)), `no dev dependency installed (${dev})`);
  }
  const sluice = join(modules, ".bin/sluice");

  const version = await run(sluice, ["--version"], consumer);
  assertRan("sluice --version", version);
  assert.equal(version.stdout.trim(), `sluice ${packed.version}`);
  const help = await run(sluice, ["--help"], consumer);
  assertRan("sluice --help", help);
  assert.match(help.stdout, /^Usage: sluice/m);

  const worker = startProcess(sluice, ["mock-worker", "--port", "0"], consumer);
  started.push(worker.child);
  const workerUrl = await printed(
    worker.child,
    worker.out,
    /listening on (http:\/\/\S+)/,
    "the mock worker printed its address",
  );
  // The default ledger (DuckDB, in the working directory) exercises the native dependency too.
  const gateway = startProcess(sluice, ["--worker-urls", workerUrl, "--port", "0"], consumer);
  started.push(gateway.child);
  const port = await gatewayPort(gateway.child, gateway.out);
  const health = await sendTo(`http://127.0.0.1:${port}`, "/health");
  assert.equal(health.status, 200, health.text);
});
