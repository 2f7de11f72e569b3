/**
 * `--export-requests FILE.csv`: one row per request attempt, every policy, for a planner's own
 * analysis (docs/simulate.md lists the columns). Written to a temporary file renamed into place,
 * so a failed run leaves no half-written export.
 */
import { rename, rm, writeFile } from "node:fs/promises";
import type { AttemptRow } from "./run.js";
import type { PolicyName } from "./scenario.js";

const EXPORT_COLUMNS = [
  "policy",
  "request_id",
  "tenant",
  "class",
  "attempt",
  "arrival_ms",
  "admitted_ms",
  "first_token_ms",
  "end_ms",
  "outcome",
  "code",
  "status",
  "prompt_tokens",
  "output_tokens",
  "cached_prompt_tokens",
  "worker",
  "preempted_prefill_tokens",
  "recomputed_tokens",
] as const;

/** A time in ms with microsecond precision, empty when it never happened. */
function ms(v: number): string {
  return Number.isNaN(v) ? "" : String(Math.round(v * 1000) / 1000);
}

/** RFC 4180: quote a field with a comma, quote or line break. */
function cell(v: string): string {
  return /[",\r\n]/.test(v) ? `"${v.replace(/"/g, '""')}"` : v;
}

function attemptsCsv(runs: readonly { policy: PolicyName; rows: readonly AttemptRow[] }[]): string {
  const out: string[] = [EXPORT_COLUMNS.join(",")];
  for (const { policy, rows } of runs) {
    for (const r of rows) {
      out.push(
        [
          policy,
          String(r.request),
          cell(r.tenant),
          r.cls,
          String(r.attempt),
          ms(r.arrival),
          ms(r.admitted),
          ms(r.firstToken),
          ms(r.end),
          r.outcome,
          r.code,
          r.status === 0 ? "" : String(r.status),
          String(r.prompt),
          String(r.output),
          String(r.cachedPrompt),
          cell(r.worker),
          String(r.preemptedPrefill),
          String(r.recomputed),
        ].join(","),
      );
    }
  }
  return `${out.join("\n")}\n`;
}

export async function writeAttemptsCsv(
  path: string,
  runs: readonly { policy: PolicyName; rows: readonly AttemptRow[] }[],
): Promise<void> {
  const tmp = `${path}.tmp-${process.pid}`;
  try {
    await writeFile(tmp, attemptsCsv(runs));
    await rename(tmp, path);
  } catch (err) {
    await rm(tmp, { force: true });
    throw err;
  }
}
