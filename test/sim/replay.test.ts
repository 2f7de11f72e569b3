/**
 * Trace replay (issue 36): the reader (RFC 4180 CSV, JSONL, Azure and Mooncake column names,
 * wall-clock and numeric timestamps, errors naming file, line and column, 0-token rows), the
 * shipped excerpts replayed at their own times (request counts, alignment, --speed), client
 * retries with the Retry-After, and --export-requests.
 */
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, test } from "node:test";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { parse as parseYaml } from "yaml";
import { loadScenario, resolveScenario, simulate } from "../../src/sim/index.js";
import { alignReplays, loadReplay, parseWallClock } from "../../src/sim/replay.js";
import { runPolicy } from "../../src/sim/run.js";

const exec = promisify(execFile);
const repo = fileURLToPath(new URL("../../", import.meta.url));
const dir = mkdtempSync(join(tmpdir(), "sluice-replay-"));
after(() => rmSync(dir, { recursive: true, force: true }));
const spec = { path: "", prefixBlockTokens: 512, speed: 1, startMs: 0 };

function file(name: string, text: string): string {
  const p = join(dir, name);
  writeFileSync(p, text);
  return p;
}

test("Azure's wall-clock timestamps are read to the microsecond, as UTC", () => {
  const a = parseWallClock("2023-11-16 18:15:46.6805900");
  const b = parseWallClock("2023-11-16 18:15:46.6805910");
  assert.equal(a, Date.UTC(2023, 10, 16, 18, 15, 46) + 680.59);
  // A float64 of epoch milliseconds keeps a quarter of a microsecond.
  assert.ok(Math.abs(b - a - 0.001) < 0.0003, `${b - a}`);
  assert.ok(Number.isNaN(parseWallClock("2023-13-16 18:15:46")));
  assert.ok(Number.isNaN(parseWallClock("yesterday")));
});

test("CSV: RFC 4180 quoting, CRLF, Azure's column names found without being given, a 0-token row", () => {
  const p = file(
    "azure.csv",
    'note,TIMESTAMP,ContextTokens,GeneratedTokens\r\n"a, ""quoted""\r\nnote",2023-11-16 18:15:46.5,374,44\r\nb,2023-11-16 18:15:48.0,0,0\r\n',
  );
  const tr = loadReplay(p, spec, "s.yaml: tenants.0.arrival.path");
  assert.deepEqual([...tr.prompt], [374, 0]);
  assert.deepEqual([...tr.output], [44, 0]);
  alignReplays([tr]);
  assert.deepEqual([...tr.t], [0, 1500]);
});

test("JSONL: Mooncake's names and hash_ids, ms timestamps; rows out of order are replayed in time order", () => {
  const p = file(
    "mc.jsonl",
    [
      '{"timestamp": 3000, "input_length": 1100, "output_length": 5, "hash_ids": [0, 7, 8]}',
      '{"timestamp": 0, "input_length": 600, "output_length": 3, "hash_ids": [0, 1]}',
      "",
    ].join("\n"),
  );
  const tr = loadReplay(p, { ...spec, prefixBlocks: "hash_ids" }, "x");
  assert.deepEqual([...tr.order], [1, 0]);
  assert.deepEqual([...tr.blocks.subarray(tr.blockStart[0]!, tr.blockStart[1]!)], [0, 7, 8]);
  assert.deepEqual([...tr.blocks.subarray(tr.blockStart[1]!, tr.blockStart[2]!)], [0, 1]);
  assert.deepEqual([...tr.t], [3000, 0]);
  // Seconds when told so.
  const s = loadReplay(p, { ...spec, timestampUnit: "s" }, "x");
  assert.deepEqual([...s.t], [3_000_000, 0]);
});

