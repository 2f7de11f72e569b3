/**
 * The long soak: `npm run soak -- --minutes 30 [--seed N] [--overload 3]` (or `--seconds S`).
 *
 * Runs test/soak/soak.ts's scenario (3x overload of mixed classes and tenants against two workers of
 * capacity 8, 10% client aborts, preemptions, a worker restarted midway), prints the summary and
 * the checks a correct gateway passes (in-flight and queued 0, no slot, socket or timer leaked, heap
 * and RSS after GC within 10% of the mark at 1/5 of the run, time above capacity at any worker at
 * most 0.5% of the run). Exit status 1 when a check fails.
 */
import { checkSoak, formatSoak, runSoak } from "../test/soak/soak.js";

function parseArgs(argv: string[]): { durationMs: number; seed: number; overload: number } {
  let durationMs = 60_000;
  let seed = Date.now() % 2_147_483_647;
  let overload = 3;
  for (let i = 0; i < argv.length; i++) {
    const name = argv[i];
    const value = Number(argv[++i]);
    if (!Number.isFinite(value) || value <= 0)
      throw new Error(`usage: soak [--minutes M | --seconds S] [--seed N] [--overload X] (bad ${name})`);
    if (name === "--minutes") durationMs = value * 60_000;
    else if (name === "--seconds") durationMs = value * 1000;
    else if (name === "--seed") seed = Math.floor(value);
    else if (name === "--overload") overload = value;
    else throw new Error(`unknown option ${name}`);
  }
  return { durationMs, seed, overload };
}

async function main(): Promise<void> {
  const args = parseArgs(process.argv.slice(2));
  process.stdout.write(
    `soak: ${(args.durationMs / 60_000).toFixed(1)} min, seed ${args.seed}, ${args.overload}x overload\n`,
  );
  const report = await runSoak({ ...args, log: (line) => process.stdout.write(`${line}\n`) });
  process.stdout.write(`\n${formatSoak(report)}\n`);
  const failures = checkSoak(report);
  process.stdout.write(
    failures.length === 0
      ? "\nall soak checks passed\n"
      : `\nFAILED:\n${failures.map((f) => `- ${f}`).join("\n")}\n`,
  );
  process.exitCode = failures.length === 0 ? 0 : 1;
}

main().catch((err: unknown) => {
  process.stderr.write(`${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
  process.exitCode = 2;
});
