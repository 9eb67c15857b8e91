// gangrun's web page: the task list (#/) and one task's timeline and logs (#/tasks/NAME).
// Every number and span comes from the server's JSON (gangrun._core.lanes); this script only draws,
// and refreshes the shown page every second. Text from tasks is always set as text, never as markup.
"use strict";

const REFRESH_MS = 1000;
const SVG = "http://www.w3.org/2000/svg";
const main = document.getElementById("main");
let timer = null;
let logState = { rank: 0, attempt: null, task: null };

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") node.className = v;
    else if (k === "text") node.textContent = v;
    else node.setAttribute(k, v);
  }
  for (const c of children) node.append(c);
  return node;
}

function svg(tag, attrs = {}, text) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  if (text !== undefined) node.textContent = text;
  return node;
}

async function getJSON(url) {
  const r = await fetch(url, { cache: "no-store" });
  const doc = await r.json();
  if (!r.ok) throw new Error(doc.error || r.statusText);
  return doc;
}

function pct(x) { return x === null || x === undefined ? "—" : `${Math.round(x * 100)}%`; }
function secs(x) {
  if (x === null || x === undefined) return "—";
  return `${Number(x).toFixed(Math.abs(x) < 1 ? 2 : 1)}s`;
}
function clock(iso) { return new Date(iso).toLocaleTimeString([], { hour12: false }); }

function phaseBadge(row) {
  const b = el("span", { class: `phase phase-${row.phase}`, text: row.phase });
  if (row.waiting && row.phase === "Running") { b.classList.add("waiting"); b.textContent = "Running · waiting"; }
  return b;
}

function why(row) {
  if (!row.waiting) return row.reason;
  const where = row.queuePosition ? `#${row.queuePosition} in queue ${row.queue || "default"}: ` : "";
  return where + (row.pending || row.reason);
}

// -- the task list ----------------------------------------------------------------------------------

async function showList() {
  const doc = await getJSON("/api/tasks");
  document.getElementById("backend").textContent = `${doc.backend} backend`;
  const rows = doc.tasks.map((t) => el("tr", { "data-task": t.name },
    el("td", {}, el("a", { href: `#/tasks/${encodeURIComponent(t.name)}`, text: t.name })),
    el("td", {}, phaseBadge(t)),
    el("td", { class: "num", text: String(t.attempt) }),
    el("td", { class: "num", text: t.retriesLeft === null || t.retriesLeft === undefined ? "—" : String(t.retriesLeft) }),
    el("td", { class: "num", text: pct(t.goodput) }),
    el("td", { class: "num", text: String(t.preemptions) }),
    el("td", { class: t.waiting ? "reason why" : "reason", text: why(t) })));
  const table = el("table", { id: "tasks" },
    el("thead", {}, el("tr", {}, ...["Task", "Phase", "Attempt", "Retries left", "Goodput", "Preemptions", "Reason"]
      .map((h) => el("th", { text: h })))),
    el("tbody", {}, ...rows));
  main.replaceChildren(el("h1", { text: "Tasks" }),
    doc.tasks.length ? table : el("p", { class: "muted", text: "No tasks yet: gangrun submit FILE" }));
}

// -- one task ---------------------------------------------------------------------------------------

const LANE_H = 74, BAR_Y = 30, BAR_H = 20, LEFT = 86, TOP = 26;