test("a bad row is an error naming the file, the line and the column", () => {
  const bad = file("bad.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n1,10,5\n2,ten,5\n");
  assert.throws(
    () => loadReplay(bad, spec, "s.yaml: tenants.0.arrival.path"),
    (e: Error) =>
      e.message ===
      `s.yaml: tenants.0.arrival.path: ${bad}: line 3, column ContextTokens: must be a token count (an integer >= 0), got "ten"`,
  );
  const when = file(
    "when.csv",
    "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,10,5\nnoon,1,1\n",
  );
  assert.throws(() => loadReplay(when, spec, "x"), /when\.csv: line 3, column TIMESTAMP: must be a number/);
  const open = file("open.csv", 'TIMESTAMP,ContextTokens,GeneratedTokens\n1,"10,5\n');
  assert.throws(
    () => loadReplay(open, spec, "x"),
    /open\.csv: line 2, column ContextTokens: a quoted field is not closed/,
  );
  const short = file("short.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n1,10\n");
  assert.throws(
    () => loadReplay(short, spec, "x"),
    /short\.csv: line 2, column 3: has 2 fields, the header 3/,
  );
  const json = file(
    "bad.jsonl",
    '{"timestamp": 0, "input_length": 5, "output_length": 1}\n{"timestamp": 1, "input_length": -5, "output_length": 1}\n',
  );
  assert.throws(
    () => loadReplay(json, spec, "x"),
    /bad\.jsonl: line 2, column input_length: must be a token count/,
  );
  const cols = file("cols.csv", "when,in,out\n1,2,3\n");
  assert.throws(
    () => loadReplay(cols, spec, "x"),
    /cols\.csv: line 1, column timestamp: the header \(when, in, out\) has no timestamp column/,
  );
  // Named columns are used as given.
  const tr = loadReplay(cols, { ...spec, timestamp: "when", promptTokens: "in", outputTokens: "out" }, "x");
  assert.deepEqual([...tr.prompt], [2]);
});

const azure = () =>
  loadScenario(join(repo, "scenarios", "azure-conv-code.yaml"), { policies: ["fifo", "strict"] });

test("the Azure excerpt replays every row at its own time, conversation and code aligned", async () => {
  const scenario = azure();
  const run = await runPolicy(scenario, "strict", { attempts: true });
  const rows = run.attempts!;
  const firsts = (tenant: string) => rows.filter((r) => r.tenant === tenant && r.attempt === 1);
  // traces/azure-conv-10m.csv has 2,863 rows, azure-code-10m.csv 1,004.
  assert.equal(firsts("conv").length, 2863);
  assert.equal(firsts("code").length, 1004);
  // The code service's first row is 77.29944 s after the conversation's (18:17:03.97996 - 18:15:46.68059).
  assert.equal(Math.min(...firsts("conv").map((r) => r.arrival)), 0);
  assert.ok(Math.abs(Math.min(...firsts("code").map((r) => r.arrival)) - 77_299.37) < 0.01);
  // Every request is logged once, however many attempts it took.
  assert.equal(run.log.size, 2863 + 1004);
  // Arrivals run to the last row: the scenario's duration comes from the traces.
  assert.ok(scenario.durationMs > 599_000 && scenario.durationMs < 600_000, `${scenario.durationMs}`);
  // --speed 2: the same rows in half the time.
  const fast = loadScenario(join(repo, "scenarios", "azure-conv-code.yaml"), { speed: 2 });
  assert.ok(Math.abs(fast.durationMs - scenario.durationMs / 2) < 1, `${fast.durationMs}`);
});

test("the Azure excerpt's headline figures: strict keeps conversation waits well under fifo's", async () => {
  const r = await simulate(azure());
  const fifo = r.policies.fifo!.classes.interactive!;
  const strict = r.policies.strict!.classes.interactive!;
  assert.equal(fifo.requests, 2863);
  assert.equal(strict.requests, 2863);
  assert.ok(
    strict.queue_wait_ms.p99! * 5 < fifo.queue_wait_ms.p99!,
    `${strict.queue_wait_ms.p99} vs ${fifo.queue_wait_ms.p99}`,
  );
});

