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
  const clock = (ms) => new Date(ms).toLocaleTimeString([], { hour12: false });

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

  function pressureBadge(p, testid) {
    const [tone, word] = p >= 1 ? ["bad", "full"] : p >= 0.75 ? ["warn", "busy"] : ["ok", "ok"];
    const b = badge(tone, `${(p * 100).toFixed(0)}% ${word}`, testid);
    b.dataset.value = String(p);
    return b;
  }

  function renderClasses(s) {
    const legacy = s.classes === null;
    $("classes-legacy").hidden = !legacy;
    $("classes").hidden = legacy;
    if (legacy) return;
    const cap = s.gateway.capacity;
    replaceRows(
      "classes",
      s.classes.map((c) => {
        const id = (f) => `class-${c.class}-${f}`;
        // The bar is neutral unless the class queues; then its colour and its words say so.
        const [tone, state] =
          c.queued === 0
            ? ["neutral", ""]
            : c.headroom <= 0
              ? ["bad", ", queueing: no headroom"]
              : ["warn", ", queueing"];
        return el(
          "tr",
          { testid: `class-row-${c.class}`, "data-class": c.class },
          el("th", { scope: "row" }, c.class),
          num("td", id("inflight"), c.inflight),
          num("td", id("queued"), c.queued),
          num("td", id("queue-limit"), c.queue_limit),
          num("td", id("reserved"), c.reserved),
          num("td", id("headroom"), c.headroom),
          el("td", {}, pressureBadge(c.pressure, id("pressure"))),
          el(
            "td",
            { class: "bar-col" },
            bar(
              cap > 0 ? c.inflight / cap : 0,
              `${c.inflight} / ${cap}, reserved ${c.reserved}${state}`,
              tone,
            ),
          ),
        );
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
    if (t.budgets.length === 0) return el("td", { class: "muted-text" }, "none");
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
    return el("td", { class: "budgets" }, ...parts);
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

  function renderRejections(s) {
    const r = s.rejections;
    $("rejections-count").textContent = `(${r.total} since start; the last ${r.kept} kept)`;
    if (r.rows.length === 0) {
      emptyRow("rejections", 6, "no rejections");
      return;
    }
    replaceRows(
      "rejections",
      r.rows.map((x) =>
        el(
          "tr",
          { testid: "rejection-row", "data-request-id": x.request_id },
          el("td", { testid: "rejection-time", "data-value": String(x.ts_ms) }, clock(x.ts_ms)),
          el("td", { testid: "rejection-request-id" }, el("code", {}, x.request_id)),
          el("td", { testid: "rejection-tenant" }, x.tenant),
          el("td", { testid: "rejection-class" }, x.class ?? "—"),
          el("td", {}, statusBadge(x.status, "rejection-status")),
          el("td", { testid: "rejection-code" }, el("code", {}, x.code)),
        ),
      ),
    );
  }

  function renderLedger(s) {
    const section = $("ledger-section");
    const h = s.ledger_hour;
    section.hidden = h === null;
    if (h === null) return;
    const note = $("ledger-note");
    if (h.read_at_ms === null)
      note.textContent = h.error
        ? `Cannot read the rollups: ${h.error}`
        : s.ledger?.up === false
          ? "The ledger is not open: nothing to read yet (see its state above)."
          : "Reading the rollups…";
    else
      note.textContent =
        `${h.minutes.length} minute${h.minutes.length === 1 ? "" : "s"} with traffic since ${clock(h.since_ms)}, read at ${clock(h.read_at_ms)}` +
        " (a minute appears 5 to 15 s after it ends)" +
        (h.error ? `; the last read failed: ${h.error}` : "");
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
            el("th", { scope: "row" }, t.tenant),
            num("td", id("requests"), t.requests),
            num("td", id("rejected"), t.rejected),
            num("td", id("input-tokens"), t.input_tokens),
            num("td", id("output-tokens"), t.output_tokens),
            num("td", id("cost"), t.cost_usd, usd),
          );
        }),
      );
    if (h.read_at_ms !== null) drawLedgerChart(h);
  }

  // --- charts (uPlot; the page works without them) --------------------------------------------

  const SERIES_COLOURS = { ok: "#2e7d32", warn: "#ef6c00", bad: "#c62828", muted: "#757575" };
  const EXTRA = ["#1565c0", "#6a1b9a", "#00838f", "#ad1457", "#558b2f", "#4e342e"];

  function chartWidth(container) {
    return Math.max(300, container.clientWidth - 8);
  }

  /** A line chart whose x axis always spans `span()` ([from, to] in seconds), however few points. */
  function lineChart(container, keys, labelOf, colourOf, yLabel, data, span) {
    const opts = {
      width: chartWidth(container),
      height: 200,
      scales: { x: { time: true, range: () => span() } },
      axes: [{}, { label: yLabel }],
      series: [
        {},
        ...keys.map((k, i) => ({
          label: labelOf(k),
          stroke: colourOf(k, i),
          width: 2,
          points: { size: 4 },
        })),
      ],
    };
    return new uPlot(opts, data, container);
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
      );
    } else outcomesChart.setData(data);
  }

  function drawLedgerChart(h) {
    if (typeof uPlot === "undefined") return;
    const container = $("ledger-chart");
    const keys = [...new Set(h.minutes.flatMap((m) => Object.keys(m.by_outcome)))].sort();
    // Every minute of the hour, 0 where the rollups have no row (a quiet minute).
    const byMinute = new Map(h.minutes.map((m) => [m.minute_ms, m]));
    const minutes = [];
    for (let t = h.since_ms; t <= h.read_at_ms; t += 60_000) minutes.push(t);
    ledgerSpan = [h.since_ms / 1000, Math.max(h.since_ms + 3_540_000, h.read_at_ms) / 1000];
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
      );
    } else ledgerChart.setData(data);
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
    renderOutcomes(s);
    renderWaits(s);
    renderTenants(s);
    renderRejections(s);
    renderLedger(s);
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
