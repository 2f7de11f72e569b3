/** Query results as text: an aligned table (for people), JSON (an array of objects) or CSV (RFC 4180). */
import type { Cell, QueryResult } from "./query.js";

export const OUTPUT_FORMATS = ["table", "json", "csv"] as const;
export type OutputFormat = (typeof OUTPUT_FORMATS)[number];

function cellText(value: Cell, forTable: boolean): string {
  if (value === null) return "";
  if (typeof value === "number") {
    if (!forTable || Number.isInteger(value)) return String(value);
    return String(Number(value.toPrecision(6)));
  }
  if (typeof value === "string") return value;
  return typeof value === "boolean" ? String(value) : JSON.stringify(value);
}

function csvField(text: string): string {
  return /[",\r\n]|^\s|\s$/.test(text) ? `"${text.replaceAll('"', '""')}"` : text;
}

export function formatResult(result: QueryResult, format: OutputFormat): string {
  const { columns, rows } = result;
  if (format === "json") {
    const objects = rows.map((row) => Object.fromEntries(columns.map((c, i) => [c, row[i] ?? null])));
    return `${JSON.stringify(objects, null, 2)}\n`;
  }
  if (format === "csv") {
    const lines = [columns.map(csvField).join(",")];
    for (const row of rows) lines.push(row.map((v) => csvField(cellText(v, false))).join(","));
    return `${lines.join("\n")}\n`;
  }
  const cells = rows.map((row) => row.map((v) => cellText(v, true)));
  const numeric = columns.map((_, i) =>
    rows.every((row) => row[i] === null || row[i] === undefined || typeof row[i] === "number"),
  );
  const widths = columns.map((c, i) => Math.max(c.length, ...cells.map((row) => row[i]!.length)));
  const line = (values: string[]) =>
    values
      .map((v, i) => (numeric[i] ? v.padStart(widths[i]!) : v.padEnd(widths[i]!)))
      .join("  ")
      .trimEnd();
  const out = [line(columns), widths.map((w) => "-".repeat(w)).join("  ")];
  for (const row of cells) out.push(line(row));
  out.push(`(${rows.length} ${rows.length === 1 ? "row" : "rows"})`);
  return `${out.join("\n")}\n`;
}
