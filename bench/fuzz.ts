/**
 * The long fuzz run: `npm run fuzz -- --runs 100000 [--seed N] [--batch 12] [--from I]`.
 *
 * Sends generated raw HTTP requests (test/fuzz/cases.ts) in concurrent batches to a real gateway in
 * front of a mock worker (test/fuzz/fleet.ts) and checks the same invariants as the CI suite after
 * every batch, but keeps going after a violation: it prints every distinct violation with one
 * reproduction, the number of cases, cases/s and the status histogram. Batch I of seed S is the
 * same on every run, so `--seed S --from I --runs <its size>` replays it on a fresh gateway. A fleet
 * that stops serving is replaced (and counted) so the run goes on. Exit status 1 on any violation.
 */
import fc from "fast-check";
import { batchArb } from "../test/fuzz/cases.js";
import { FuzzFleet, type Violation } from "../test/fuzz/fleet.js";

interface Args {
  runs: number;
  seed: number;
  batch: number;
  from: number;
  examples: number;
  maxMinutes: number;
}

function parseArgs(argv: string[]): Args {
  const args: Args = {
    runs: 2000,
    seed: Date.now() % 2_147_483_647,
    batch: 12,
    from: 0,
    examples: 2,
    maxMinutes: 120,
  };
  for (let i = 0; i < argv.length; i++) {
    const name = argv[i]!.replace(/^--/, "").replace(/-([a-z])/g, (_, c: string) => c.toUpperCase());
    const value = Number(argv[++i]);
    if (!(name in args) || !Number.isFinite(value) || value < 0) {
      throw new Error(
        `usage: fuzz [--runs N] [--seed N] [--batch N] [--from I] [--examples N] [--max-minutes M] (bad ${argv[i - 1]})`,
      );
    }
    (args as unknown as Record<string, number>)[name] = Math.floor(value);
  }
  args.batch = Math.max(1, args.batch);
  return args;
}

/** A per-batch seed: the same (seed, index) always gives the same batch. */
function batchSeed(seed: number, index: number): number {
  let h = (seed ^ Math.imul(index + 1, 0x9e3779b1)) >>> 0;
  h = Math.imul(h ^ (h >>> 16), 0x85ebca6b) >>> 0;
  h = Math.imul(h ^ (h >>> 13), 0xc2b2ae35) >>> 0;
  return (h ^ (h >>> 16)) % 2_147_483_647;
}

interface Group {
  count: number;
  examples: Array<Violation & { batch: number }>;
}

async function main(): Promise<void> {
  const args = parseArgs(process.argv.slice(2));
  const arb = batchArb(args.batch);
  const histogram = new Map<string, number>();
  const groups = new Map<string, Group>();
  let cases = 0;
  let batches = 0;
  let replaced = 0;
  let violations = 0;
  let stop = false;
  process.once("SIGINT", () => {
    stop = true;
  });

  process.stdout.write(
    `fuzz: seed ${args.seed}, ${args.runs} cases in batches of up to ${args.batch}, from batch ${args.from}\n`,
  );
  let fleet = await FuzzFleet.start();
  const started = performance.now();
  const deadline = started + args.maxMinutes * 60_000;
  let lastPrint = started;
  let errorLogs = 0;
  for (let index = args.from; cases < args.runs && !stop && performance.now() < deadline; index++) {
    let batch = fc.sample(arb, { seed: batchSeed(args.seed, index), numRuns: 1 })[0]!;
    if (cases + batch.length > args.runs) batch = batch.slice(0, args.runs - cases);
    const report = await fleet.runBatch(batch);
    cases += report.cases;
    batches++;
    for (const [k, v] of report.statuses) histogram.set(k, (histogram.get(k) ?? 0) + v);
    for (const v of report.violations) {
      violations++;
      const key = `${v.invariant}: ${v.detail
        .replace(/[0-9a-z]{6}-\d+/g, "ID")
        .replace(/\d+/g, "N")
        .slice(0, 100)}`;
      const group = groups.get(key) ?? { count: 0, examples: [] };
      group.count++;
      if (group.examples.length < args.examples) group.examples.push({ ...v, batch: index });
      groups.set(key, group);
    }
    if (report.poisoned) {
      replaced++;
      process.stdout.write(
        `batch ${index}: the gateway crashed or stopped serving after ${cases} cases; replacing the fleet\n`,
      );
      errorLogs += fleet.errorLogTotal;
      await fleet.close().catch(() => {});
      fleet = await FuzzFleet.start();
    }
    const now = performance.now();
    if (now - lastPrint > 10_000) {
      lastPrint = now;
      process.stdout.write(
        `${cases} cases, ${(cases / ((now - started) / 1000)).toFixed(1)} cases/s, ${violations} violations\n`,
      );
    }
  }
  const elapsed = (performance.now() - started) / 1000;
  errorLogs += fleet.errorLogTotal;
  const sampleLogs = fleet.errorLogs.slice(0, 3);
  await fleet.close();

  const out: string[] = [];
  out.push(
    "",
    `seed ${args.seed}: ${cases} cases in ${batches} batches, ${elapsed.toFixed(1)} s, ${(cases / elapsed).toFixed(1)} cases/s`,
  );
  out.push(
    `fleets replaced after the gateway crashed or stopped serving: ${replaced}; gateway ERROR log lines: ${errorLogs}`,
  );
  out.push("", "status histogram (answers; gateway errors also by code):");
  const plain = [...histogram].filter(([k]) => !k.includes(" ")).sort((a, b) => b[1] - a[1]);
  const byCode = [...histogram].filter(([k]) => k.includes(" ")).sort((a, b) => b[1] - a[1]);
  for (const [k, v] of plain) out.push(`  ${k.padEnd(28)} ${v}`);
  out.push("  --");
  for (const [k, v] of byCode) out.push(`  ${k.padEnd(60)} ${v}`);
  out.push("", `violations: ${violations} (${groups.size} distinct)`);
  for (const [key, group] of [...groups].sort((a, b) => b[1].count - a[1].count)) {
    out.push(`- ${group.count}x ${key}`);
    for (const v of group.examples) {
      out.push(`    batch ${v.batch} (replay: --seed ${args.seed} --from ${v.batch} --runs ${args.batch})`);
      out.push(`    detail:  ${v.detail}`);
      if (v.label) out.push(`    case:    ${v.label}`);
      if (v.bytes) out.push(`    bytes:   ${v.bytes}`);
      if (v.answers) out.push(`    answers: ${v.answers}`);
    }
  }
  if (sampleLogs.length > 0)
    out.push("", "gateway ERROR log lines (first few):", ...sampleLogs.map((l) => `  ${l.trim()}`));
  process.stdout.write(`${out.join("\n")}\n`);
  process.exitCode = violations > 0 ? 1 : 0;
}

main().catch((err: unknown) => {
  process.stderr.write(`${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
  process.exitCode = 2;
});