function drawTimeline(tl, width) {
  const t0 = Date.parse(tl.start), t1 = Math.max(Date.parse(tl.end), t0 + 1000);
  const span = t1 - t0, inner = width - LEFT - 16;
  const x = (iso) => LEFT + ((Date.parse(iso) - t0) / span) * inner;
  const height = TOP + tl.lanes.length * LANE_H + 8;
  const root = svg("svg", { width, height, viewBox: `0 0 ${width} ${height}`, id: "timeline", role: "img",
    "aria-label": `timeline of ${tl.name}` });
  const defs = svg("defs");
  const hatch = svg("pattern", { id: "hatch", width: 6, height: 6, patternUnits: "userSpaceOnUse",
    patternTransform: "rotate(45)" });
  hatch.append(svg("rect", { width: 6, height: 6, fill: "rgba(224,49,49,0.18)" }),
    svg("line", { x1: 0, y1: 0, x2: 0, y2: 6, stroke: "#e03131", "stroke-width": 2 }));
  defs.append(hatch);
  root.append(defs);

  const axis = svg("g", { class: "axis" });
  const step = niceStep(span / 1000);
  for (let s = 0; s <= span / 1000 + 1e-9; s += step) {
    const px = LEFT + (s * 1000 / span) * inner;
    axis.append(svg("line", { x1: px, y1: TOP - 6, x2: px, y2: height - 4 }),
      svg("text", { x: px, y: TOP - 10, "text-anchor": "middle" }, `${+s.toFixed(1)}s`));
  }
  root.append(axis);

  tl.lanes.forEach((lane, i) => {
    const y = TOP + i * LANE_H;
    const g = svg("g", { class: "lane", "data-attempt": lane.attempt });
    g.append(svg("text", { x: 4, y: y + BAR_Y + 14, class: "lane-label" }, `attempt ${lane.attempt}`));
    for (const s of lane.segments) {
      const x0 = x(s.start), w = Math.max(1, x(s.end) - x0);
      const r = svg("rect", { x: x0, y: y + BAR_Y, width: w, height: BAR_H, class: `seg seg-${s.kind}`,
        "data-kind": s.kind });
      r.append(svg("title", {}, `${s.label}: ${clock(s.start)} – ${clock(s.end)}`));
      g.append(r);
      if (w > 7 * s.label.length) {
        g.append(svg("text", { x: x0 + w / 2, y: y + BAR_Y + 14, "text-anchor": "middle", class: "seg-label" },
          s.label));
      }
    }
    for (const l of lane.lost) {
      const x0 = x(l.start), w = Math.max(2, x(l.end) - x0);
      const r = svg("rect", { x: x0, y: y + BAR_Y - 3, width: w, height: BAR_H + 6, class: "lost" });
      r.append(svg("title", {}, `work lost to ${l.cause}: ${l.seconds.toFixed(2)}s since the last checkpoint`));
      g.append(r);
    }
    const resumedFrom = new Set(lane.marks.filter((m) => m.kind === "resumed").map((m) => m.checkpoint.at));
    for (const m of lane.marks) drawMark(g, m, x, y, resumedFrom);
    root.append(g);
  });
  return root;
}

function drawMark(g, m, x, y, resumedFrom) {
  const px = x(m.at);
  const mark = svg("g", { class: `mark mark-${m.kind}`, "data-kind": m.kind, "data-label": m.label });
  mark.append(svg("title", {}, `${m.label} at ${clock(m.at)}${m.message ? "\n" + m.message : ""}`));
  const top = y + BAR_Y, bottom = y + BAR_Y + BAR_H;
  if (m.kind === "checkpoint") {
    if (resumedFrom.has(m.at)) mark.classList.add("resumed-from");
    mark.append(svg("path", { d: `M${px} ${top - 9} l4 4 l-4 4 l-4 -4 z` }));
  } else if (m.kind === "preempted" || m.kind === "evicted") {
    mark.append(svg("path", { d: `M${px - 6} ${top - 14} h12 l-6 10 z` }),
      svg("text", { x: px + 8, y: top - 16, class: "label-preempted" }, m.label));
  } else if (m.kind === "readmitted") {
    mark.append(svg("path", { d: `M${px - 5} ${bottom + 10} h10 l-5 -8 z` }));
  } else if (m.kind === "restarted" || m.kind === "resized") {
    mark.append(svg("path", { d: `M${px - 5} ${bottom + 10} h10 l-5 -8 z` }),
      svg("text", { x: px + 6, y: bottom + 12 }, m.label));
  } else if (m.kind === "resumed") {
    const from = x(m.checkpoint.at);
    mark.append(svg("path", { class: "resume-link", d: `M${from} ${top - 5} C ${from} ${bottom + 22}, ${px} ${bottom + 22}, ${px} ${bottom + 2}` }),
      svg("text", { x: px + 8, y: bottom + 24, class: "label-resumed" }, m.label));
  } else if (m.kind === "ended") {
    mark.append(svg("line", { x1: px, y1: top - 4, x2: px, y2: bottom + 4 }),
      svg("text", { x: px - 4, y: bottom + 14, "text-anchor": "end", class: "label-ended" }, m.label));
  }
  g.append(mark);
}

