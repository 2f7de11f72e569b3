/** The error table and docs/errors.md list the same codes with the same status and rules. */
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";
import { ERROR_TABLE } from "../../src/contracts/error-table.js";

interface DocRow {
  status: number;
  retryable: boolean;
  retryAfter: string;
}

function docRows(): Map<string, DocRow> {
  const text = readFileSync(new URL("../../docs/errors.md", import.meta.url), "utf8");
  const rows = new Map<string, DocRow>();
  for (const line of text.split("\n")) {
    const m = /^\| (?:<a id="[a-z_]+"><\/a>)?`([a-z_]+)` \| (\d{3}) \| (yes|no) \| ([^|]+) \|/.exec(line);
    if (m === null) continue;
    assert.ok(!rows.has(m[1]!), `docs/errors.md lists ${m[1]} twice`);
    rows.set(m[1]!, { status: Number(m[2]), retryable: m[3] === "yes", retryAfter: m[4]!.trim() });
  }
  return rows;
}

test("docs/errors.md and the error table agree, code by code", () => {
  const doc = docRows();
  const table = Object.entries(ERROR_TABLE);
  assert.ok(table.length > 30);
  for (const [code, row] of table) {
    const d = doc.get(code);
    assert.ok(d, `${code} is in the error table but not in docs/errors.md`);
    assert.equal(d.status, row.status, `${code}: status`);
    assert.equal(d.retryable, row.retryable, `${code}: retryable`);
    const rule = row.retryAfter === "none" ? "-" : String(row.retryAfter);
    assert.equal(d.retryAfter, rule, `${code}: Retry-After`);
  }
  for (const code of doc.keys()) assert.ok(code in ERROR_TABLE, `${code} is documented but not in the table`);
});

test("every code names the outcome kind its request's record carries", () => {
  // The codes that end a request some other way than a refusal; every other code is `rejected`.
  const notRejected: Record<string, string> = {
    scheduler_preempted: "preempted",
    scheduler_client_cancelled: "cancelled",
    admission_client_cancelled: "cancelled",
    scheduler_queue_timeout: "timeout",
    admission_queue_timeout: "timeout",
    request_header_timeout: "timeout",
    request_body_timeout: "timeout",
    request_body_too_slow: "timeout",
    upstream_timeout: "timeout",
    worker_room_timeout: "timeout",
    upstream_unavailable: "error",
    upstream_reset: "error",
    upstream_bad_response: "error",
    internal_error: "error",
    no_healthy_workers: "error",
  };
  const kinds = new Set(["preempted", "cancelled", "timeout", "error", "rejected"]);
  for (const [code, row] of Object.entries(ERROR_TABLE)) {
    assert.ok(kinds.has(row.outcome), `${code}: outcome ${row.outcome} is not an error outcome kind`);
    assert.equal(row.outcome, notRejected[code] ?? "rejected", `${code}: outcome`);
  }
  for (const code of Object.keys(notRejected)) assert.ok(code in ERROR_TABLE, `${code} is not in the table`);
});
