/**
 * A small SVG writer for the simulator's charts: line panels side by side (one per policy, on
 * shared axes) and grouped bars. Plain strings, no browser, deterministic output.
 */
import { PRIORITY_CLASSES, type PriorityClass } from "@sluice/scheduler/core/class.js";
import type { Report } from "./report.js";
import type { PolicyName } from "./scenario.js";

const CLASS_COLORS: Record<PriorityClass, string> = {
  system: "#6a3d9a",
  interactive: "#1f78b4",
  default: "#33a02c",
  bulk: "#ff7f00",
};
const PALETTE = [
  "#1f78b4",
  "#e31a1c",
  "#33a02c",
  "#ff7f00",
  "#6a3d9a",
  "#b15928",
  "#a6cee3",
  "#fb9a99",
  "#b2df8a",
  "#cab2d6",
];
const POLICY_COLORS: Record<PolicyName, string> = {
  fifo: "#999999",
  strict: "#fdb462",
  sluice: "#1f78b4",
  "sluice-adaptive": "#e31a1c",
};

function esc(s: string): string {
  return s.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;").replace(/"/g, "&quot;");
}

function f(x: number): string {
  return (Math.round(x * 10) / 10).toString();
}

/** Round tick steps (1, 2, 5 x 10^k) covering [0, max]. */
export function ticks(max: number, count = 5): number[] {
  if (!(max > 0)) return [0];
  const raw = max / count;
  const mag = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 5, 10].map((m) => m * mag).find((s) => s >= raw) ?? 10 * mag;
  const out: number[] = [0];
  while (out[out.length - 1]! < max - step * 1e-9) out.push(Math.round(out.length * step * 1e6) / 1e6);
  return out;
}

/** Ticks on a time axis in seconds, at round clock steps, within [0, max]. */
function timeTicks(max: number): number[] {
  const steps = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400];
  const step = steps.find((s) => max / s <= 7) ?? 86400;
  const out: number[] = [];
  for (let v = 0; v <= max + 1e-9; v += step) out.push(v);
  return out;
}

function label(v: number): string {
  if (v >= 1e6) return `${f(v / 1e6)}M`;
  if (v >= 1e4) return `${f(v / 1e3)}k`;
  return String(Math.round(v * 100) / 100);
}

function clock(s: number): string {
  if (s === 0) return "0";
  if (s >= 3600)
    return s % 3600 === 0
      ? `${s / 3600}h`
      : `${Math.floor(s / 3600)}h${String((s % 3600) / 60).padStart(2, "0")}`;
  if (s >= 60)
    return s % 60 === 0 ? `${s / 60}m` : `${Math.floor(s / 60)}m${String(s % 60).padStart(2, "0")}`;
  return `${Math.round(s)}s`;
}

interface Line {
  name: string;
  color: string;
  values: number[];
  dashed?: boolean;
}

interface Panel {
  title: string;
  x: number[];
  lines: Line[];
}

/** Averages (or takes the max of) buckets so a series has at most `limit` points. */
function downsample(
  x: number[],
  ys: number[][],
  limit: number,
  mode: "mean" | "max",
): { x: number[]; ys: number[][] } {
  if (x.length <= limit) return { x, ys };
  const k = Math.ceil(x.length / limit);
  const nx: number[] = [];
  const nys = ys.map(() => [] as number[]);
  for (let i = 0; i < x.length; i += k) {
    nx.push(x[i]!);
    ys.forEach((y, j) => {
      const part = y.slice(i, i + k);
      const v = mode === "max" ? Math.max(...part) : part.reduce((a, b) => a + b, 0) / part.length;
      nys[j]!.push(v);
    });
  }
  return { x: nx, ys: nys };
}

