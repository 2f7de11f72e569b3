/**
 * Rewrites the flags table of docs/gateway.md from the option table (src/config/gateway-option-table.ts):
 * `node --import tsx scripts/write-flags-table.ts`.
 */
import { readFileSync, writeFileSync } from "node:fs";
import { FLAGS_TABLE_HEADER, flagsDocTable, tableInPage } from "../src/config/flags-doc-table.js";

const PAGE = new URL("../docs/gateway.md", import.meta.url);
const page = readFileSync(PAGE, "utf8");
const at = tableInPage(page);
if (at === undefined) throw new Error(`docs/gateway.md has no line "${FLAGS_TABLE_HEADER}"`);
writeFileSync(PAGE, `${page.slice(0, at.start)}${flagsDocTable()}${page.slice(at.end)}`);
