/**
 * Each simulator profile against the published measurement it cites (src/sim/calibration.ts): the
 * simulator runs the measured requests on the profile's worker, and either reproduces the
 * published mean TTFT and TPOT within 15% or the docs print the miss. The figures docs/simulate.md
 * prints are checked against a fresh run, so the table cannot go stale.
 */
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";
import {
  CALIBRATION_TOLERANCE,
  PROFILE_CALIBRATIONS,
  profileForRun,
  relativeError,
  simulateRun,
  withinTolerance,
} from "../../src/sim/calibration.js";
import { PROFILE_NAMES, WORKER_PROFILES } from "../../src/sim/profiles.js";

const DOC = readFileSync(new URL("../../docs/simulate.md", import.meta.url), "utf8");

/** The cells of the calibration table's row for `profile` (Profile | source | workload | published | simulated | within). */
function docRow(profile: string): string[] {
  const start = DOC.indexOf("| Profile | Source | Workload |");
  assert.ok(start >= 0, "docs/simulate.md has no calibration table");
  const table = DOC.slice(start, DOC.indexOf("\n\n", start));
  const line = table.split("\n").find((l) => l.startsWith(`| \`${profile}\` |`));
  assert.ok(line, `the calibration table has no row for ${profile}`);
  return line
    .slice(1, -1)
    .split("|")
    .map((c) => c.trim());
}

const pct = (x: number) => `${x >= 0 ? "+" : "−"}${Math.round(Math.abs(x) * 100)}%`;

test("the run driver: one request at a time, then two at once, against the toy worker's steps by hand", () => {
  const toy = WORKER_PROFILES.toy!;
  const requests = [
    { prompt: 100, output: 3 },
    { prompt: 100, output: 3 },
  ];
  // One at a time: prefill 5 ms + 100 x 0.02 ms = 7 ms, then two decode steps of 5 + 0.04 ms.
  const serial = simulateRun(toy, requests, 1);
  assert.ok(Math.abs(serial.ttftMs - 7) < 1e-9, `ttft ${serial.ttftMs}`);
  assert.ok(Math.abs(serial.tpotMs - 5.04) < 1e-9, `tpot ${serial.tpotMs}`);
  assert.ok(Math.abs(serial.itlMs - 5.04) < 1e-9, `itl ${serial.itlMs}`);
  // Both at once: the first submitted starts an iteration alone (7 ms); the second joins the next
  // one with the first's decode (5 + 2 + 0.04 = 7.04 ms, first token at 14.04); then one shared
  // decode step (5.08 ms, the first is done at 19.12) and the second's last alone (5.04 ms).
  const together = simulateRun(toy, requests, 2);
  assert.ok(Math.abs(together.ttftMs - (7 + 14.04) / 2) < 1e-9, `ttft ${together.ttftMs}`);
  const tpot = ((19.12 - 7) / 2 + (24.16 - 14.04) / 2) / 2;
  assert.ok(Math.abs(together.tpotMs - tpot) < 1e-9, `tpot ${together.tpotMs}`);
});

test("the run driver refuses a run it cannot do", () => {
  const toy = WORKER_PROFILES.toy!;
  assert.throws(() => simulateRun(toy, [], 1), /no requests/);
  assert.throws(() => simulateRun(toy, [{ prompt: 1, output: 1 }], 0), /concurrency/);
  assert.throws(() => simulateRun(toy, [{ prompt: 40_000, output: 1 }], 1), /context_length/);
});

test("the run driver agrees with the docs' stated-load table, one request at a time", () => {
  // The stated-load table: 1,000 prompt and 200 output tokens, one request at a time.
  const start = DOC.indexOf("| Profile | 1 request at a time | 32 at a time |");
  assert.ok(start >= 0, "docs/simulate.md has no stated-load table");
  const rows = DOC.slice(start, DOC.indexOf("\n\n", start)).split("\n").slice(2);
  assert.equal(rows.length, PROFILE_CALIBRATIONS.length);
  for (const row of rows) {
    const [, name, one] = row.split("|").map((c) => c.trim());
    const [ttft, tpot] = one!.split(" / ").map(Number);
    const profile = WORKER_PROFILES[name!.replaceAll("`", "")]!;
    const sim = simulateRun(
      profile,
      Array.from({ length: 5 }, () => ({ prompt: 1000, output: 200 })),
      1,
    );
    // Printed to 0.1 ms (TTFT) and 0.01 ms (TPOT): equal within half of the last digit.
    assert.ok(Math.abs(sim.ttftMs - ttft!) <= 0.05, `${name}: ttft ${sim.ttftMs} vs ${ttft}`);
    assert.ok(Math.abs(sim.tpotMs - tpot!) <= 0.005, `${name}: tpot ${sim.tpotMs} vs ${tpot}`);
  }
});

test("every named profile but the toy has a calibration entry and a row in the docs", () => {
  const real = PROFILE_NAMES.filter((n) => n !== "toy");
  assert.deepEqual(PROFILE_CALIBRATIONS.map((c) => c.profile).sort(), [...real].sort());
  for (const c of PROFILE_CALIBRATIONS) {
    const row = docRow(c.profile);
    assert.equal(row.length, 6, `${c.profile}: ${row.join(" | ")}`);
    if (c.measurement === undefined) {
      assert.ok(c.searched.length > 0, `${c.profile} names no searched source`);
      assert.equal(row[3], "none found", c.profile);
      assert.equal(row[5], "not checked", c.profile);
    }
  }
});

for (const c of PROFILE_CALIBRATIONS) {
  const m = c.measurement;
  if (m === undefined) continue;
  test(`${c.profile} against ${m.engine} on ${m.hardware}: within ${CALIBRATION_TOLERANCE * 100}% or the docs print the miss`, () => {
    const sim = simulateRun(profileForRun(c.profile, m), m.requests, m.concurrency);
    const pub = m.published;
    const ttftErr = relativeError(sim.ttftMs, pub.ttftMs);
    const tpotErr = relativeError(sim.tpotMs, pub.tpotMs);
    const row = docRow(c.profile);
    assert.equal(row[3], `${pub.ttftMs.toFixed(2)} / ${pub.tpotMs.toFixed(2)}`, "published figures");
    assert.equal(row[4], `${sim.ttftMs.toFixed(2)} / ${sim.tpotMs.toFixed(2)}`, "simulated figures");
    if (withinTolerance(sim, pub)) {
      assert.ok(Math.abs(ttftErr) <= CALIBRATION_TOLERANCE && Math.abs(tpotErr) <= CALIBRATION_TOLERANCE);
      assert.equal(row[5], `yes (TTFT ${pct(ttftErr)}, TPOT ${pct(tpotErr)})`);
    } else {
      assert.equal(row[5], `no: TTFT ${pct(ttftErr)}, TPOT ${pct(tpotErr)}`);
    }
  });
}