function niceStep(seconds) {
  const raw = seconds / 10;
  for (const s of [0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 21600, 43200, 86400]) {
    if (s >= raw) return s;
  }
  return 86400 * Math.ceil(raw / 86400);
}

function legend() {
  const items = [["queued", "var(--queued)"], ["workers starting", "var(--starting)"], ["gang running", "var(--running)"],
    ["waiting for re-admission", "var(--waiting)"], ["whole-gang restart", "var(--restarting)"],
    ["work lost", "rgba(224,49,49,0.35)"], ["checkpoint ◆ (◇ the one resumed from)", "var(--checkpoint)"],
    ["preemption ▼", "var(--preempted)"]];
  return el("div", { class: "legend" }, ...items.map(([t, c]) => el("span", {}, el("i", { style: `background:${c}` }), t)));
}

async function showTask(name) {
  const doc = await getJSON(`/api/tasks/${encodeURIComponent(name)}`);
  document.getElementById("backend").textContent = `${doc.backend} backend`;
  const row = doc.row, tl = doc.timeline, s = tl.summary;
  const width = Math.max(720, main.clientWidth - 20);  // the chart's box: its padding and border are inside
  const title = el("h1", {}, `${row.name} `, phaseBadge(row));
  const summary = el("div", { class: "summary" },
    el("span", {}, "attempt ", el("b", { text: String(row.attempt) })),
    el("span", {}, "retries left ", el("b", { text: row.retriesLeft ?? "—" })),
    el("span", {}, "goodput ", el("b", { text: pct(s.goodput) })),
    s.stepSeconds == null ? "" : el("span", { title: "time spent stepping: goodput less the task's first start " +
      "before its first step, which tools that count every start as badput leave out" },
      "stepping ", el("b", { text: secs(s.stepSeconds) })),
    el("span", {}, "preemptions ", el("b", { text: String(s.preemptions) })),
    el("span", {}, "waited for re-admission ", el("b", { text: secs(s.waitingForReadmissionSeconds) })),
    el("span", {}, "work lost ", el("b", { text: secs(s.workLostSeconds) })),
    el("span", {}, "restoring ", el("b", { text: secs(s.restoringSeconds) })),
    el("span", {}, "checkpoints ", el("b", { text: String(s.checkpoints) })));
  // What the time that was not productive went to (accounting.badputSeconds), by the causes and in the
  // order the summary names them: the server holds their one definition.
  const badput = s.badputSeconds ? el("div", { class: "summary badput" }, el("span", { class: "muted", text: "badput" }),
    ...(s.badputCauses || []).map(({ key, label }) =>
      el("span", {}, `${label} `, el("b", { text: secs(s.badputSeconds[key]) })))) : "";
  const grace = s.grace && !s.grace.sufficient ? el("p", { class: "why", id: "grace", text: s.grace.message }) : "";
  const reason = el("p", { class: row.waiting ? "why" : "muted", id: "reason", text: why(row) });
  const chart = el("div", { class: "chart" }, drawTimeline(tl, width), legend());
  const events = el("table", { class: "events" }, el("tbody", {}, ...doc.events.slice(-40).reverse().map((e) =>
    el("tr", {}, el("td", { text: clock(e.time) }), el("td", { text: e.type }),
      el("td", { text: e.attempt ? `attempt ${e.attempt}` : "" }), el("td", { text: e.message })))));
  if (logState.task !== name) logState = { rank: 0, attempt: null, task: name };
  let logs = document.getElementById("logs-panel");
  if (!logs || logs.dataset.task !== name) logs = logsPanel(name);
  updateChoices(logs, row.attempt, doc.worldSize || 1);
  main.replaceChildren(el("p", {}, el("a", { href: "#/", text: "← all tasks" })), title, summary, badput, grace, reason,
    chart,
    el("h2", { text: "Worker output" }), logs, el("h2", { text: "Timeline (newest first)" }), events);
  await refreshLogs(name);
}

