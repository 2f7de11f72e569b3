/**
 * The `sluice demo` live table, as lines that fit the terminal. On a terminal the demo redraws the
 * table in place by moving the cursor up as many lines as it drew last time; a line longer than the
 * terminal is wide wraps onto two rows, the cursor then goes up too few and frames pile up. So no
 * line here is longer than the width: the refusals by error code go on lines of their own, wrapped
 * at spaces, and anything still too long is cut with "…".
 */
import type { PriorityClass } from "@sluice/scheduler/core/class.js";
import { terminalSafe } from "../ledger/format.js";

export interface DemoClassLine {
  cls: PriorityClass;
  /** Answered 200 to the end, since the start. */
  completed: number;
  /** Now, in the pool's scheduler. */
  running: number;
  queued: number;
  /** Answers other than 200 since the start, by error code. */
  refused: ReadonlyMap<string, number>;
  /** Queue wait of the completed requests, ms; undefined when none completed. */
  waitP50Ms: number | undefined;
  waitP99Ms: number | undefined;
}

export interface DemoPoolLines {
  /** The model name the workers report: shown escaped, never raw. */
  name: string;
  capacity: number;
  running: number;
  queued: number;
  classes: readonly DemoClassLine[];
}

export interface DemoFrame {
  elapsedSecs: number;
  fleet: { capacity: number; running: number; queued: number };
  pools: readonly DemoPoolLines[];
}

/** The narrowest table drawn; a narrower terminal gets it cut at its width. */
const MIN_WIDTH = 40;
const NUMBER_COLUMNS = [
  ["completed", 9],
  ["running", 7],
  ["queued", 6],
  ["refused", 7],
  ["wait p50", 8],
  ["wait p99", 8],
] as const;
const NUMBERS_WIDTH = NUMBER_COLUMNS.reduce((n, [, w]) => n + 2 + w, 0);

const LEGEND =
  "completed: answered 200 to the end; running, queued: now, in the pool's scheduler; " +
  "refused: answers other than 200 (by error code below the class); wait: ms queued before " +
  "admission, p50 and p99 of the completed requests (the x-sluice-queue-wait-ms header)";

/** Whole numbers, no separators: one format for every count and every millisecond figure. */
function whole(n: number | undefined): string {
  return n === undefined ? "-" : String(Math.round(n));
}

function cut(line: string, width: number): string {
  return line.length <= width ? line : `${line.slice(0, width - 1)}…`;
}

/** `text` in lines of at most `width`, broken at spaces, each after `indent`. */
export function wrapWords(text: string, width: number, indent = ""): string[] {
  const lines: string[] = [];
  let line = indent;
  for (const word of text.split(" ")) {
    if (line.length > indent.length && line.length + 1 + word.length > width) {
      lines.push(line);
      line = indent;
    }
    line += line.length > indent.length ? ` ${word}` : word;
  }
  if (line.length > indent.length) lines.push(line);
  return lines.map((l) => cut(l, width));
}

/**
 * The frame's lines for a terminal `columns` wide. Lines stop one column short of it: some
 * terminals move the cursor to the next row after a full-width line, which would again make a
 * line take two rows.
 */
export function renderDemoTable(frame: DemoFrame, columns: number): string[] {
  const width = Math.max(MIN_WIDTH, columns - 1);
  const nameWidth = Math.max(12, width - NUMBERS_WIDTH);
  const row = (name: string, cells: readonly string[]) =>
    `${name.padEnd(nameWidth).slice(0, nameWidth)}${cells.map((c, i) => `  ${c.padStart(NUMBER_COLUMNS[i]![1])}`).join("")}`;
  const { fleet } = frame;
  const lines = [
    `t=${whole(frame.elapsedSecs).padStart(3)} s  fleet: capacity ${fleet.capacity}  running ${fleet.running}  queued ${fleet.queued}`,
    row(
      "model pool / class",
      NUMBER_COLUMNS.map(([title]) => title),
    ),
  ];
  for (const pool of frame.pools) {
    lines.push(
      `${terminalSafe(pool.name)} (capacity ${pool.capacity}, running ${pool.running}, queued ${pool.queued})`,
    );
    for (const c of pool.classes) {
      const refused = [...c.refused.values()].reduce((a, b) => a + b, 0);
      lines.push(
        row(`  ${c.cls}`, [
          whole(c.completed),
          whole(c.running),
          whole(c.queued),
          whole(refused),
          whole(c.waitP50Ms),
          whole(c.waitP99Ms),
        ]),
      );
      if (refused > 0) {
        const codes = [...c.refused].map(([code, n]) => `${terminalSafe(code)}=${n}`).join(" ");
        lines.push(...wrapWords(`refused by code: ${codes}`, width, "    "));
      }
    }
  }
  lines.push(...wrapWords(LEGEND, width));
  return lines.map((l) => cut(l, width));
}

/**
 * The text that replaces the last frame with `lines`: on a terminal, first the cursor goes up the
 * `drawnLines` the last frame took and clears to the end of the screen; piped, plain lines and a
 * blank one between frames.
 */
export function frameText(lines: readonly string[], drawnLines: number, tty: boolean): string {
  if (!tty) return `${lines.join("\n")}\n\n`;
  const erase = drawnLines > 0 ? `\x1b[${drawnLines}A\x1b[J` : "";
  return `${erase}${lines.join("\n")}\n`;
}
