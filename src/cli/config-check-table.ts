/**
 * `sluice check-config`'s report as text: what was read, the effective per-class tables, then the
 * problems and the notes. Fits an 80-column terminal; the legend names each column's YAML key.
 */
import { CLASSES_HIGH_TO_LOW } from "@sluice/scheduler/core/class.js";
import { terminalSafe } from "../ledger/format.js";
import type { ClassTable, ConfigCheck } from "./check-config.js";

const COLUMNS = ["class", "reserved", "floor", "share", "queue", "timeout", "starve", "cap", "preempt"];
const WIDTHS = [11, 8, 5, 5, 5, 7, 6, 4, 11];

/** Each column's YAML key under `classes.<class>`, said once under the tables. */
const LEGEND = [
  "reserved: slots held for the class, max(floor, ceil(share x capacity))",
  "floor: reserved_floor   share: reserved_per_slot   queue: queue_size",
  "timeout: queue_timeout_secs   starve: starvation_threshold_secs",
  "cap: starvation_max_share   preempt: can_preempt, after preempt_after_secs",
];

export function renderConfigCheck(check: ConfigCheck): string {
  const out: string[] = [];
  const verdict =
    check.problems.length === 0
      ? "OK"
      : `${check.problems.length} problem${check.problems.length === 1 ? "" : "s"}`;
  out.push(`sluice check-config: ${verdict}`);
  out.push(`gateway file:    ${check.configPath === undefined ? "none" : terminalSafe(check.configPath)}`);
  out.push(
    `scheduler file:  ${check.schedulerPath === undefined ? "none (the built-in classes)" : terminalSafe(check.schedulerPath)}`,
  );
  const INDENT = " ".repeat(17);
  if (check.admission !== undefined) out.push(...wrap(`admission:       ${check.admission}`, INDENT));
  if (check.capacity !== undefined)
    out.push(...wrap(`capacity:        ${check.capacity.slots} (${check.capacity.from})`, INDENT));
  for (const table of check.tables) out.push("", ...renderTable(table));
  if (check.tables.length > 0) out.push("", ...LEGEND);
  if (check.problems.length > 0) out.push("", "problems:", ...check.problems.flatMap(item));
  if (check.notes.length > 0) out.push("", "notes:", ...check.notes.flatMap(item));
  return `${out.join("\n")}\n`;
}

function renderTable(table: ClassTable): string[] {
  const lines = [`${table.title}, at ${table.capacity} slots:`, row(COLUMNS)];
  let total = 0;
  for (const cls of CLASSES_HIGH_TO_LOW) {
    const s = table.classes[cls];
    total += table.reserved[cls];
    lines.push(
      row([
        cls,
        String(table.reserved[cls]),
        String(s.reserved_floor),
        decimal(s.reserved_per_slot),
        String(s.queue_size),
        secs(s.queue_timeout_secs),
        secs(s.starvation_threshold_secs),
        decimal(s.starvation_max_share),
        s.can_preempt ? `after ${secs(s.preempt_after_secs)}` : "no",
      ]),
    );
  }
  lines.push(
    table.fits
      ? `reserved ${total} of ${table.capacity}; ${table.capacity - total} shared by every class`
      : `reserved ${total} of ${table.capacity}: DOES NOT FIT (legacy admission would run instead)`,
  );
  return lines;
}

/** A listed problem or note, wrapped at the terminal's 80 columns under its dash. */
function item(text: string): string[] {
  return wrap(`  - ${terminalSafe(text)}`, "    ");
}

/** Words to lines of at most 79 columns; a word longer than that (a path) gets a line of its own. */
function wrap(text: string, indent: string): string[] {
  const lead = /^ */.exec(text)![0];
  const lines: string[] = [];
  let line = lead;
  for (const word of text.slice(lead.length).split(" ")) {
    if (line.trim() !== "" && line.length + 1 + word.length > 79) {
      lines.push(line);
      line = indent + word;
    } else line = line.trim() === "" ? line + word : `${line} ${word}`;
  }
  lines.push(line);
  return lines;
}

/** The class name left-aligned, the rest right-aligned, in fixed widths. */
function row(cells: readonly string[]): string {
  return cells
    .map((cell, i) => (i === 0 ? cell.padEnd(WIDTHS[i]!) : cell.padStart(WIDTHS[i]!)))
    .join("  ")
    .trimEnd();
}

/** At most three decimals, without trailing zeros: 0.25, 0.1, 0. */
function decimal(n: number): string {
  return String(Math.round(n * 1000) / 1000);
}

function secs(n: number): string {
  return `${decimal(n)}s`;
}
