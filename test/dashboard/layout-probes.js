// Layout probes the dashboard tests run inside the page (plain browser JavaScript, evaluated through
// the DevTools protocol, so the page's Content-Security-Policy does not apply): they measure what a
// person would see and answer with a list of problems, empty when there is none. uPlot draws its
// axis labels on a canvas, so those are read from the chart instance the page keeps on each chart's
// container (`container.uplot`): the labels as drawn (`_values`), their values (`_splits`), the font.
window.sluiceProbes = {
  /** Pairs of visible sibling elements whose boxes intersect (uPlot's stacked layers aside). */
  overlappingSiblings() {
    const name = (e) =>
      `${e.tagName.toLowerCase()}${e.id ? `#${e.id}` : ""}${e.dataset?.testid ? `[${e.dataset.testid}]` : ""} "${(e.textContent ?? "").trim().slice(0, 30)}"`;
    const visible = (e) => {
      const r = e.getBoundingClientRect();
      const style = getComputedStyle(e);
      return r.width > 0 && r.height > 0 && style.visibility !== "hidden" && style.display !== "none";
    };
    const out = [];
    for (const parent of document.querySelectorAll("body, body *")) {
      // The chart's canvas and its overlay sit on top of each other by design.
      if (parent.closest(".u-wrap")) continue;
      const kids = [...parent.children].filter(
        (e) => visible(e) && getComputedStyle(e).position !== "absolute" && !e.classList.contains("u-wrap"),
      );
      for (let i = 0; i < kids.length; i++) {
        const a = kids[i].getBoundingClientRect();
        for (let j = i + 1; j < kids.length; j++) {
          const b = kids[j].getBoundingClientRect();
          const w = Math.min(a.right, b.right) - Math.max(a.left, b.left);
          const h = Math.min(a.bottom, b.bottom) - Math.max(a.top, b.top);
          if (w > 0.5 && h > 0.5) out.push(`${name(kids[i])} overlaps ${name(kids[j])}`);
        }
      }
    }
    return out;
  },

  /** Per chart and axis: its labels, and neighbours that meet or a y axis too narrow for its numbers. */
  axisLabels() {
    const reports = [];
    const ctx = document.createElement("canvas").getContext("2d");
    const ratio = window.devicePixelRatio || 1;
    for (const container of document.querySelectorAll(".chart")) {
      const u = container.uplot;
      if (!u) continue;
      u.axes.forEach((axis, i) => {
        const drawn = (axis._values ?? []).map((v, k) => [v, axis._splits[k]]).filter(([v]) => v !== null);
        const values = drawn.map(([v]) => String(v));
        const pos = drawn.map(([, split]) => u.valToPos(split, axis.scale));
        ctx.font = axis.font[0];
        const widths = values.map((v) => ctx.measureText(v).width / ratio);
        const fontPx = axis.font[2] ?? axis.font[1] / ratio;
        const problems = [];
        for (let k = 1; k < values.length; k++) {
          // x labels are centred under their ticks; y labels are one line high.
          const room = i === 0 ? (widths[k] + widths[k - 1]) / 2 + 4 : fontPx + 2;
          const gap = Math.abs(pos[k] - pos[k - 1]);
          if (gap < room)
            problems.push(
              `"${values[k - 1]}" and "${values[k]}": ${gap.toFixed(1)} px apart, need ${room.toFixed(1)}`,
            );
        }
        if (i === 1) {
          const need = Math.max(0, ...widths) + axis.ticks.size / ratio + axis.gap + (axis.labelSize ?? 0);
          if (need > axis._size)
            problems.push(`the y axis is ${axis._size} px wide, its labels need ${need.toFixed(1)}`);
        }
        reports.push({ chart: container.id, axis: i, values, problems });
      });
    }
    return reports;
  },

  /** Tables (one header row) whose header cells differ from their column's cells in box or alignment. */
  misalignedColumns() {
    const out = [];
    for (const table of document.querySelectorAll("table.numbers")) {
      if (table.getBoundingClientRect().height === 0 || table.tHead?.rows.length !== 1) continue;
      const head = [...table.tHead.rows[0].cells];
      for (const row of table.tBodies[0]?.rows ?? []) {
        const cells = [...row.cells];
        if (cells.length !== head.length) continue; // an "empty" row spans the table
        cells.forEach((cell, i) => {
          const h = head[i].getBoundingClientRect();
          const c = cell.getBoundingClientRect();
          const where = `${table.id || table.dataset.testid} column ${i + 1} (${head[i].textContent.trim()})`;
          if (Math.abs(h.left - c.left) > 1 || Math.abs(h.width - c.width) > 1)
            out.push(`${where}: header at ${h.left}+${h.width}, cell at ${c.left}+${c.width}`);
          const ha = getComputedStyle(head[i]).textAlign;
          const ca = getComputedStyle(cell).textAlign;
          if (ha !== ca) out.push(`${where}: header aligned ${ha}, cells ${ca}`);
        });
      }
    }
    return out;
  },

  /** Every time the page shows: visible <time> elements, the charts' time axes and legends. */
  timesShown() {
    const out = [];
    for (const t of document.querySelectorAll("time")) {
      if (t.getBoundingClientRect().width > 0) out.push(t.textContent.trim());
    }
    for (const container of document.querySelectorAll(".chart")) {
      const u = container.uplot;
      if (!u) continue;
      for (const v of u.axes[0]._values ?? []) if (v !== null) out.push(String(v));
      const legend = container.querySelector(".u-legend .u-series:first-child .u-value")?.textContent?.trim();
      if (legend && legend !== "—") out.push(legend);
    }
    return out;
  },

  /** Points above 0 in a chart's series (the x values aside). */
  pointsAboveZero(chartId) {
    const u = document.getElementById(chartId)?.uplot;
    if (!u) return 0;
    return u.data.slice(1).reduce((n, series) => n + series.filter((v) => v > 0).length, 0);
  },
};