function logsPanel(name) {
  const rank = el("select", { id: "rank" }), attempt = el("select", { id: "attempt" });
  rank.onchange = () => { logState.rank = Number(rank.value); refreshLogs(name); };
  attempt.onchange = () => { logState.attempt = attempt.value === "current" ? null : Number(attempt.value); refreshLogs(name); };
  return el("div", { id: "logs-panel", "data-task": name },
    el("div", { class: "controls" }, el("label", {}, "rank ", rank), el("label", {}, "attempt ", attempt),
      el("a", { id: "whole-log", target: "_blank", rel: "noopener" }, "whole output")),
    el("pre", { class: "logs", id: "logs", text: "" }));
}

function updateChoices(panel, attempts, ranks) {
  const rank = panel.querySelector("#rank"), attempt = panel.querySelector("#attempt");
  if (rank.options.length !== ranks) {
    rank.replaceChildren(...Array.from({ length: ranks }, (_, r) => el("option", { value: r, text: String(r) })));
    rank.value = String(logState.rank);
  }
  if (attempt.options.length !== attempts + 1) {
    attempt.replaceChildren(el("option", { value: "current", text: "current" }),
      ...Array.from({ length: attempts }, (_, n) => el("option", { value: n + 1, text: String(n + 1) })));
    attempt.value = logState.attempt === null ? "current" : String(logState.attempt);
  }
}

async function refreshLogs(name) {
  const pre = document.getElementById("logs");
  if (!pre) return;
  const q = `rank=${logState.rank}` + (logState.attempt ? `&attempt=${logState.attempt}` : "");
  const whole = document.getElementById("whole-log");
  if (whole) whole.href = `/api/tasks/${encodeURIComponent(name)}/logs.txt?${q}`;  // streamed, any size
  try {
    const doc = await getJSON(`/api/tasks/${encodeURIComponent(name)}/logs?${q}`);
    const text = (doc.truncated ? "…\n" : "") + doc.lines.join("\n");
    if (pre.textContent !== text) {
      const atEnd = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
      pre.textContent = text || "(no output yet)";
      if (atEnd) pre.scrollTop = pre.scrollHeight;
    }
  } catch (e) {
    pre.textContent = e.message;
  }
}

// -- routing and refresh ----------------------------------------------------------------------------

async function render() {
  const m = location.hash.match(/^#\/tasks\/(.+)$/);
  try {
    if (m) await showTask(decodeURIComponent(m[1]));
    else await showList();
    document.getElementById("updated").textContent = `updated ${new Date().toLocaleTimeString([], { hour12: false })}`;
  } catch (e) {
    main.replaceChildren(el("p", {}, el("a", { href: "#/", text: "← all tasks" })), el("p", { class: "error", text: e.message }));
  }
  document.body.dataset.ready = "true";
}

function schedule() {
  clearTimeout(timer);
  render().finally(() => { timer = setTimeout(schedule, REFRESH_MS); });
}

window.addEventListener("hashchange", () => { logState.task = null; schedule(); });
schedule();