test("the Mooncake excerpt: its prefix blocks hit the workers' caches, and at 2x the KV cache binds", async () => {
  const path = join(repo, "scenarios", "mooncake-conv.yaml");
  const r = await simulate(loadScenario(path, { policies: ["fifo"] }));
  const fifo = r.policies.fifo!;
  // Split in two by conversation (arrival.split): every row goes to exactly one tenant.
  const chat = fifo.tenants["kimi-chat"]!.requests;
  const api = fifo.tenants["kimi-api"]!.requests;
  assert.equal(chat + api, 1750);
  assert.ok(chat > 700 && api > 700, `${chat} / ${api}`);
  assert.equal(fifo.classes.interactive!.requests, chat);
  const cached = fifo.workers.reduce((n, w) => n + w.cached_prompt_tokens, 0);
  assert.ok(cached > 1_000_000, `cached ${cached}`);
  // Twice as fast on the same fleet: the 70B workers' KV cache (486,595 tokens each) fills and the
  // engines preempt and recompute (issue 36: it never bound, 6% peak).
  const fast = (await simulate(loadScenario(path, { policies: ["fifo"], speed: 2 }))).policies.fifo!;
  assert.ok(
    fast.workers.some((w) => w.kv_peak_tokens > 486_595 * 0.99),
    `KV peaks ${fast.workers.map((w) => w.kv_peak_tokens)}`,
  );
  const pre = fast.workers.reduce((n, w) => n + w.kv_preemptions, 0);
  const recomputed = fast.workers.reduce((n, w) => n + w.recomputed_tokens, 0);
  assert.ok(pre > 0 && recomputed > 0, `${pre} preemptions, ${recomputed} tokens recomputed`);
});

test("clients re-send refused requests after the Retry-After, else a backoff; max_attempts bounds them", async () => {
  // One tiny worker and a queue of one: most requests are refused with 429 (queue full).
  const doc = parseYaml(`
seed: 1
workers: [{profile: toy, max_running: 1}]
policy: {legacy: {max_concurrent_requests: 1, queue_size: 1}}
policies: [fifo]
tenants:
  - name: a
    arrival: {process: replay, path: trace.csv}
    retry: {statuses: [429], max_attempts: 3}
  - name: b
    arrival: {process: replay, path: trace.csv}
`);
  const rows = ["TIMESTAMP,ContextTokens,GeneratedTokens"];
  for (let i = 0; i < 20; i++) rows.push(`${i * 0.01},200,50`);
  file("trace.csv", `${rows.join("\n")}\n`);
  const scenario = resolveScenario(doc, { file: "retry.yaml", baseDir: dir });
  const run = await runPolicy(scenario, "fifo", { attempts: true });
  const att = run.attempts!;
  const a = att.filter((r) => r.tenant === "a");
  const b = att.filter((r) => r.tenant === "b");
  // b never retries; a re-sends each 429 up to three attempts in all.
  assert.ok(b.every((r) => r.attempt === 1));
  assert.ok(b.some((r) => r.code === "admission_queue_full" && r.status === 429 && r.outcome === "refused"));
  assert.ok(a.some((r) => r.attempt === 3));
  assert.ok(a.every((r) => r.attempt <= 3));
  for (const r of a.filter((x) => x.outcome === "retried")) {
    const next = a.find((x) => x.request === r.request && x.attempt === r.attempt + 1)!;
    // admission_queue_full carries Retry-After: 1 (the error table).
    assert.ok(Math.abs(next.arrival - (r.end + 1000)) < 1e-6, `${next.arrival} vs ${r.end}`);
  }
  // Without honor_retry_after: 1 s, 2 s (the documented backoff).
  (doc as { tenants: { retry?: unknown }[] }).tenants[0]!.retry = {
    statuses: [429],
    max_attempts: 3,
    honor_retry_after: false,
  };
  const run2 = await runPolicy(resolveScenario(doc, { file: "retry.yaml", baseDir: dir }), "fifo", {
    attempts: true,
  });
  const a2 = run2.attempts!.filter((r) => r.tenant === "a");
  const second = a2.find((r) => r.attempt === 2 && r.outcome === "retried")!;
  const third = a2.find((r) => r.request === second.request && r.attempt === 3)!;
  assert.ok(Math.abs(third.arrival - (second.end + 2000)) < 1e-6);
  // A request counts once in the report, by its last attempt.
  assert.equal(run.log.size, 40);
  assert.ok(run.retries.reduce((x, y) => x + y, 0) > 0);
});

