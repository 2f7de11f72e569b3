/**
 * The terminal summary of a report: per policy and class, requests, completions, rejections,
 * queue wait, TTFT and throughput; per model pool (with several) its admissions, queue wait and
 * goodput; fairness per class; the scenario's expectations per policy.
 */
import { CLASSES_HIGH_TO_LOW } from "@sluice/scheduler/core/class.js";
import type { CapacityWindow } from "./capacity-report.js";
import type { PolicyReport, PoolStats, Report } from "./report.js";
import type { PolicyName } from "./scenario.js";

function pad(cells: string[][]): string {
  const widths = cells[0]!.map((_, i) => Math.max(...cells.map((r) => (r[i] ?? "").length)));
  return cells
    .map((r) =>
      r
        .map((c, i) => (i < 2 ? c.padEnd(widths[i]!) : c.padStart(widths[i]!)))
        .join("  ")
        .trimEnd(),
    )
    .join("\n");
}

const ms = (v: number | null) =>
  v === null ? "-" : v >= 10000 ? `${(v / 1000).toFixed(1)}s` : `${Math.round(v)}`;
const pct = (v: number | null) => (v === null ? "-" : `${(v * 100).toFixed(1)}%`);
/** A ratio to two places ("-" when nothing was measured). */
const ratio = (v: number | null) => (v === null ? "-" : v.toFixed(2));
const num = (v: number) =>
  v >= 1e6 ? `${(v / 1e6).toFixed(2)}M` : v >= 1e4 ? `${(v / 1e3).toFixed(1)}k` : `${Math.round(v)}`;

/** Per class, "class 97.5%" for TPOT windows in SLO, and for the share shed (classes with any). */
export function classSummaries(
  w: CapacityWindow,
  format: (v: number | null) => string,
): { inSlo: string; shed: string } {
  const entries = Object.entries(w.classes);
  return {
    inSlo: entries
      .filter(([, c]) => c?.tpot_slo_attainment !== null && c?.tpot_slo_attainment !== undefined)
      .map(([c, v]) => `${c} ${format(v!.tpot_slo_attainment)}`)
      .join(", "),
    shed: entries
      .filter(([, c]) => (c?.shed_fraction ?? 0) > 0)
      .map(([c, v]) => `${c} ${format(v!.shed_fraction)}`)
      .join(", "),
  };
}

