/**
 * docs/gateway.md's flags table is the option table rendered: every option's flag, environment
 * variable and default appear, in the table's order, and nothing else.
 */
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { describe, test } from "node:test";
import { FLAGS_TABLE_HEADER, flagsDocTable, tableInPage } from "../../src/config/flags-doc-table.js";
import { envOf, flagOf, GATEWAY_OPTIONS, OPTION_KEYS } from "../../src/config/gateway-option-table.js";

const PAGE = readFileSync(new URL("../../docs/gateway.md", import.meta.url), "utf8");

describe("docs/gateway.md flags table", () => {
  test("is the option table rendered (rewrite it with node --import tsx scripts/write-flags-table.ts)", () => {
    const at = tableInPage(PAGE);
    assert.ok(at, `docs/gateway.md has the line "${FLAGS_TABLE_HEADER}"`);
    assert.equal(PAGE.slice(at.start, at.end), flagsDocTable());
  });

  test("has one row per option, naming its flag, variable and default", () => {
    const rows = flagsDocTable().split("\n").slice(2);
    assert.equal(rows.length, OPTION_KEYS.length);
    OPTION_KEYS.forEach((key, i) => {
      const cells = rows[i]!.split(" | ");
      assert.match(cells[0]!, new RegExp(`^\\| \`${flagOf(key)}[ \`]`), key);
      assert.equal(cells[1], `\`${envOf(key)}\``, key);
      const row = GATEWAY_OPTIONS[key];
      if (row.docDefault === undefined && typeof row.default !== "boolean" && row.default !== undefined) {
        assert.equal(cells[2], `\`${String(row.default)}\``, key);
      }
    });
  });

  test("lists the admin flags", () => {
    for (const flag of ["--admin-port", "--admin-host", "--admin-token-file"]) {
      assert.match(PAGE, new RegExp(`\\| \`${flag} [A-Z]+\` \\|`), flag);
    }
  });
});