/** Line panels side by side with a shared y axis (linear, or log10 from 1). */
function linePanels(title: string, yLabel: string, panels: Panel[], options: { log?: boolean } = {}): string {
  const pw = 420;
  const ph = 240;
  const ml = 64;
  const mr = 30;
  const mt = 58;
  const mb = 64;
  const width = ml + panels.length * (pw + mr) + 8;
  const allLines = panels.flatMap((p) => p.lines);
  const legend = [...new Map(allLines.map((l) => [l.name, l])).values()];
  const height = mt + ph + mb + 8;
  let ymax = 0;
  for (const l of allLines) for (const v of l.values) if (Number.isFinite(v) && v > ymax) ymax = v;
  const log = options.log === true;
  // One time axis for every panel: the longest run's.
  let xmax = 1;
  for (const p of panels) if (p.x.length > 0) xmax = Math.max(xmax, p.x[p.x.length - 1]!);
  let yTicks: number[];
  let ytop: number;
  if (log) {
    const top = Math.max(1, Math.ceil(Math.log10(Math.max(ymax, 10))));
    yTicks = Array.from({ length: top + 1 }, (_, i) => 10 ** i);
    ytop = top;
  } else {
    yTicks = ticks(ymax > 0 ? ymax * 1.05 : 1);
    ytop = yTicks[yTicks.length - 1]!;
  }
  const yOf = (v: number) => {
    const u = log ? Math.log10(Math.max(1, v)) / ytop : v / ytop;
    return mt + ph - Math.min(1, Math.max(0, u)) * ph;
  };
  const out: string[] = [];
  out.push(
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" font-family="system-ui, sans-serif" font-size="11">`,
    `<title>${esc(title)}</title>`,
    `<rect width="100%" height="100%" fill="#ffffff"/>`,
    `<text x="${ml}" y="20" font-size="15" font-weight="600">${esc(title)}</text>`,
  );
  legend.forEach((l, i) => {
    const x = ml + i * 110;
    out.push(
      `<line x1="${x}" y1="36" x2="${x + 18}" y2="36" stroke="${l.color}" stroke-width="2.5"${l.dashed ? ' stroke-dasharray="5 3"' : ""}/>`,
      `<text x="${x + 23}" y="40">${esc(l.name)}</text>`,
    );
  });
  panels.forEach((p, pi) => {
    const x0 = ml + pi * (pw + mr);
    const xOf = (v: number) => x0 + (v / xmax) * pw;
    out.push(`<rect x="${x0}" y="${mt}" width="${pw}" height="${ph}" fill="#fafafa" stroke="#cccccc"/>`);
    for (const t of yTicks) {
      const y = f(yOf(t));
      out.push(`<line x1="${x0}" y1="${y}" x2="${x0 + pw}" y2="${y}" stroke="#e6e6e6"/>`);
      if (pi === 0) out.push(`<text x="${x0 - 6}" y="${y}" text-anchor="end" dy="4">${label(t)}</text>`);
    }
    for (const t of timeTicks(xmax)) {
      const x = f(xOf(t));
      out.push(
        `<line x1="${x}" y1="${mt + ph}" x2="${x}" y2="${mt + ph + 4}" stroke="#999999"/>`,
        `<text x="${x}" y="${mt + ph + 16}" text-anchor="middle">${clock(t)}</text>`,
      );
    }
    out.push(
      `<text x="${x0 + pw / 2}" y="${mt + ph + 40}" text-anchor="middle" font-size="13" font-weight="600">${esc(p.title)}</text>`,
    );
    for (const l of p.lines) {
      if (l.values.length === 0) continue;
      const pts = l.values
        .map((v, i) => `${f(xOf(p.x[i] ?? 0))},${f(yOf(Number.isFinite(v) ? v : 0))}`)
        .join(" ");
      out.push(
        `<polyline fill="none" stroke="${l.color}" stroke-width="1.5"${l.dashed ? ' stroke-dasharray="5 3"' : ""} points="${pts}"/>`,
      );
    }
  });
  out.push(
    `<text transform="translate(14 ${mt + ph / 2}) rotate(-90)" text-anchor="middle">${esc(yLabel)}${log ? " (log)" : ""}</text>`,
    "</svg>",
  );
  return `${out.join("\n")}\n`;
}

interface BarGroup {
  label: string;
  bars: { name: string; value: number; color: string }[];
  /** A reference value drawn as a black tick across the group (e.g. the weight's share). */
  marker?: number | undefined;
}

