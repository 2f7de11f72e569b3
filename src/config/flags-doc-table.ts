/**
 * The flags table of docs/gateway.md ("## Flags"), rendered from the option table so the page
 * lists every option, with its environment variable and default, and nothing else
 * (test/config/flags-doc.test.ts compares; scripts/write-flags-table.ts rewrites the page).
 */
import { envOf, flagOf, GATEWAY_OPTIONS, OPTION_KEYS, type OptionKey } from "./gateway-option-table.js";

export const FLAGS_TABLE_HEADER = "| Flag | Environment | Default | Meaning |";

/** `--port PORT`, `--worker-urls URL...`, `--require-auth`. */
function flagCell(key: OptionKey): string {
  const { arg, kind, default: on } = GATEWAY_OPTIONS[key];
  if (kind === "switch" && on === true) return `\`${flagOf(key)}\` / \`--no-${flagOf(key).slice(2)}\``;
  const shown = arg === undefined ? flagOf(key) : `${flagOf(key)} ${arg.replace(/^<|>$/g, "").toUpperCase()}`;
  return `\`${shown}\``;
}

function defaultCell(key: OptionKey): string {
  const row = GATEWAY_OPTIONS[key];
  if (row.docDefault !== undefined) return row.docDefault;
  if (row.default === undefined) return "unset";
  if (row.default === false) return "off";
  if (row.default === true) return "on";
  return `\`${String(row.default)}\``;
}

/** A table cell's text: a pipe would end the cell. */
function cell(text: string): string {
  return text.replaceAll("|", "\\|");
}

/** The markdown table, one line per option in the table's order, without a trailing newline. */
export function flagsDocTable(): string {
  const lines = [FLAGS_TABLE_HEADER, "|---|---|---|---|"];
  for (const key of OPTION_KEYS) {
    const row = GATEWAY_OPTIONS[key];
    const cells = [flagCell(key), `\`${envOf(key)}\``, defaultCell(key), row.doc].map(cell);
    lines.push(`| ${cells.join(" | ")} |`);
  }
  return lines.join("\n");
}

/** The table as it stands in a page: from its header line to the first line that is not a row. */
export function tableInPage(page: string): { start: number; end: number } | undefined {
  const start = page.indexOf(`${FLAGS_TABLE_HEADER}\n`);
  if (start < 0) return undefined;
  let end = start;
  while (end < page.length && page[end] === "|") {
    const next = page.indexOf("\n", end);
    end = next < 0 ? page.length : next + 1;
  }
  return { start, end: end - 1 };
}
