/**
 * The long soak in Redis mode: `node --import tsx --expose-gc bench/state-soak.ts --minutes 10
 * [--seed N]` (REDIS_URL, default redis://127.0.0.1:6379). test/state/soak.ts has the scenario and
 * the checks; exit status 1 when one fails.
 */
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { dropKeys } from "../test/admission/services.js";
import { checkStateSoak, formatStateSoak, runStateSoak } from "../test/admission/soak.js";

const args = process.argv.slice(2);
const value = (name: string) => (args.includes(name) ? Number(args[args.indexOf(name) + 1]) : undefined);
const durationMs = (value("--minutes") ?? 10) * 60_000;
const seed = value("--seed") ?? Date.now() % 2_147_483_647;
const redisUrl = process.env.REDIS_URL ?? "redis://127.0.0.1:6379";
const prefix = `sluice-soak-${process.pid}:`;
const dir = await mkdtemp(join(tmpdir(), "sluice-state-soak-"));
process.stdout.write(
  `state soak: ${(durationMs / 60_000).toFixed(1)} min, seed ${seed}, Redis ${redisUrl}\n`,
);
try {
  const report = await runStateSoak({
    durationMs,
    seed,
    redisUrl,
    prefix,
    yamlPath: join(dir, "priority.yaml"),
    log: (line) => process.stdout.write(`${line}\n`),
  });
  process.stdout.write(`\n${formatStateSoak(report)}\n`);
  const failures = checkStateSoak(report);
  process.stdout.write(
    failures.length === 0 ? "\nall soak checks passed\n" : `\nFAILED:\n- ${failures.join("\n- ")}\n`,
  );
  process.exitCode = failures.length === 0 ? 0 : 1;
} finally {
  await dropKeys(redisUrl, prefix);
  await rm(dir, { recursive: true, force: true });
}