function groupedBars(title: string, yLabel: string, groups: BarGroup[], yMax?: number): string {
  const bw = 26;
  const gap = 26;
  const ml = 64;
  const mt = 58;
  const ph = 220;
  const mb = 56;
  const widths = groups.map((g) => g.bars.length * bw);
  const legend = [...new Map(groups.flatMap((g) => g.bars).map((b) => [b.name, b.color])).entries()];
  const width = Math.round(
    Math.max(
      ml + widths.reduce((a, b) => a + b + gap, 0) + 24,
      ml + legend.length * 90 + 130,
      ml + title.length * 9.5,
    ),
  );
  const height = mt + ph + mb;
  let max = 0;
  for (const g of groups) for (const b of g.bars) max = Math.max(max, b.value, g.marker ?? 0);
  const yTicks = yMax !== undefined && yMax >= max ? ticks(yMax) : ticks(max > 0 ? max * 1.05 : 1);
  const top = yTicks[yTicks.length - 1]!;
  const yOf = (v: number) => mt + ph - (v / top) * ph;
  const out: string[] = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" font-family="system-ui, sans-serif" font-size="11">`,
    `<title>${esc(title)}</title>`,
    `<rect width="100%" height="100%" fill="#ffffff"/>`,
    `<text x="${ml}" y="20" font-size="15" font-weight="600">${esc(title)}</text>`,
  ];
  legend.forEach(([name, color], i) => {
    const x = ml + i * 90;
    out.push(
      `<rect x="${x}" y="30" width="12" height="12" fill="${color}"/>`,
      `<text x="${x + 17}" y="40">${esc(name)}</text>`,
    );
  });
  const lx = ml + legend.length * 90;
  out.push(
    `<line x1="${lx}" y1="36" x2="${lx + 18}" y2="36" stroke="#000000" stroke-width="2"/>`,
    `<text x="${lx + 23}" y="40">weight's share</text>`,
  );
  for (const t of yTicks) {
    const y = f(yOf(t));
    out.push(
      `<line x1="${ml}" y1="${y}" x2="${width - 12}" y2="${y}" stroke="#e6e6e6"/>`,
      `<text x="${ml - 6}" y="${y}" text-anchor="end" dy="4">${label(t)}</text>`,
    );
  }
  // Groups centred in equal slots across the plot.
  const slot = (width - ml - 12) / Math.max(1, groups.length);
  groups.forEach((g, gi) => {
    const x = ml + gi * slot + (slot - widths[gi]!) / 2;
    g.bars.forEach((b, bi) => {
      const y = yOf(b.value);
      out.push(
        `<rect x="${f(x + bi * bw)}" y="${f(y)}" width="${bw - 3}" height="${f(mt + ph - y)}" fill="${b.color}"/>`,
      );
    });
    if (g.marker !== undefined) {
      const y = f(yOf(g.marker));
      out.push(
        `<line x1="${f(x - 4)}" y1="${y}" x2="${f(x + widths[gi]! + 1)}" y2="${y}" stroke="#000000" stroke-width="2"/>`,
      );
    }
    out.push(
      `<text x="${f(x + widths[gi]! / 2)}" y="${mt + ph + 16}" text-anchor="middle">${esc(g.label)}</text>`,
    );
  });
  out.push(
    `<line x1="${ml}" y1="${mt + ph}" x2="${width - 12}" y2="${mt + ph}" stroke="#999999"/>`,
    `<text transform="translate(14 ${mt + ph / 2}) rotate(-90)" text-anchor="middle">${esc(yLabel)}</text>`,
    "</svg>",
  );
  return `${out.join("\n")}\n`;
}

