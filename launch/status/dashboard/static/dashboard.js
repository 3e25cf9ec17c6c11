// kafkagen dashboard: polls api/status (the latest `kafkagen status --json`) and api/history
// (the server's samples, launch/dashboard/history.py) every interval and draws them with uPlot.
// What the page shows is also in window.kafkagenDashboard, for tests and the browser console:
//   latest   the last status (schema_version 1)     history  the samples, oldest first
//   charts   name -> {series: [{label, color, scale}], data: [[x: Unix s], [y of series 1], ...],
//            axes: [{scale, side, size, room, labels, widths}]}: the tick labels as drawn, their
//            widths in px (the widest line) and the px a side axis has for them (null below) (series in drawing order: a later one
//            is drawn over an earlier one)
//   seeded   samples read back from the run's topics (history "seeded"), first in history
//   error    why the last refresh failed, or null   updates  refreshes done
"use strict";
(function () {
  const PALETTE = ["#1f5fd1", "#e4572e", "#17a34a", "#a23bd6", "#f2a007", "#0aa5b5", "#d6336c",
    "#6b8e23", "#8b4513", "#4b0082", "#ff1493", "#008080"];
  const HEIGHT = 220;
  const dash = {latest: null, history: [], charts: {}, error: null, updates: 0, interval_s: 5, history_s: 1800,
    seeded: 0};
  window.kafkagenDashboard = dash;
  const plots = {};

  function get(obj, path) {
    return path.split(".").reduce((o, k) => (o === null || o === undefined ? undefined : o[k]), obj);
  }
  const none = (v) => v === null || v === undefined;
  const pad = (n) => String(n).padStart(2, "0");
  const FORMAT = {
    int: (v) => (none(v) ? "—" : Math.round(v).toLocaleString("en-US")),
    rate: (v) => (none(v) ? "—" : Number(v).toFixed(1)),
    pct: (v) => (none(v) ? "—" : (100 * v).toFixed(0) + "%"),
    duration: (v) => {
      if (none(v)) return "—";
      const s = Math.round(v), h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60);
      return h ? `${h}h ${pad(m)}m` : m ? `${m}m ${pad(s % 60)}s` : `${s}s`;
    },
    // an axis tick (a multiple of the axis' step, DURATION_INCRS): no zero parts, "90s" is "1m 30s"
    tick: (v) => {
      const s = Math.round(v), h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60), r = s % 60;
      if (!s) return "0";
      const parts = [h && `${h}h`, m && `${m}m`, r && `${r}s`].filter(Boolean);
      return parts.join(" ");
    },
    time: (v) => (none(v) ? "never" : new Date(v * 1000).toLocaleTimeString("en-GB")),
    // the ETA's interval [low, high] in seconds (high null: no upper bound yet)
    duration_range: (v) =>
      none(v) ? "" : none(v[1]) ? `over ${FORMAT.duration(v[0])}` : `${FORMAT.duration(v[0])} – ${FORMAT.duration(v[1])}`,
    // a projection's estimate {value, low, high} (launch/status/projection.py, 95% interval)
    estimate_int: (v) => (none(v) ? "—" : `${FORMAT.int(v.value)} (${FORMAT.int(v.low)} – ${FORMAT.int(v.high)})`),
    estimate_hours: (v) =>
      none(v) ? "—" : `${Number(v.value).toFixed(1)} (${Number(v.low).toFixed(1)} – ${Number(v.high).toFixed(1)})`,
    estimate_time: (v) =>
      none(v) ? "—" : `${FORMAT.time(v.value)} (${FORMAT.time(v.low)} – ${FORMAT.time(v.high)})`,
    text: (v) => (none(v) ? "" : String(v)),
  };

  // --- charts: each line is {label, color, get(sample) -> number|null, scale?} -----------------
  function names(samples, field) {
    const seen = new Set();
    for (const s of samples) for (const n of Object.keys(s[field] || {})) seen.add(n);
    return [...seen].sort();
  }
  const server = (name, field, factor = 1) => (s) => {
    const v = get(s.servers || {}, name + "." + field);
    return none(v) ? null : v * factor;
  };
  function perServer(samples, field, factor, first) {
    return names(samples, "servers").map((n, i) => ({label: n, color: PALETTE[(first + i) % PALETTE.length],
      get: server(n, field, factor)}));
  }
  const CHARTS = {
    // the total last (drawn on top) and dashed: a server that makes all of it shows through the gaps
    tokens: {el: "chart-tokens", whole: false, lines: (h) => [...perServer(h, "tokens_per_s", 1, 1),
      {label: "total", color: PALETTE[0], dash: [8, 5], get: (s) => s.tokens_per_s}]},
    completions: {el: "chart-completions", whole: false, lines: (h) => [...perServer(h, "completions_per_s", 1, 1),
      {label: "total", color: PALETTE[0], dash: [8, 5], get: (s) => s.completions_per_s}]},
    lag: {el: "chart-lag", whole: true, lines: () => [
      {label: "prompts lag", color: PALETTE[0], get: (s) => s.lag},
      {label: "sink lag", color: PALETTE[1], get: (s) => s.sink_lag},
      {label: "ETA (s)", color: PALETTE[2], dash: [8, 5], get: (s) => s.eta_s, scale: "s"}]},
    progress: {el: "chart-progress", whole: true, lines: () => [
      {label: "published", color: PALETTE[0], get: (s) => s.published},
      {label: "results", color: PALETTE[1], get: (s) => s.results},
      {label: "in S3", color: PALETTE[2], get: (s) => s.in_s3}]},
    quality: {el: "chart-quality", whole: true, lines: (h) => names(h, "quality").map((c, i) => ({label: c,
      color: PALETTE[i % PALETTE.length], get: (s) => (none(s.quality_results) ? null : (s.quality || {})[c] || 0)}))},
    occupancy: {el: "chart-occupancy", whole: false, lines: (h) => perServer(h, "occupancy", 100, 1)},
  };

  // tick steps: counts and durations in whole units (uPlot would put 0.2-second or 0.5-prompt
  // ticks on a small range, which rounding made "1s 1s 1s 0s"); seconds then minutes then hours
  const COUNT_INCRS = [];
  for (let e = 1; e <= 1e12; e *= 10) COUNT_INCRS.push(e, 2 * e, 5 * e);
  const DURATION_INCRS = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1200, 1800, 3600, 7200, 10800,
    21600, 43200, 86400, 172800, 604800];
  const AXIS_FONT = "12px system-ui, -apple-system, \"Segoe UI\", sans-serif";
  let measurer = null;
  function textWidth(text) {
    measurer = measurer || document.createElement("canvas").getContext("2d");
    measurer.font = AXIS_FONT;
    return Math.ceil(measurer.measureText(text).width);
  }
  // an axis as wide as its widest label needs (uPlot's default is a fixed 50 px, which cut "33m 20s")
  const sized = (u, values) => Math.max(40, ...(values || []).map((v) => textWidth(String(v)))) + 18;
  const counts = (u, ticks) => ticks.map((v) => FORMAT.int(v));

  function plotOptions(el, lines, name, whole) {
    const right = lines.some((l) => l.scale === "s");
    const y = {scale: "y", size: sized, font: AXIS_FONT, gap: 5, ticks: {size: 8}};
    // time ticks at whole seconds at least: samples are a second or more apart
    const axes = [{font: AXIS_FONT, incrs: DURATION_INCRS}, whole ? {...y, incrs: COUNT_INCRS, values: counts} : y];
    if (right) axes.push({scale: "s", side: 1, size: sized, font: AXIS_FONT, gap: 5, ticks: {size: 8},
      grid: {show: false}, incrs: DURATION_INCRS, values: (u, t) => t.map((v) => FORMAT.tick(v))});
    return {
      width: Math.max(200, el.clientWidth), height: HEIGHT,
      scales: {x: {time: true}, y: {range: (u, lo, hi) => [Math.min(0, lo), hi > 0 ? hi * 1.1 : 1]},
        s: {range: (u, lo, hi) => [0, hi > 0 ? hi * 1.1 : 1]}},
      series: [{}, ...lines.map((l) => ({label: l.label, stroke: l.color, width: 2, scale: l.scale || "y",
        dash: l.dash, points: {show: false}}))],
      axes,
      legend: {live: false},
      cursor: {show: false},
      hooks: {draw: [(u) => recordAxes(name, u)]},
    };
  }

  function recordAxes(name, u) {
    if (!dash.charts[name]) return;
    dash.charts[name].axes = u.axes.map((a) => {
      const labels = (a._values || []).map((v) => (none(v) ? "" : String(v)));
      const widths = labels.map((t) => Math.max(0, ...t.split("\n").map(textWidth)));
      // a side axis (1 right, 3 left) has its size in px for the labels, less its ticks and gap
      const room = a.side % 2 ? a._size - (a.ticks && a.ticks.show !== false ? a.ticks.size : 0) - (a.gap || 0) : null;
      return {scale: a.scale, side: a.side, size: a._size, labels, widths, room};
    });
  }

  function drawCharts() {
    const h = dash.history;
    const xs = h.map((s) => s.at);
    for (const [name, spec] of Object.entries(CHARTS)) {
      const lines = spec.lines(h);
      const data = [xs, ...lines.map((l) => h.map((s) => { const v = l.get(s); return none(v) ? null : v; }))];
      const axes = (dash.charts[name] || {}).axes || [];
      dash.charts[name] = {series: lines.map((l) => ({label: l.label, color: l.color, scale: l.scale || "y"})), data, axes};
      const el = document.getElementById(spec.el);
      const key = lines.map((l) => l.label + l.color).join("|");
      if (plots[name] && plots[name].key === key) {
        plots[name].plot.setData(data);
        continue;
      }
      if (plots[name]) plots[name].plot.destroy();
      el.textContent = "";
      plots[name] = {key, plot: new uPlot(plotOptions(el, lines, name, spec.whole), data, el)};
    }
  }

  // --- numbers, tables, banners --------------------------------------------------------------
  function drawFields(latest) {
    for (const el of document.querySelectorAll("[data-field]")) {
      const v = get(latest, el.dataset.field);
      el.textContent = FORMAT[el.dataset.format || "text"](v);
      el.dataset.value = none(v) ? "" : typeof v === "object" ? JSON.stringify(v) : String(v);
    }
  }

  function row(cells, attrs = {}) {
    const tr = document.createElement("tr");
    for (const [k, v] of Object.entries(attrs)) tr.dataset[k] = v;
    for (const [col, value, format] of cells) {
      const td = document.createElement("td");
      td.dataset.col = col;
      td.dataset.value = none(value) ? "" : String(value);
      td.textContent = typeof format === "function" ? format(value) : FORMAT[format || "text"](value);
      tr.appendChild(td);
    }
    return tr;
  }
  function fill(id, rows) {
    const body = document.querySelector(`#${id} tbody`);
    body.replaceChildren(...rows);
  }
  const ratio = (a, b) => `${FORMAT.int(a)} / ${FORMAT.int(b)}`;

  function drawTables(latest) {
    fill("servers", (latest.servers || []).map((s) => row([
      ["instance", s.instance], ["server", s.server], ["model", s.model],
      ["state", s.server_up === false ? `${s.state} (server down)` : s.state],
      ["tokens_per_s", s.tokens_per_s, "rate"], ["completions_per_s", s.completions_per_s, "rate"],
      ["running", s.running, () => ratio(s.running, s.slots)], ["queued", s.queued, "int"],
      ["occupancy", s.occupancy, "pct"], ["in_flight", s.in_flight, () => ratio(s.in_flight, s.window)],
      ["results", (s.completions || 0) + (s.errors || 0), "int"],
      ["report_age_s", s.report_age_s, (v) => (none(v) ? "—" : `${Number(v).toFixed(1)} s`)],
    ], {instance: s.instance})));
    const q = latest.quality || {results: 0, classes: {}};
    const classes = Object.entries(q.classes || {}).sort((a, b) => b[1] - a[1]);
    fill("quality", classes.map(([cls, n]) => row([["class", cls], ["count", n, "int"],
      ["share", q.results ? n / q.results : null, "pct"]], {cls})));
    const consumers = get(latest, "lag.consumers") || [];
    // with no consumer in the group (a finished or stopped run), each partition's lag, owned by none
    const rows = consumers.length ? consumers.map((c) => row([["member", c.member],
      ["client_host", c.client_host], ["partitions", (c.partitions || []).join(", ")], ["lag", c.lag, "int"]],
    {member: c.member})) : (get(latest, "lag.partitions") || []).map((p) => row([["member", "(none)"],
      ["client_host", ""], ["partitions", String(p.partition)], ["lag", p.lag, "int"]], {partition: p.partition}));
    fill("consumers", rows);
    const total = get(latest, "lag.total");
    document.getElementById("consumers-note").textContent = consumers.length ? "" :
      latest.state === "done" ? `done: no consumer left in the generation group, every partition at lag ${FORMAT.int(total)}` :
        `no consumer in the generation group; ${FORMAT.int(total)} prompts not yet committed`;
  }

  function drawBanners(latest) {
    const gate = (latest && latest.gate) || {};
    const halted = gate.state === "halted" || (latest && latest.state === "halted");
    const banner = document.getElementById("gate-banner");
    banner.hidden = !halted;
    document.getElementById("gate-breaches").replaceChildren(...(gate.breaches || []).map((b) => {
      const li = document.createElement("li");
      li.textContent = `${b.cls}: ${FORMAT.int(b.count)} of ${FORMAT.int(b.results)} results ` +
        `(${FORMAT.pct(b.share)}, limit ${FORMAT.pct(b.threshold)}, ${b.phase})`;
      return li;
    }));
    const error = document.getElementById("error-banner");
    error.hidden = !dash.error;
    error.textContent = dash.error ? `status unavailable: ${dash.error}` +
      (latest ? ` (showing the status of ${FORMAT.time(latest.at)})` : "") : "";
    const st = document.getElementById("state");
    st.className = "state " + (latest ? latest.state : "unknown");
  }

  function render() {
    if (dash.latest) {
      drawFields(dash.latest);
      drawTables(dash.latest);
    }
    drawBanners(dash.latest);
    drawCharts();
  }

  // --- polling ---------------------------------------------------------------------------------
  async function getJSON(url) {
    const r = await fetch(url, {cache: "no-store"});
    const body = await r.json().catch(() => ({}));
    if (!r.ok) throw new Error(body.error || `${url}: HTTP ${r.status}`);
    return body;
  }

  async function refresh() {
    try {
      const last = dash.history.length ? dash.history[dash.history.length - 1].at : null;
      let hist = await getJSON("api/history" + (last === null ? "" : "?since=" + last));
      if (hist.seeded !== dash.seeded) { // the run's past arrived after the page's first samples
        hist = await getJSON("api/history");
        dash.history = [];
        dash.seeded = hist.seeded;
      }
      const status = await getJSON("api/status");
      dash.interval_s = hist.interval_s;
      dash.history_s = hist.history_s;
      for (const s of hist.samples) {
        const end = dash.history.length ? dash.history[dash.history.length - 1].at : -Infinity;
        if (s.at > end) dash.history.push(s);
      }
      const oldest = dash.history.length ? dash.history[dash.history.length - 1].at - dash.history_s : 0;
      // the run's past (read back from its topics) stays; collected samples keep history_s seconds
      dash.history = dash.history.filter((s) => s.source === "topics" || s.at >= oldest);
      dash.latest = status;
      dash.error = hist.error;
    } catch (e) {
      dash.error = String((e && e.message) || e);
    }
    try {
      render();
    } finally {
      dash.updates += 1;
      setTimeout(refresh, Math.max(0.5, dash.interval_s) * 1000);
    }
  }

  window.addEventListener("resize", () => {
    for (const [name, p] of Object.entries(plots)) {
      const el = document.getElementById(CHARTS[name].el);
      p.plot.setSize({width: Math.max(200, el.clientWidth), height: HEIGHT});
    }
  });
  refresh();
})();
