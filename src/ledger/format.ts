/**
 * Query results as text: an aligned table (for people), JSON (an array of objects) or CSV (RFC 4180).
 *
 * The ledger holds strings clients chose (the model, a tenant from a trusted header), so none of the
 * three prints them raw (docs/security.md, "Ledger output"):
 * - the table escapes every control character (C0, DEL, C1), the bidi controls and the line and
 *   paragraph separators as visible text (`\x1b`, `\r`, `\n`, `\u009b`, `\u202e`; a backslash as
 *   `\\`), so no terminal sequence runs and no cell can start a line of its own;
 * - JSON escapes the same characters as `\uXXXX` (JSON.stringify leaves C1 and bidi raw): the
 *   values are unchanged for a JSON reader;
 * - CSV neutralises formulas as OWASP recommends: a text cell starting with `=`, `+`, `-`, `@`, TAB,
 *   CR, LF or NUL (or a fullwidth `＝＋－＠`) gets a leading `'` and is quoted; and on a terminal
 *   (`terminal`), its control characters are escaped as in the table.
 */
import type { Cell, QueryResult } from "./query.js";

export const OUTPUT_FORMATS = ["table", "json", "csv"] as const;
export type OutputFormat = (typeof OUTPUT_FORMATS)[number];

/**
 * A number as text: with the column's fixed `decimals` when it has some; else an integer as is and
 * a fraction to 6 significant digits in the table, 12 in CSV (short of the 15 to 17 a double
 * prints, where the noise of binary sums sits: 19.598544, not 19.598544000000402).
 */
function numberText(value: number, forTable: boolean, decimals: number | undefined): string {
  if (decimals !== undefined && Number.isFinite(value)) return value.toFixed(decimals);
  if (Number.isInteger(value) || !Number.isFinite(value)) return String(value);
  return String(Number(value.toPrecision(forTable ? 6 : 12)));
}

function cellText(value: Cell, forTable: boolean, decimals?: number): string {
  if (value === null) return "";
  if (typeof value === "number") return numberText(value, forTable, decimals);
  if (typeof value === "string") return value;
  return typeof value === "boolean" ? String(value) : JSON.stringify(value);
}

/**
 * Characters a terminal may act on or that reorder or break what it shows: C0 controls (TAB, CR
 * and LF included), DEL, C1 controls (U+009B is CSI on its own), the bidi marks, embeddings,
 * overrides and isolates (U+061C, U+200E-200F, U+202A-202E, U+2066-2069), and the line and
 * paragraph separators (U+2028-2029); and the backslash, so that an escape is never ambiguous.
 */
const TERMINAL_UNSAFE =
  // biome-ignore lint/suspicious/noControlCharactersInRegex: control characters are what it finds
  /[\u0000-\u001f\u007f-\u009f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\\]/g;
/** The same without the backslash and the line feed (an error message keeps its lines). */
const MESSAGE_UNSAFE =
  // biome-ignore lint/suspicious/noControlCharactersInRegex: control characters are what it finds
  /[\u0000-\u0009\u000b-\u001f\u007f-\u009f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]/g;
/** What JSON.stringify leaves raw that a terminal may act on: DEL, C1, bidi controls, separators. */
const JSON_UNSAFE = /[\u007f-\u009f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]/g;

function visibleEscape(c: string): string {
  switch (c) {
    case "\\":
      return "\\\\";
    case "\n":
      return "\\n";
    case "\r":
      return "\\r";
    case "\t":
      return "\\t";
  }
  const code = c.charCodeAt(0);
  return code < 0x80
    ? `\\x${code.toString(16).padStart(2, "0")}`
    : `\\u${code.toString(16).padStart(4, "0")}`;
}

/** `text` with every character a terminal could act on written as a visible escape (`\x1b`, `\n`). */
export function terminalSafe(text: string): string {
  return text.replace(TERMINAL_UNSAFE, visibleEscape);
}

/** An error message for a terminal: escaped as `terminalSafe` does, but its line feeds kept. */
export function terminalSafeMessage(text: string): string {
  return text.replace(MESSAGE_UNSAFE, visibleEscape);
}

/** JSON text (indented by 2) with DEL, C1 and the bidi controls as `\uXXXX` too: the same values. */
export function jsonText(value: unknown): string {
  return JSON.stringify(value, null, 2).replace(
    JSON_UNSAFE,
    (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`,
  );
}

/**
 * A text cell a spreadsheet would read as a formula (OWASP, "CSV Injection"): it starts with `=`,
 * `+`, `-`, `@`, TAB, CR, LF or NUL, or their fullwidth forms. A lone `-` (the report's "none") is
 * no formula.
 */
const FORMULA_START = /^[=+\-@\t\r\n\0\uff1d\uff0b\uff0d\uff20]/;

function csvField(text: string, isText: boolean, terminal: boolean): string {
  let field = terminal ? terminalSafe(text) : text;
  const formula = isText && FORMULA_START.test(text) && text !== "-";
  if (formula) field = `'${field}`;
  return formula || /[",\r\n]|^\s|\s$/.test(field) ? `"${field.replaceAll('"', '""')}"` : field;
}

interface FormatOptions {
  /**
   * The text goes to a terminal (stdout is a TTY): CSV escapes control characters too. The table
   * always does; JSON needs no more than it always does.
   */
  terminal?: boolean;
  /** Columns (by name) whose numbers print with this many decimals, in the table and CSV. */
  decimals?: Readonly<Record<string, number>>;
}

export function formatResult(result: QueryResult, format: OutputFormat, options: FormatOptions = {}): string {
  const { columns, rows } = result;
  const terminal = options.terminal === true;
  const decimals = columns.map((c) => options.decimals?.[c]);
  if (format === "json") {
    const objects = rows.map((row) => Object.fromEntries(columns.map((c, i) => [c, row[i] ?? null])));
    return `${jsonText(objects)}\n`;
  }
  if (format === "csv") {
    const lines = [columns.map((c) => csvField(c, true, terminal)).join(",")];
    for (const row of rows) {
      lines.push(
        row
          .map((v, i) => csvField(cellText(v, false, decimals[i]), typeof v === "string", terminal))
          .join(","),
      );
    }
    return `${lines.join("\n")}\n`;
  }
  const cells = rows.map((row) => row.map((v, i) => terminalSafe(cellText(v, true, decimals[i]))));
  const numeric = columns.map((_, i) =>
    rows.every((row) => row[i] === null || row[i] === undefined || typeof row[i] === "number"),
  );
  const names = columns.map(terminalSafe);
  const widths = names.map((c, i) => Math.max(c.length, ...cells.map((row) => row[i]!.length)));
  const line = (values: string[]) =>
    values
      .map((v, i) => (numeric[i] ? v.padStart(widths[i]!) : v.padEnd(widths[i]!)))
      .join("  ")
      .trimEnd();
  const out = [line(names), widths.map((w) => "-".repeat(w)).join("  ")];
  for (const row of cells) out.push(line(row));
  out.push(`(${rows.length} ${rows.length === 1 ? "row" : "rows"})`);
  return `${out.join("\n")}\n`;
}