export function summaryTable(report: Report): string {
  const s = report.scenario;
  const policies = Object.keys(report.policies) as PolicyName[];
  const out: string[] = [];
  out.push(
    `scenario ${s.name} (${s.file}), seed ${s.seed}, ${s.duration_s} s, ${s.workers.length} workers, capacity ${s.capacity}`,
  );
  if (s.description) out.push(s.description);
  out.push("");
  const rows: string[][] = [
    [
      "policy",
      "class",
      "requests",
      "done",
      "rejected",
      "failed",
      "wait p50",
      "wait p99",
      "ttft p99",
      "tpot p99",
      "e2e p99",
      "tok/s",
      "goodput",
      "pred err p50",
    ],
  ];
  for (const p of policies) {
    const r = report.policies[p]!;
    for (const c of CLASSES_HIGH_TO_LOW) {
      const st = r.classes[c];
      if (!st) continue;
      const rej = Object.values(st.rejected).reduce((a, b) => a + (b ?? 0), 0);
      const failed = Object.values(st.failed).reduce((a, b) => a + (b ?? 0), 0) + st.unfinished;
      rows.push([
        p,
        c,
        String(st.requests),
        String(st.completed),
        rej > 0 ? `${rej} (${pct(rej / st.requests)})` : "0",
        String(failed),
        ms(st.queue_wait_ms.p50),
        ms(st.queue_wait_ms.p99),
        ms(st.ttft_ms.p99),
        ms(st.tpot_ms.p99),
        ms(st.e2e_ms.p99),
        num(st.tokens_per_s),
        pct(st.slo_attainment),
        ratio(st.output_prediction_error.p50),
      ]);
    }
  }
  out.push(pad(rows));
  out.push(
    "",
    "latencies in ms; goodput = requests that completed within their class's SLO; pred err = |predicted - actual| / actual output tokens of completed answers (docs/output-prediction.md)",
  );

  if (s.pools !== undefined) {
    const poolRows: string[][] = [
      [
        "policy",
        "pool",
        "window",
        "requests",
        "admitted",
        "rejected",
        "wait p50",
        "wait p99",
        "goodput",
        "queued max",
      ],
    ];
    for (const p of policies) {
      const pools = report.policies[p]!.pools ?? {};
      for (const [name, x] of Object.entries(pools)) {
        const windows: [string, PoolStats][] = [["all", x], ...Object.entries(x.phases)];
        for (const [w, st] of windows) {
          const rej = Object.values(st.rejected).reduce((a, b) => a + (b ?? 0), 0);
          poolRows.push([
            p,
            name,
            w,
            String(st.requests),
            String(st.admitted),
            rej > 0 ? `${rej} (${pct(rej / st.requests)})` : "0",
            ms(st.queue_wait_ms.p50),
            ms(st.queue_wait_ms.p99),
            pct(st.slo_attainment),
            w === "all" ? String(x.queued_max) : "",
          ]);
        }
      }
    }
    out.push(
      "",
      `model pools (${s.pools.map((p) => `${p.name}: ${p.models.join(", ")} on ${p.workers.length} workers`).join("; ")}); sluice admits per pool, fifo and strict for the fleet:`,
      pad(poolRows),
    );
  }

  const fairRows: string[][] = [
    ["policy", "class", "backlogged", "share error", "jain", "gap / VTC bound", "shares (weight)"],
  ];
  for (const p of policies) {
    const r = report.policies[p]!;
    // With several pools, fairness is per pool: rows read "<pool>/<class>".
    const scopes: [string, PolicyReport["fairness"]][] =
      r.pools === undefined
        ? [["", r.fairness]]
        : Object.entries(r.pools).map(([n, x]) => [`${n}/`, x.fairness]);
    for (const [scope, fairness] of scopes)
      for (const c of CLASSES_HIGH_TO_LOW) {
        const f = fairness.all?.[c];
        if (!f) continue;
        fairRows.push([
          p,
          `${scope}${c}`,
          `${f.backlogged_s} s`,
          pct(f.share_error),
          f.jain_index === null ? "-" : f.jain_index.toFixed(3),
          f.service_gap_vtc_ratio === null ? "-" : `${f.service_gap_vtc_ratio.toFixed(2)}`,
          Object.entries(f.tenants)
            .map(([t, x]) => `${t} ${pct(x.share)} (${x.weight})`)
            .join(", "),
        ]);
      }
  }
  if (fairRows.length > 1)
    out.push("", "fairness while every tenant of the class is backlogged:", pad(fairRows));

  const settings = s.capacity_settings;
  const capacityShown =
    settings.load_shedding ||
    settings.keyed_shedding ||
    policies.some((p) => report.policies[p]!.capacity.mode === "adaptive");
  if (capacityShown) {
    const capRows: string[][] = [
      [
        "policy",
        "window",
        "mode",
        "limit median",
        "range",
        "converged",
        "goodput/s",
        "TPOT p99 in SLO",
        "shed",
      ],
    ];
    for (const p of policies) {
      const r = report.policies[p]!;
      for (const [w, x] of Object.entries(r.capacity.windows)) {
        const { inSlo, shed } = classSummaries(x, pct);
        capRows.push([
          p,
          w,
          r.capacity.mode,
          x.limit ? String(x.limit.final_median) : "-",
          x.limit ? `${x.limit.min}..${x.limit.max}` : "-",
          x.convergence_s === null ? "-" : `${x.convergence_s} s`,
          x.goodput_rps.toFixed(1),
          inSlo || "-",
          shed || "0",
        ]);
      }
    }
    out.push(
      "",
      `capacity per window (limit median over its second half; converged: stays within 20% of it; goodput and TPOT windows counted after that; TPOT windows ${report.policies[policies[0]!]!.timeseries.slo_windows.window_s} s):`,
      pad(capRows),
    );
  }

  const engineRows: string[][] = [
    [
      "policy",
      "window",
      "engine queue p99",
      "of ttft p99",
      "kv at saturation",
      "saturated",
      "engine preemptions",
      "goodput/s",
    ],
  ];
  for (const p of policies) {
    for (const [w, x] of Object.entries(report.policies[p]!.engine)) {
      engineRows.push([
        p,
        w,
        ms(x.queue_ms.p99),
        pct(x.queue_ttft_ratio),
        pct(x.kv_utilization_at_saturation),
        `${x.saturated_s} s`,
        `${x.preemptions} (${pct(x.preemption_share)})`,
        x.goodput_rps.toFixed(1),
      ]);
    }
  }
  out.push(
    "",
    "inside the engine (queue: arrival at the worker to the running batch, preemptions included; of ttft p99: against interactive TTFT p99, target <= 5%; kv at saturation: mean KV use while sluice has work queued, target >= 70%; preemptions: KV-full recomputes per request reaching a worker, target <= 1%):",
    pad(engineRows),
  );

  const exps = report.policies[policies[0]!]!.expectations;
  if (exps.length > 0) {
    const expRows: string[][] = [["expectation", "", ...policies]];
    exps.forEach((e, i) => {
      expRows.push([
        e.label,
        "",
        ...policies.map((p) => {
          const x = report.policies[p]!.expectations[i]!;
          const v = x.value === null ? "n/a" : String(x.value);
          return `${x.pass ? "pass" : "FAIL"} ${v}`;
        }),
      ]);
    });
    out.push("", pad(expRows));
  }
  return `${out.join("\n")}\n`;
}