/** The report's charts, by file name. */
export function reportCharts(report: Report): Record<string, string> {
  const name = report.scenario.name;
  const policies = Object.keys(report.policies) as PolicyName[];
  const charts: Record<string, string> = {};
  const LIMIT = 720;
  const panelsOf = (pick: (p: PolicyName) => { lines: Line[]; x: number[] }, mode: "mean" | "max"): Panel[] =>
    policies.map((p) => {
      const { lines, x } = pick(p);
      const d = downsample(
        x,
        lines.map((l) => l.values),
        LIMIT,
        mode,
      );
      return { title: p, x: d.x, lines: lines.map((l, i) => ({ ...l, values: d.ys[i]! })) };
    });
  const classLines = (p: PolicyName, metric: "inflight" | "wait_max_ms" | "queued") => {
    const ts = report.policies[p]!.timeseries;
    return PRIORITY_CLASSES.filter((c) => ts.classes[c] !== undefined)
      .reverse()
      .map((c) => ({ name: c, color: CLASS_COLORS[c], values: ts.classes[c]![metric] }));
  };
  charts["inflight.svg"] = linePanels(
    `${name}: requests in flight per class`,
    "requests in flight",
    panelsOf((p) => {
      const ts = report.policies[p]!.timeseries;
      return {
        x: ts.t,
        lines: [
          ...classLines(p, "inflight"),
          { name: "capacity", color: "#444444", values: ts.capacity, dashed: true },
        ],
      };
    }, "mean"),
  );
  charts["queue-wait.svg"] = linePanels(
    `${name}: longest queue wait per ${report.policies[policies[0]!]!.timeseries.bucket_s} s, per class`,
    "queue wait, ms",
    panelsOf((p) => ({ x: report.policies[p]!.timeseries.t, lines: classLines(p, "wait_max_ms") }), "max"),
    { log: true },
  );
  charts["queued.svg"] = linePanels(
    `${name}: requests waiting for admission per class`,
    "queued requests",
    panelsOf((p) => ({ x: report.policies[p]!.timeseries.t, lines: classLines(p, "queued") }), "mean"),
  );
  charts["tokens.svg"] = linePanels(
    `${name}: tokens served per second, per tenant`,
    "tokens/s (prompt + output)",
    panelsOf((p) => {
      const ts = report.policies[p]!.timeseries;
      return {
        x: ts.t,
        lines: Object.entries(ts.tenants).map(([t, s], i) => ({
          name: t,
          color: PALETTE[i % PALETTE.length]!,
          values: s.tokens_per_s,
        })),
      };
    }, "mean"),
  );
  charts["capacity.svg"] = linePanels(
    `${name}: the capacity limit, requests in flight and queued`,
    "requests",
    panelsOf((p) => {
      const ts = report.policies[p]!.timeseries;
      const sum = (metric: "inflight" | "queued") =>
        ts.t.map((_, i) => Object.values(ts.classes).reduce((a, c) => a + (c?.[metric][i] ?? 0), 0));
      return {
        x: ts.t,
        lines: [
          { name: "limit", color: "#444444", values: ts.capacity, dashed: true },
          { name: "in flight", color: "#1f78b4", values: sum("inflight") },
          { name: "queued", color: "#ff7f00", values: sum("queued") },
        ],
      };
    }, "mean"),
  );
  charts["tpot.svg"] = linePanels(
    `${name}: p99 time per output token per ${report.policies[policies[0]!]!.timeseries.slo_windows.window_s} s, per class (dashed: its SLO)`,
    "p99 TPOT, ms",
    panelsOf((p) => {
      const sw = report.policies[p]!.timeseries.slo_windows;
      const lines: Line[] = [];
      for (const c of [...PRIORITY_CLASSES].reverse()) {
        const x = sw.classes[c];
        if (x === undefined) continue;
        lines.push({ name: c, color: CLASS_COLORS[c], values: x.tpot_p99_ms.map((v) => v ?? Number.NaN) });
        const slo = report.scenario.slo?.[c]?.tpot_ms;
        if (slo !== undefined) {
          lines.push({ name: `${c} SLO`, color: CLASS_COLORS[c], values: sw.t.map(() => slo), dashed: true });
        }
      }
      return { x: sw.t, lines };
    }, "max"),
  );
  const first = report.policies[policies[0]!]!;
  for (const cls of PRIORITY_CLASSES) {
    const f0 = first.fairness.all?.[cls];
    if (f0 === undefined) continue;
    const groups: BarGroup[] = Object.entries(f0.tenants).map(([tenant, t]) => ({
      label: `${tenant} (w ${t.weight})`,
      marker: t.expected_share,
      bars: policies.map((p) => ({
        name: p,
        color: POLICY_COLORS[p],
        value: report.policies[p]!.fairness.all?.[cls]?.tenants[tenant]?.share ?? 0,
      })),
    }));
    charts[`shares-${cls}.svg`] = groupedBars(
      `${name}: ${cls} token shares while every tenant is backlogged`,
      "share of tokens",
      groups,
      1,
    );
  }
  return charts;
}
