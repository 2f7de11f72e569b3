/**
 * `sluice simulate` end to end: byte-identical output for the same scenario and seed, the output
 * directory (report, summary, charts) written atomically, and scenario errors that name their key
 * and leave no output directory behind.
 */
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, test } from "node:test";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { loadScenario, simulate } from "../../src/sim/index.js";

const exec = promisify(execFile);
const repo = fileURLToPath(new URL("../../", import.meta.url));
const scenario = (name: string) => join(repo, "scenarios", `${name}.yaml`);
const dir = mkdtempSync(join(tmpdir(), "sluice-sim-"));
after(() => rmSync(dir, { recursive: true, force: true }));

async function cli(args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  try {
    const r = await exec(
      process.execPath,
      ["--import", "tsx", join(repo, "src/cli/main.ts"), "simulate", ...args],
      {
        cwd: repo,
        maxBuffer: 64 * 1024 * 1024,
      },
    );
    return { code: 0, stdout: r.stdout, stderr: r.stderr };
  } catch (err) {
    const e = err as { code: number; stdout: string; stderr: string };
    return { code: e.code, stdout: e.stdout, stderr: e.stderr };
  }
}

test("the same scenario and seed give byte-identical JSON; another seed gives other numbers", async () => {
  const opts = { durationSecs: 120 };
  const a = JSON.stringify(await simulate(loadScenario(scenario("bulk-flood"), opts)));
  const b = JSON.stringify(await simulate(loadScenario(scenario("bulk-flood"), opts)));
  assert.equal(a, b);
  const c = JSON.stringify(await simulate(loadScenario(scenario("bulk-flood"), { ...opts, seed: 2 })));
  assert.notEqual(a, c);
});

test("policies of one scenario see the same arrivals", async () => {
  const r = await simulate(loadScenario(scenario("noisy-neighbour"), { durationSecs: 60 }));
  const counts = (p: "fifo" | "strict" | "sluice") =>
    Object.values(r.policies[p]!.tenants).map((t) => t.requests);
  assert.deepEqual(counts("fifo"), counts("sluice"));
  assert.deepEqual(counts("strict"), counts("sluice"));
});

test("CLI: --json prints the same bytes as another run of the same scenario and seed; --out writes report, summary and charts", async () => {
  const args = [scenario("worker-failure"), "--duration", "2m", "--seed", "7"];
  const one = await cli([...args, "--json"]);
  assert.equal(one.code, 0, one.stderr);
  const again = await simulate(loadScenario(scenario("worker-failure"), { durationSecs: 120, seed: 7 }));
  assert.equal(one.stdout, `${JSON.stringify(again, null, 1)}\n`);
  const report = JSON.parse(one.stdout);
  assert.equal(report.scenario.seed, 7);
  assert.deepEqual(Object.keys(report.policies), ["fifo", "strict", "sluice"]);

  const out = join(dir, "out");
  const table = await cli([...args, "--out", out]);
  assert.equal(table.code, 0, table.stderr);
  assert.match(table.stdout, /policy\s+class\s+requests/);
  assert.equal(readFileSync(join(out, "report.json"), "utf8"), one.stdout);
  assert.equal(readFileSync(join(out, "summary.txt"), "utf8"), table.stdout);
  const charts = readdirSync(join(out, "charts")).sort();
  assert.deepEqual(charts, [
    "capacity.svg",
    "inflight.svg",
    "queue-wait.svg",
    "queued.svg",
    "shares-bulk.svg",
    "tokens.svg",
    "tpot.svg",
  ]);
  for (const c of charts) {
    const svg = readFileSync(join(out, "charts", c), "utf8");
    assert.match(svg, /^<svg xmlns="http:\/\/www.w3.org\/2000\/svg"/);
    assert.match(svg, /<\/svg>\n$/);
  }
  // Nothing but the output directory itself is left next to it.
  assert.deepEqual(readdirSync(dir), ["out"]);
});

test("CLI: a scenario error names the key, exits 2 and leaves no output directory", async () => {
  const bad = join(dir, "bad.yaml");
  writeFileSync(
    bad,
    readFileSync(scenario("bulk-flood"), "utf8").replace(
      "arrival: {process: poisson, rate: 0.5}",
      "arrival: {process: poisson, rate: 0}",
    ),
  );
  const out = join(dir, "bad-out");
  const r = await cli([bad, "--out", out]);
  assert.equal(r.code, 2);
  assert.equal(r.stderr, "sluice: bad.yaml: tenants.0.arrival.rate: must be > 0\n");
  assert.equal(existsSync(out), false);
  assert.equal(readdirSync(dir).filter((f) => f.includes("bad-out")).length, 0);

  const flag = await cli([scenario("bulk-flood"), "--policies", "fifo,lottery"]);
  assert.equal(flag.code, 2);
  assert.match(flag.stderr, /--policies <list>.*must be a comma-separated list of fifo, strict, sluice/);
});