test("replay keys are checked: sizes come from the trace, duration may be left out only by replays", () => {
  const base = (extra: string) =>
    parseYaml(`
seed: 1
workers: [{profile: toy}]
tenants:
  - name: a
    arrival: {process: replay, path: trace.csv}
${extra}`);
  assert.throws(
    () => resolveScenario(base("    prompt_tokens: 10"), { file: "r.yaml", baseDir: dir }),
    /r\.yaml: tenants\.0\.prompt_tokens: a replay takes its sizes from the trace/,
  );
  assert.throws(
    () =>
      resolveScenario(
        base("  - {name: b, arrival: {process: poisson, rate: 1}, prompt_tokens: 5, output_tokens: 5}"),
        {
          file: "r.yaml",
          baseDir: dir,
        },
      ),
    /r\.yaml: duration: is required/,
  );
  assert.throws(
    () => loadScenario(join(repo, "scenarios", "steady-mixed.yaml"), { speed: 2 }),
    /steady-mixed\.yaml: --speed scales replayed traces, and no tenant replays one/,
  );
  assert.throws(
    () =>
      resolveScenario(
        parseYaml(
          "workers: [{profile: toy}]\ntenants: [{name: a, arrival: {process: replay, path: nope.csv}}]",
        ),
        { file: "r.yaml", baseDir: dir },
      ),
    /r\.yaml: tenants\.0\.arrival\.path: cannot read .*nope\.csv: ENOENT/,
  );
  assert.throws(
    () =>
      resolveScenario(
        parseYaml(
          "workers: [{profile: toy}]\ntenants: [{name: a, arrival: {process: replay, path: trace.csv, speed: 0}}]",
        ),
        { file: "r.yaml", baseDir: dir },
      ),
    /r\.yaml: tenants\.0\.arrival\.speed: must be > 0/,
  );
});

test("--export-requests writes one row per attempt with the documented columns; --speed scales the replay", async () => {
  const out = join(dir, "requests.csv");
  const { stdout } = await exec(
    process.execPath,
    [
      "--import",
      "tsx",
      join(repo, "src/cli/main.ts"),
      "simulate",
      join(repo, "scenarios", "azure-conv-code.yaml"),
      "--policies",
      "fifo",
      "--speed",
      "4",
      "--export-requests",
      out,
    ],
    { cwd: repo, maxBuffer: 64 * 1024 * 1024 },
  );
  assert.match(stdout, /fifo\s+interactive\s+2863/);
  const lines = readFileSync(out, "utf8").trim().split("\n");
  assert.equal(
    lines[0],
    "policy,request_id,tenant,class,attempt,arrival_ms,admitted_ms,first_token_ms,end_ms,outcome,code,status,prompt_tokens,output_tokens,cached_prompt_tokens,worker,preempted_prefill_tokens,recomputed_tokens",
  );
  const rows = lines.slice(1).map((l) => l.split(","));
  assert.equal(rows.filter((r) => r[4] === "1").length, 2863 + 1004);
  // At 4x the last row arrives by 150 s.
  assert.ok(Math.max(...rows.filter((r) => r[4] === "1").map((r) => Number(r[5]))) < 150_000);
  const ok = rows.find((r) => r[9] === "ok")!;
  assert.equal(ok[11], "200");
  assert.match(ok[15]!, /^w[01]$/);
});

test("--knee on a replay scenario sweeps closed loops with the trace's sizes", async () => {
  const { kneeSweep } = await import("../../src/sim/knee.js");
  const k = await kneeSweep(azure(), { concurrencies: [8, 64], durationSecs: 30, warmupSecs: 10 });
  assert.equal(k.points.length, 2);
  assert.ok(k.points[1]!.throughput_rps > k.points[0]!.throughput_rps);
});

