// sluice's live dashboard (docs/dashboard.md). Plain browser JavaScript, no framework: it asks for
// the admin token once, keeps it in sessionStorage (this tab only), and reads the admin API's event
// stream with fetch() (EventSource cannot send an Authorization header). Every number carries a
// stable data-testid; every colour has its meaning in text beside it. Text only through
// textContent: tenant names and request ids come from clients.
(() => {
  const TOKEN_KEY = "sluice.adminToken";
  const SNAPSHOT_URL = "api/v1/dashboard/snapshot";
  const EVENTS_URL = "api/v1/dashboard/events";
  const CHART_SPAN_MS = 5 * 60 * 1000;
  const RETRY_MS = 2000;

  const $ = (id) => document.getElementById(id);
  const login = $("login");
  const board = $("board");
  const form = $("token-form");
  const input = $("token-input");
  const tokenError = $("token-error");
  const forget = $("forget");

  let stream; // { controller } of the running stream
  let retryTimer;
  let points = []; // the outcomes chart's points, oldest first
  let outcomesChart;
  let outcomesKeys = "";
  let ledgerChart;
  let ledgerKeys = "";
  let ledgerSpan = [0, 3600];

  // --- connection state ----------------------------------------------------------------------

  const STATES = {
    idle: ["muted", "not connected"],
    checking: ["muted", "checking the token…"],
    live: ["ok", "live"],
    reconnecting: ["warn", "reconnecting…"],
    refused: ["bad", "token refused"],
  };

  function setState(state, detail) {
    const el = $("connection");
    const [tone, text] = STATES[state];
    el.className = `pill ${tone}`;
    el.dataset.state = state;
    el.querySelector(".label").textContent = detail ? `${text} (${detail})` : text;
  }

  // --- formatting ----------------------------------------------------------------------------

  const isNum = (v) => typeof v === "number" && Number.isFinite(v);
  const int = (v) => (isNum(v) ? String(Math.round(v)) : "—");
  const dec = (digits) => (v) => (isNum(v) ? v.toFixed(digits) : "—");
  const pct = (v) => (isNum(v) ? `${(v * 100).toFixed(1)}%` : "—");
  const usd = (v) => (isNum(v) ? `$${v.toFixed(4)}` : "—");
  // Times are 24-hour local time, HH:MM:SS (HH:MM for minutes), the same everywhere on the page:
  // built by hand, since a locale's own format may be 12-hour or show midnight as 24.
  const two = (n) => String(n).padStart(2, "0");
  const hhmm = (ms) => {
    const d = new Date(ms);
    return `${two(d.getHours())}:${two(d.getMinutes())}`;
  };
  const clock = (ms) => `${hhmm(ms)}:${two(new Date(ms).getSeconds())}`;
  /** A <time> element: the text as shown, the instant in datetime and data-value. */
  function timeEl(ms, format = clock, testid) {
    const t = el("time", { testid, "data-value": String(ms) }, format(ms));
    t.dateTime = new Date(ms).toISOString();
    return t;
  }

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null) continue;
      if (k === "class") node.className = v;
      else if (k === "testid") node.dataset.testid = v;
      else if (k.includes("-")) node.setAttribute(k, v);
      else node[k] = v;
    }
    for (const c of children) if (c !== undefined && c !== null) node.append(c);
    return node;
  }

  /** A number cell: formatted text, the raw value in data-value, a stable data-testid. */
  function num(tag, testid, value, format = int, extra = {}) {
    return el(tag, { testid, "data-value": isNum(value) ? String(value) : "", ...extra }, format(value));
  }

  /** A coloured marker with its meaning in words beside it. */
  function badge(tone, text, testid) {
    return el(
      "span",
      { class: `badge ${tone}`, testid },
      el("span", { class: "dot", "aria-hidden": "true" }),
      el("span", { class: "label" }, text),
    );
  }

  function statusTone(status) {
    const s = Number(status);
    if (s < 400) return "ok";
    if (s === 499) return "muted";
    if (s < 500) return "warn";
    return "bad";
  }

  function statusBadge(status, testid) {
    const s = Number(status);
    const meaning =
      s < 300 ? "ok" : s < 400 ? "redirect" : s === 499 ? "client left" : s < 500 ? "refused" : "failed";
    return badge(statusTone(status), `${status} ${meaning}`, testid);
  }

  function bar(fraction, text, tone) {
    const fill = el("span", { class: `fill ${tone}` });
    fill.style.width = `${Math.max(0, Math.min(1, fraction)) * 100}%`;
    return el(
      "span",
      { class: "bar" },
      el("span", { class: "track" }, fill),
      el("span", { class: "bar-text" }, text),
    );
  }

  function replaceRows(tableId, rows) {
    const tbody = $(tableId).tBodies[0];
    tbody.replaceChildren(...rows);
  }

  function emptyRow(tableId, columns, text) {
    replaceRows(tableId, [el("tr", { class: "empty" }, el("td", { colSpan: columns }, text))]);
  }

  function stat(testid, label, value, format = int, note) {
    return [el("dt", {}, label), el("dd", {}, num("span", testid, value, format), note ?? null)];
  }

  // --- panels --------------------------------------------------------------------------------

  function renderGateway(s) {
    const g = s.gateway;
    const mode =
      g.admission_mode === "scheduler"
        ? badge("ok", "priority scheduler", "gateway-admission-mode")
        : badge(
            "warn",
            `legacy${g.fallback_reason ? `: ${g.fallback_reason}` : ""}`,
            "gateway-admission-mode",
          );
    const healthyTone = g.healthy_workers === 0 ? "bad" : g.healthy_workers < g.workers ? "warn" : "ok";
    const healthyText =
      g.healthy_workers === 0 ? "none healthy" : g.healthy_workers < g.workers ? "some down" : "all healthy";
    const shedTone = g.shedding.state === "shedding" ? "warn" : g.shedding.state === "idle" ? "ok" : "muted";
    let ledger;
    if (s.ledger === null) ledger = badge("muted", "off", "ledger-state");
    else if (s.ledger.up) ledger = badge("ok", "up", "ledger-state");
    else ledger = badge("bad", "down: rows wait in the buffer", "ledger-state");
    const nodes = [
      el("dt", {}, "Admission"),
      el("dd", {}, mode),
      el("dt", {}, "Capacity mode"),
      el("dd", {}, el("span", { testid: "gateway-capacity-mode" }, g.capacity_mode)),
      ...stat("gateway-capacity", "Capacity", g.capacity),
      ...stat("gateway-discovered-capacity", "Discovered", g.discovered_capacity),
      ...stat("gateway-pinned-capacity", "Pinned", g.pinned_capacity),
      ...stat(
        "gateway-adaptive-limit",
        "Adaptive limit",
        g.adaptive_limit,
        int,
        g.adaptive_phase ? ` (${g.adaptive_phase})` : null,
      ),
      el("dt", {}, "Workers"),
      el(
        "dd",
        {},
        num("span", "gateway-healthy-workers", g.healthy_workers),
        " of ",
        num("span", "gateway-workers", g.workers),
        " ",
        badge(healthyTone, healthyText, "gateway-workers-state"),
      ),
      ...stat("gateway-inflight", "In flight", g.inflight),
      ...stat("gateway-queued", "Queued", g.queued),
      ...stat("gateway-utilization", "Utilization", g.utilization, pct),
      el("dt", {}, "Shedding"),
      el("dd", {}, badge(shedTone, g.shedding.text, "gateway-shedding")),
      el("dt", {}, "Ledger"),
      el(
        "dd",
        {},
        ledger,
        s.ledger === null
          ? null
          : el(
              "span",
              { class: "aside" },
              " buffered ",
              num("span", "ledger-buffered", s.ledger.buffered_rows),
              ", dropped ",
              num("span", "ledger-dropped", s.ledger.dropped_rows),
              el("br"),
              el("code", { class: "sink", testid: "ledger-sink" }, s.ledger.sink),
            ),
      ),
    ];
    $("gateway").replaceChildren(...nodes);
  }

  /** A class's share of the capacity, from its own in flight; the colour says whether it queues. */
  function busyBadge(c, testid) {
    const [tone, word] =
      c.queued > 0 && c.headroom <= 0
        ? ["bad", "busy, queueing"]
        : c.queued > 0
          ? ["warn", "busy, queueing"]
          : ["ok", "busy"];
    const b = badge(tone, `${(c.busy * 100).toFixed(0)}% ${word}`, testid);
    b.dataset.value = String(c.busy);
    return b;
  }

  const CLASS_COLUMNS = [
    ["Class", "text"],
    ["In flight", "num"],
    ["Queued", "num"],
    ["Queue limit", "num"],
    ["Reserved", "num"],
    ["Headroom", "num"],
    ["Busy", "text"],
    ["In flight / capacity", "text bar-col"],
  ];

  /**
   * The rows of a class table. `prefix` starts their cells' testids (`class-` for the fleet totals,
   * `pool-<name>-class-` for a pool), `rowPrefix` the rows' (`class-row-`, `pool-<name>-class-row-`).
   */
  function classRows(classes, cap, prefix, rowPrefix) {
    return classes.map((c) => {
      const id = (f) => `${prefix}${c.class}-${f}`;
      // The bar is neutral unless the class queues; then its colour and its words say so.
      const tone = c.queued === 0 ? "neutral" : c.headroom <= 0 ? "bad" : "warn";
      return el(
        "tr",
        { testid: `${rowPrefix}${c.class}`, "data-class": c.class },
        el("th", { scope: "row", class: "text" }, c.class),
        num("td", id("inflight"), c.inflight, int, { class: "num" }),
        num("td", id("queued"), c.queued, int, { class: "num" }),
        num("td", id("queue-limit"), c.queue_limit, int, { class: "num" }),
        num("td", id("reserved"), c.reserved, int, { class: "num" }),
        num("td", id("headroom"), c.headroom, int, { class: "num" }),
        el("td", { class: "text" }, busyBadge(c, id("busy"))),
        el(
          "td",
          { class: "text bar-col" },
          bar(cap > 0 ? c.inflight / cap : 0, `${c.inflight} / ${cap}, reserved ${c.reserved}`, tone),
        ),
      );
    });
  }

  function classTableHead() {
    return el(
      "thead",
      {},
      el("tr", {}, ...CLASS_COLUMNS.map(([title, cls]) => el("th", { scope: "col", class: cls }, title))),
    );
  }

  function renderClasses(s) {
    const legacy = s.classes === null;
    $("classes-legacy").hidden = !legacy;
    $("classes").hidden = legacy;
    const single = s.pools.length === 1 ? s.pools[0] : undefined;
    $("fleet-title").textContent =
      s.pools.length > 1
        ? `All ${s.pools.length} pools (fleet totals)`
        : single
          ? `Pool ${single.name === "*" ? "* (every model)" : single.name}`
          : "Fleet";
    if (legacy) return;
    replaceRows("classes", classRows(s.classes, s.gateway.capacity, "class-", "class-row-"));
  }

  /** One block per model pool (with two or more: one pool's numbers are the fleet's, shown above). */
  function renderPools(s) {
    const list = $("pools");
    const multi = s.pools.length > 1;
    list.hidden = !multi;
    if (!multi) {
      list.replaceChildren();
      return;
    }
    list.replaceChildren(
      ...s.pools.map((p) => {
        const id = (f) => `pool-${p.name}-${f}`;
        const healthyTone = p.healthy_workers === 0 ? "bad" : p.healthy_workers < p.workers ? "warn" : "ok";
        const title = el(
          "h3",
          { testid: id("name") },
          p.name === "*" ? "* (every model)" : p.name,
          p.models.length > 1 ? el("small", {}, ` serves ${p.models.join(", ")}`) : null,
        );
        const stats = el(
          "dl",
          { class: "stats pool-stats" },
          ...stat(id("capacity"), "Capacity", p.capacity),
          ...stat(id("inflight"), "In flight", p.inflight),
          ...stat(id("queued"), "Queued", p.queued),
          ...stat(id("utilization"), "Utilization", p.utilization, pct),
          el("dt", {}, "Workers"),
          el(
            "dd",
            {},
            num("span", id("healthy-workers"), p.healthy_workers),
            " of ",
            num("span", id("workers"), p.workers),
            " ",
            badge(
              healthyTone,
              healthyTone === "ok" ? "healthy" : healthyTone === "warn" ? "some down" : "none healthy",
              id("workers-state"),
            ),
          ),
        );
        const parts = [title, stats];
        if (p.classes === null)
          parts.push(el("p", { class: "note" }, "Fleet-wide legacy admission: no classes per pool."));
        else
          parts.push(
            el(
              "table",
              { class: "numbers classes", testid: id("classes") },
              classTableHead(),
              el(
                "tbody",
                {},
                ...classRows(p.classes, p.capacity, `pool-${p.name}-class-`, `pool-${p.name}-class-row-`),
              ),
            ),
          );
        return el("div", { class: "pool", testid: `pool-${p.name}`, "data-pool": p.name }, ...parts);
      }),
    );
  }

  function renderOutcomes(s) {
    const o = s.outcomes;
    $("outcomes-window").textContent =
      o.window_secs === null ? "(collecting…)" : `(rates over the last ${o.window_secs.toFixed(0)} s)`;
    const total = $("outcomes-rate-total");
    total.dataset.value = isNum(o.rate_total) ? String(o.rate_total) : "";
    total.textContent = dec(2)(o.rate_total);
    if (o.by_status.length === 0) emptyRow("outcomes-status", 3, "no responses yet");
    else
      replaceRows(
        "outcomes-status",
        o.by_status.map((r) =>
          el(
            "tr",
            { testid: `outcome-status-row-${r.status}` },
            el("th", { scope: "row" }, statusBadge(r.status, `outcome-status-${r.status}`)),
            num("td", `outcome-status-${r.status}-rate`, r.rate, dec(2)),
            num("td", `outcome-status-${r.status}-total`, r.total),
          ),
        ),
      );
    if (o.by_code.length === 0) emptyRow("outcomes-code", 4, "no gateway error answers yet");
    else
      replaceRows(
        "outcomes-code",
        o.by_code.map((r) =>
          el(
            "tr",
            { testid: `outcome-code-row-${r.code}` },
            el("th", { scope: "row" }, el("code", {}, r.code)),
            el("td", {}, statusBadge(r.status, `outcome-code-${r.code}-status`)),
            num("td", `outcome-code-${r.code}-rate`, r.rate, dec(2)),
            num("td", `outcome-code-${r.code}-total`, r.total),
          ),
        ),
      );
  }

  function renderWaits(s) {
    const w = s.queue_wait;
    $("waits-window").textContent =
      w.window_secs === null ? "recent (collecting…)" : `last ${w.window_secs.toFixed(0)} s`;
    replaceRows(
      "waits",
      w.rows.map((r) => {
        const cells = [];
        for (const span of ["window", "total"]) {
          const p = r[span];
          cells.push(num("td", `wait-${r.class}-${span}-count`, p.count));
          for (const q of ["p50", "p90", "p99"])
            cells.push(num("td", `wait-${r.class}-${span}-${q}`, p[`${q}_ms`], dec(1)));
        }
        return el(
          "tr",
          { testid: `wait-row-${r.class}` },
          el("th", { scope: "row" }, r.class === "all" ? "all classes" : r.class),
          ...cells,
        );
      }),
    );
  }

  function budgetCell(t) {
    if (t.budgets.length === 0) return el("td", { class: "text muted-text" }, "none");
    const parts = t.budgets.map((b) => {
      const f = b.limit > 0 ? b.used / b.limit : 1;
      const [tone, word] = f >= 1 ? ["bad", "used up"] : f >= 0.8 ? ["warn", "near limit"] : ["ok", "within"];
      const money = b.budget === "budget_cost_usd";
      const fmt = money ? usd : int;
      const id = `tenant-${t.tenant}-budget-${b.budget}`;
      return el(
        "div",
        { class: "budget" },
        el("span", { class: "budget-name" }, b.budget.replace(/_/g, " ")),
        " ",
        num("span", `${id}-used`, b.used, fmt),
        " / ",
        num("span", `${id}-limit`, b.limit, fmt),
        " ",
        badge(tone, `${(f * 100).toFixed(0)}% ${word}`, `${id}-state`),
      );
    });
    return el("td", { class: "text budgets" }, ...parts);
  }

  function renderTenants(s) {
    const t = s.tenants;
    $("tenants-window").textContent =
      t.window_secs === null
        ? "token share against weight share"
        : `token share over the last ${t.window_secs.toFixed(0)} s against weight share`;
    if (t.rows.length === 0) {
      emptyRow("tenants", 9, "no tenant has sent anything yet");
      return;
    }
    replaceRows(
      "tenants",
      t.rows.map((r) => {
        const id = (f) => `tenant-${r.tenant}-${f}`;
        let shareTone = "muted";
        let shareWord = "idle";
        if (isNum(r.token_share) && isNum(r.weight_share)) {
          const ratio = r.token_share / r.weight_share;
          [shareTone, shareWord] =
            ratio > 1.25
              ? ["warn", "above weight"]
              : ratio < 0.8
                ? ["warn", "below weight"]
                : ["ok", "at weight"];
        }
        return el(
          "tr",
          { testid: `tenant-row-${r.tenant}`, "data-tenant": r.tenant },
          el("th", { scope: "row" }, r.tenant),
          num("td", id("weight"), r.weight, (v) => (isNum(v) ? String(v) : "—")),
          num("td", id("weight-share"), r.weight_share, pct),
          el(
            "td",
            {},
            num("span", id("token-share"), r.token_share, pct),
            " ",
            badge(shareTone, shareWord, id("share-state")),
          ),
          num("td", id("tokens-per-sec"), r.tokens_per_sec, dec(1)),
          num("td", id("tokens-total"), r.tokens_total),
          num("td", id("inflight"), r.inflight),
          num("td", id("queued"), r.queued),
          budgetCell(r),
        );
      }),
    );
  }

  /** Groups shown at most (the last seen); the rest are counted in the heading. */
  const REJECTION_GROUPS_SHOWN = 20;

  function renderRejections(s) {
    const r = s.rejections;
    const shown = r.groups.slice(0, REJECTION_GROUPS_SHOWN);
    const more = r.groups.length - shown.length;
    $("rejections-count").textContent =
      `(${r.total} since start, by code, tenant and pool${more > 0 ? `; the ${shown.length} last seen of ${r.groups.length} groups` : ""})`;
    if (shown.length === 0) {
      emptyRow("rejections", 8, "no rejections");
      return;
    }
    replaceRows(
      "rejections",
      shown.map((g) =>
        el(
          "tr",
          {
            testid: "rejection-group",
            "data-code": g.code,
            "data-tenant": g.tenant,
            "data-pool": g.pool ?? "",
          },
          el("td", { class: "text" }, timeEl(g.last_ms, clock, "rejection-last-seen")),
          el("td", { class: "text", testid: "rejection-code" }, el("code", {}, g.code)),
          el("td", { class: "text" }, statusBadge(g.status, "rejection-status")),
          num("td", "rejection-count", g.count, int, { class: "num" }),
          el("td", { class: "text", testid: "rejection-pool" }, g.pool ?? "—"),
          el("td", { class: "text", testid: "rejection-tenant" }, g.tenant),
          el("td", { class: "text", testid: "rejection-class" }, g.last_class ?? "—"),
          el("td", { class: "text", testid: "rejection-request-id" }, el("code", {}, g.last_request_id)),
        ),
      ),
    );
  }

  function renderLastHour(s) {
    const h = s.last_hour;
    const note = $("ledger-note");
    const minutes = h.minutes.length;
    const parts = [
      `${minutes} minute${minutes === 1 ? "" : "s"} with traffic since `,
      timeEl(h.since_ms, hhmm, "last-hour-since"),
    ];
    if (!h.from_ledger) parts.push(" (this gateway's own requests: no ledger)");
    else {
      if (h.read_at_ms !== null)
        parts.push("; the ledger's rollups read at ", timeEl(h.read_at_ms, clock, "last-hour-read-at"));
      else if (s.ledger?.up === false) parts.push("; the ledger is not open (see its state above)");
      else parts.push("; reading the ledger's rollups…");
      if (h.live_from_ms !== null)
        parts.push(
          "; from ",
          timeEl(h.live_from_ms, hhmm, "last-hour-live-from"),
          " on, this gateway's own count until they are rolled up (5 to 15 s after a minute ends)",
        );
      if (h.error) parts.push(`; the last read failed: ${h.error}`);
    }
    note.replaceChildren(...parts);
    note.dataset.readAt = h.read_at_ms === null ? "" : String(h.read_at_ms);
    $("ledger-totals").replaceChildren(
      ...stat("ledger-hour-requests", "Requests", h.totals.requests),
      ...stat("ledger-hour-rejected", "Rejected", h.totals.rejected),
      ...stat("ledger-hour-input-tokens", "Input tokens", h.totals.input_tokens),
      ...stat("ledger-hour-output-tokens", "Output tokens", h.totals.output_tokens),
      ...stat("ledger-hour-cost", "Cost", h.totals.cost_usd, usd),
      ...stat("ledger-hour-minutes", "Minutes", h.minutes.length),
    );
    if (h.tenants.length === 0) emptyRow("ledger-tenants", 6, "nothing in the last hour");
    else
      replaceRows(
        "ledger-tenants",
        h.tenants.map((t) => {
          const id = (f) => `ledger-tenant-${t.tenant}-${f}`;
          return el(
            "tr",
            { testid: `ledger-tenant-row-${t.tenant}`, "data-tenant": t.tenant },
            el("th", { scope: "row", class: "text" }, t.tenant),
            num("td", id("requests"), t.requests, int, { class: "num" }),
            num("td", id("rejected"), t.rejected, int, { class: "num" }),
            num("td", id("input-tokens"), t.input_tokens, int, { class: "num" }),
            num("td", id("output-tokens"), t.output_tokens, int, { class: "num" }),
            num("td", id("cost"), t.cost_usd, usd, { class: "num" }),
          );
        }),
      );
    drawLedgerChart(h);
  }

  // --- charts (uPlot; the page works without them) --------------------------------------------

  const SERIES_COLOURS = { ok: "#2e7d32", warn: "#ef6c00", bad: "#c62828", muted: "#757575" };
  const EXTRA = ["#1565c0", "#6a1b9a", "#00838f", "#ad1457", "#558b2f", "#4e342e"];

  function chartWidth(container) {
    return Math.max(300, container.clientWidth - 8);
  }

  const Y_LABEL_SIZE = 20;
  const measure = document.createElement("canvas").getContext("2d");

  /** The y axis' width: its widest number, the ticks, the gap and the rotated title beside them. */
  function yAxisWidth(u, values, axisIdx) {
    const axis = u.axes[axisIdx];
    const ratio = window.devicePixelRatio || 1;
    measure.font = axis.font[0];
    let widest = 0;
    for (const v of values ?? [])
      if (v !== null) widest = Math.max(widest, measure.measureText(v).width / ratio);
    return Math.ceil(widest + axis.ticks.size / ratio + axis.gap + Y_LABEL_SIZE + 4);
  }

  /**
   * A line chart whose x axis always spans `span()` ([from, to] in seconds), however few points.
   * Time labels are 24-hour (`timeFormat`), spaced so the widest one never meets the next; the y
   * axis is wide enough for its numbers and its label beside them.
   */
  function lineChart(container, keys, labelOf, colourOf, yLabel, data, span, timeFormat) {
    const opts = {
      width: chartWidth(container),
      height: 200,
      // Counts and rates start at 0, so a lone point is not the bottom of the axis.
      scales: {
        x: { time: true, range: () => span() },
        y: { range: (_u, _min, max) => [0, max > 0 ? max * 1.1 : 1] },
      },
      axes: [
        {
          space: timeFormat === clock ? 90 : 60,
          values: (_u, splits) => splits.map((v) => (v === null ? null : timeFormat(v * 1000))),
        },
        { label: yLabel, labelSize: Y_LABEL_SIZE, space: 30, size: yAxisWidth },
      ],
      series: [
        { label: "time", value: (_u, v) => (v === null || v === undefined ? "—" : timeFormat(v * 1000)) },
        ...keys.map((k, i) => ({
          label: labelOf(k),
          stroke: colourOf(k, i),
          width: 2,
          points: { size: 5 },
        })),
      ],
    };
    const chart = new uPlot(opts, data, container);
    // The chart's own canvas holds its labels: tests read them here.
    container.uplot = chart;
    return chart;
  }

  function drawOutcomesChart() {
    if (typeof uPlot === "undefined") return;
    const container = $("outcomes-chart");
    const keys = [...new Set(points.flatMap((p) => Object.keys(p.by_status)))].sort(
      (a, b) => Number(a) - Number(b),
    );
    const data = [
      points.map((p) => p.ts_ms / 1000),
      ...keys.map((k) => points.map((p) => p.by_status[k] ?? 0)),
    ];
    const signature = keys.join(",");
    if (outcomesChart === undefined || signature !== outcomesKeys) {
      outcomesChart?.destroy();
      outcomesKeys = signature;
      let extra = 0;
      outcomesChart = lineChart(
        container,
        keys,
        (k) => `${k} per s`,
        (k) =>
          statusTone(k) === "ok" && k !== "200"
            ? EXTRA[extra++ % EXTRA.length]
            : SERIES_COLOURS[statusTone(k)],
        "responses / s",
        data,
        () => {
          const last = points.length > 0 ? points[points.length - 1].ts_ms / 1000 : Date.now() / 1000;
          return [last - CHART_SPAN_MS / 1000, last];
        },
        clock,
      );
    } else outcomesChart.setData(data);
  }

  function drawLedgerChart(h) {
    if (typeof uPlot === "undefined") return;
    const container = $("ledger-chart");
    const keys = [...new Set(h.minutes.flatMap((m) => Object.keys(m.by_outcome)))].sort();
    // Every minute from the first with traffic to the current one, 0 where nothing came (a quiet minute).
    const byMinute = new Map(h.minutes.map((m) => [m.minute_ms, m]));
    const minutes = [];
    for (let t = h.since_ms; t <= h.current_minute_ms; t += 60_000) minutes.push(t);
    // From the first minute on (half a minute before it, so its point is not on the axis), at least
    // ten minutes wide so a young gateway's points stand apart.
    ledgerSpan = [
      (h.since_ms - 30_000) / 1000,
      Math.max(h.since_ms + 600_000, h.current_minute_ms + 60_000) / 1000,
    ];
    const data = [
      minutes.map((t) => t / 1000),
      ...keys.map((k) => minutes.map((t) => byMinute.get(t)?.by_outcome[k] ?? 0)),
    ];
    const signature = keys.join(",");
    const tone = (k) => (k === "ok" ? "ok" : k === "rejected" ? "warn" : k === "cancelled" ? "muted" : "bad");
    if (ledgerChart === undefined || signature !== ledgerKeys) {
      ledgerChart?.destroy();
      ledgerKeys = signature;
      ledgerChart = lineChart(
        container,
        keys,
        (k) => `${k} per min`,
        (k) => SERIES_COLOURS[tone(k)],
        "requests / min",
        data,
        () => ledgerSpan,
        hhmm,
      );
    } else ledgerChart.setData(data);
    container.dataset.points = String(h.minutes.length);
  }

  window.addEventListener("resize", () => {
    for (const [chart, id] of [
      [outcomesChart, "outcomes-chart"],
      [ledgerChart, "ledger-chart"],
    ]) {
      chart?.setSize({ width: chartWidth($(id)), height: 200 });
    }
  });

  function addPoint(point) {
    if (!point) return;
    const last = points[points.length - 1];
    if (last && point.ts_ms <= last.ts_ms) return;
    points.push(point);
    const oldest = point.ts_ms - CHART_SPAN_MS;
    while (points.length > 0 && points[0].ts_ms < oldest) points.shift();
  }

  // --- updates -------------------------------------------------------------------------------

  function render(s) {
    renderGateway(s);
    renderClasses(s);
    renderPools(s);
    renderOutcomes(s);
    renderWaits(s);
    renderTenants(s);
    renderRejections(s);
    renderLastHour(s);
    const updated = $("last-update");
    updated.textContent = clock(s.ts_ms);
    updated.dateTime = new Date(s.ts_ms).toISOString();
    updated.dataset.value = String(s.ts_ms);
    board.dataset.snapshotTs = String(s.ts_ms);
  }

  function onEvent(name, data) {
    if (name === "history") {
      points = [];
      for (const p of JSON.parse(data).points) addPoint(p);
      drawOutcomesChart();
    } else if (name === "snapshot") {
      const s = JSON.parse(data);
      addPoint(s.outcomes.point);
      render(s);
      drawOutcomesChart();
    }
  }

  class Refused extends Error {}

  async function authorizedFetch(url, token, signal) {
    const res = await fetch(url, {
      headers: {
        authorization: `Bearer ${token}`,
        accept: url === EVENTS_URL ? "text/event-stream" : "application/json",
      },
      cache: "no-store",
      signal,
    });
    if (res.status === 401) throw new Refused("The gateway refused this token (401 invalid_admin_token)");
    if (!res.ok) throw new Error(`HTTP ${res.status}`);
    return res;
  }

  /** Reads the event stream to its end: `event:` and `data:` lines, frames split by a blank line. */
  async function readEvents(res) {
    const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buffer += value.replace(/\r\n?/g, "\n");
      for (let end = buffer.indexOf("\n\n"); end >= 0; end = buffer.indexOf("\n\n")) {
        const frame = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        let name = "message";
        const data = [];
        for (const line of frame.split("\n")) {
          if (line.startsWith(":")) continue;
          const colon = line.indexOf(":");
          const field = colon < 0 ? line : line.slice(0, colon);
          const value = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
          if (field === "event") name = value;
          else if (field === "data") data.push(value);
        }
        if (data.length > 0) onEvent(name, data.join("\n"));
      }
    }
  }

  function connect(token) {
    stop();
    const controller = new AbortController();
    stream = { controller };
    (async () => {
      try {
        const res = await authorizedFetch(EVENTS_URL, token, controller.signal);
        setState("live");
        await readEvents(res);
        throw new Error("the stream ended");
      } catch (err) {
        if (controller.signal.aborted) return;
        if (err instanceof Refused) {
          signOut(err.message);
          return;
        }
        setState("reconnecting", err.message);
        retryTimer = setTimeout(() => connect(token), RETRY_MS);
      }
    })();
  }

  function stop() {
    clearTimeout(retryTimer);
    stream?.controller.abort();
    stream = undefined;
  }

  function showBoard() {
    login.hidden = true;
    board.hidden = false;
    forget.hidden = false;
  }

  function signOut(reason) {
    stop();
    sessionStorage.removeItem(TOKEN_KEY);
    board.hidden = true;
    forget.hidden = true;
    login.hidden = false;
    tokenError.hidden = !reason;
    tokenError.textContent = reason ? `${reason}. Enter the admin token again.` : "";
    setState(reason ? "refused" : "idle");
    input.value = "";
    input.focus();
  }

  /** Checks the token with one snapshot; shows it and opens the stream when the gateway accepts it. */
  async function start(token) {
    setState("checking");
    try {
      const res = await authorizedFetch(SNAPSHOT_URL, token);
      const snapshot = await res.json();
      sessionStorage.setItem(TOKEN_KEY, token);
      tokenError.hidden = true;
      render(snapshot);
      showBoard();
      connect(token);
    } catch (err) {
      if (err instanceof Refused) signOut(err.message);
      else {
        // The gateway did not answer: keep the token and try again.
        setState("reconnecting", err.message);
        retryTimer = setTimeout(() => start(token), RETRY_MS);
      }
    }
  }

  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const token = input.value.trim();
    if (token !== "") start(token);
  });
  forget.addEventListener("click", () => signOut());

  const saved = sessionStorage.getItem(TOKEN_KEY);
  if (saved) start(saved);
  else input.focus();
})();
