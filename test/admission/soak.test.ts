/**
 * The soak in Redis mode, short (SLUICE_STATE_SOAK_SECS, default 20): test/state/soak.ts's scenario
 * and checks. `node --import tsx --expose-gc bench/state-soak.ts --minutes 10` is the long run.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { writeTempFile } from "../helpers/harness.js";
import { redisOrSkip, statePrefix } from "./services.js";
import { checkStateSoak, formatStateSoak, runStateSoak } from "./soak.js";

const SECS = Number(process.env["SLUICE_STATE_SOAK_SECS"] ?? 20);
const SEED = process.env["SLUICE_SOAK_SEED"]
  ? Number(process.env["SLUICE_SOAK_SEED"])
  : Date.now() % 2_147_483_647;

test(`soak in Redis mode: ${SECS} s, three replicas, 2x overload, aborts, preemptions (seed ${SEED})`, {
  timeout: SECS * 1000 + 60_000,
}, async (t) => {
  const url = await redisOrSkip(t);
  if (url === undefined) return;
  const report = await runStateSoak({
    durationMs: SECS * 1000,
    seed: SEED,
    redisUrl: url,
    prefix: statePrefix(t),
    yamlPath: await writeTempFile(t, "priority.yaml", ""),
    log: (line) => t.diagnostic(line),
  });
  for (const line of formatStateSoak(report).split("\n")) t.diagnostic(line);
  assert.deepEqual(checkStateSoak(report), [], `replay with SLUICE_SOAK_SEED=${SEED}`);
});