test("the file is streamed: records cut anywhere by the chunks (in a quoted line break, inside CRLF) read the same", async () => {
  const { csvRecords, csvStream, lines } = await import("../../src/sim/replay.js");
  const text = 'a,b\r\n1,"x\r\ny"\r\n2,"q ""z"""\r\n3,plain\r\n';
  const whole = [...csvRecords(text)];
  assert.deepEqual(
    whole.map((r) => [r.line, ...r.fields]),
    [
      [1, "a", "b"],
      [2, "1", "x\r\ny"],
      [4, "2", 'q "z"'],
      [5, "3", "plain"],
    ],
  );
  for (let cut = 1; cut < text.length; cut++) {
    for (let cut2 = cut + 1; cut2 <= text.length; cut2 += 3) {
      const parts = [text.slice(0, cut), text.slice(cut, cut2), text.slice(cut2)];
      assert.deepEqual([...csvStream(parts)], whole, `cut at ${cut}, ${cut2}`);
    }
  }
  const jl = '{"a": 1}\n\n{"a": 2}\n{"a": 3}';
  for (let cut = 1; cut < jl.length; cut++) {
    const got = [...lines([jl.slice(0, cut), jl.slice(cut)])].filter((l) => l.text !== "");
    assert.deepEqual(
      got.map((l) => [l.line, l.text]),
      [
        [1, '{"a": 1}'],
        [3, '{"a": 2}'],
        [4, '{"a": 3}'],
      ],
    );
  }
});

test("arrival.start skips into the trace: rows before it are not sent, the rest arrive from 0", async () => {
  const doc = parseYaml(readFileSync(join(repo, "scenarios", "azure-conv-code.yaml"), "utf8")) as {
    tenants: { arrival: Record<string, unknown> }[];
  };
  for (const t of doc.tenants) t.arrival.start = "300s";
  const scenario = resolveScenario(
    doc,
    { file: "azure.yaml", baseDir: join(repo, "scenarios") },
    { policies: ["fifo"] },
  );
  const run = await runPolicy(scenario, "fifo", { attempts: true });
  const firsts = run.attempts!.filter((r) => r.attempt === 1);
  // Rows at or after 18:20:46.68059 (300 s after the first conversation row).
  const after = (file: string) =>
    readFileSync(join(repo, "traces", file), "utf8")
      .trim()
      .split("\n")
      .slice(1)
      .filter((l) => l.split(",")[0]! >= "2023-11-16 18:20:46.6805900").length;
  assert.equal(firsts.length, after("azure-conv-10m.csv") + after("azure-code-10m.csv"));
  assert.ok(Math.min(...firsts.map((r) => r.arrival)) < 1000);
  assert.ok(scenario.durationMs < 300_000);
});

test("arrival.split: a trace's rows go to exactly one part, a conversation's turns (same second block) to the same one", () => {
  const p = file(
    "split.jsonl",
    [
      '{"timestamp": 0, "input_length": 1100, "output_length": 5, "hash_ids": [0, 7, 8]}',
      '{"timestamp": 1, "input_length": 1600, "output_length": 5, "hash_ids": [0, 7, 8, 9]}',
      '{"timestamp": 2, "input_length": 600, "output_length": 3, "hash_ids": [0, 4]}',
      '{"timestamp": 3, "input_length": 100, "output_length": 3, "hash_ids": [5]}',
      "",
    ].join("\n"),
  );
  const part = (k: number) =>
    loadReplay(p, { ...spec, prefixBlocks: "hash_ids", split: { of: 2, part: k } }, "x");
  const odd = part(1);
  const even = part(0);
  assert.deepEqual([...odd.prompt], [1100, 1600, 100]);
  assert.deepEqual([...even.prompt], [600]);
  assert.deepEqual([...odd.blocks.subarray(odd.blockStart[1]!, odd.blockStart[2]!)], [0, 7, 8, 9]);
  assert.deepEqual([...odd.blocks.subarray(odd.blockStart[2]!, odd.blockStart[3]!)], [5]);
  assert.throws(
    () =>
      resolveScenario(
        parseYaml(
          "workers: [{profile: toy}]\ntenants: [{name: a, arrival: {process: replay, path: split.jsonl, split: {of: 2, part: 2}}}]",
        ),
        { file: "r.yaml", baseDir: dir },
      ),
    /r\.yaml: tenants\.0\.arrival\.split\.part: must be < of/,
  );
});
