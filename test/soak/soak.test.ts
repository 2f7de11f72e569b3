/**
 * The soak in CI: test/soak/soak.ts's scenario for SLUICE_SOAK_SECS seconds (default 60), with the
 * same checks as `npm run soak -- --minutes 30`. SLUICE_SOAK_SEED replays a seed.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { checkSoak, formatSoak, runSoak } from "./soak.js";

const SECS = Number(process.env["SLUICE_SOAK_SECS"] ?? 60);
const SEED = process.env["SLUICE_SOAK_SEED"]
  ? Number(process.env["SLUICE_SOAK_SEED"])
  : Date.now() % 2_147_483_647;
/** The load, then at most 45 s of drain, and the checks. */
const TIMEOUT_MS = SECS * 1000 + 120_000;

test(`soak: ${SECS} s at 3x overload, aborts, preemptions, a worker restart (seed ${SEED})`, {
  timeout: TIMEOUT_MS,
}, async (t) => {
  const report = await runSoak({ durationMs: SECS * 1000, seed: SEED, log: (line) => t.diagnostic(line) });
  for (const line of formatSoak(report).split("\n")) t.diagnostic(line);
  // RSS is checked on the machine's Node (20) and in the long soak; see checkSoak.
  const major = Number(process.versions.node.split(".")[0]);
  const failures = checkSoak(report, { rss: major <= 20 || process.env["SLUICE_SOAK_RSS"] === "1" });
  assert.deepEqual(
    failures,
    [],
    `soak checks failed (replay with SLUICE_SOAK_SEED=${SEED}):\n${failures.join("\n")}`,
  );
});
