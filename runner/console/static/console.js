// The console's one script: it refreshes the pages from the console's JSON and writes text nodes only
// (never HTML), so nothing a user wrote can run here. No library, nothing loaded from elsewhere.
"use strict";

const $ = (selector, root = document) => root.querySelector(selector);

function el(tag, attributes = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attributes)) {
    if (value !== null && value !== undefined) node.setAttribute(key, value);
  }
  for (const child of children) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

// A sign-in's anti-forgery key: handed to this script once, by the sign-in's answer, and kept in the
// storage of the console's origin (its scheme, host and port), which no other page can read. Every
// request that changes anything sends it; a page of another origin cannot.
const KEY = "sql-runner-console-key";

function signedIn() {
  localStorage.setItem(KEY, document.body.dataset.key);
  window.location.replace(document.body.dataset.next || "/");
}

function signInAgain() {
  window.location.assign(`/login?next=${encodeURIComponent(window.location.pathname)}`);
}

async function api(path, options = {}) {
  const headers = { Accept: "application/json", "Content-Type": "application/json" };
  if (options.method && options.method !== "GET") headers["X-Console-Key"] = localStorage.getItem(KEY) || "";
  const response = await fetch(path, { credentials: "same-origin", headers, ...options });
  if (response.status === 401) signInAgain();
  const body = await response.json().catch(() => ({}));
  if (!response.ok) {
    const error = new Error(body.error || `HTTP ${response.status}`);
    error.problems = body.problems || [];
    error.status = response.status;
    throw error;
  }
  return body;
}

// How many rows, with the right noun: "1 row", "2 rows".
const rows = (n) => `${n.toLocaleString()} ${n === 1 ? "row" : "rows"}`;

// Every <time datetime="..."> in the viewer's own time zone, to the second (the server writes UTC).
function localTimes(root = document) {
  const format = { year: "numeric", month: "short", day: "numeric", hour: "2-digit", minute: "2-digit", second: "2-digit", timeZoneName: "short" };
  for (const node of root.querySelectorAll("time[datetime]")) {
    const at = new Date(node.getAttribute("datetime"));
    if (!Number.isNaN(at.getTime())) {
      node.title = node.getAttribute("datetime");
      node.textContent = at.toLocaleString(undefined, format);
    }
  }
}

// A small line chart of the last minutes: x is time, y the values, scaled to their maximum.
function sparkline(times, values, label) {
  const width = 120, height = 28, ns = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("viewBox", `0 0 ${width} ${height}`);
  svg.setAttribute("width", width);
  svg.setAttribute("height", height);
  svg.setAttribute("class", "spark");
  svg.setAttribute("role", "img");
  svg.setAttribute("aria-label", label);
  if (values.length > 1) {
    const t0 = times[0], span = Math.max(times[times.length - 1] - t0, 1);
    const top = Math.max(...values, 1);
    const points = values.map((v, i) => `${((times[i] - t0) / span) * (width - 2) + 1},${height - 2 - (v / top) * (height - 4)}`);
    const line = document.createElementNS(ns, "polyline");
    line.setAttribute("points", points.join(" "));
    line.setAttribute("fill", "none");
    line.setAttribute("stroke", "currentColor");
    line.setAttribute("stroke-width", "1.5");
    svg.append(line);
  }
  const title = document.createElementNS(ns, "title");
  title.textContent = label;
  svg.append(title);
  return svg;
}

// ---- overview -----------------------------------------------------------------------------------

const overview = { rows: [], key: "name", direction: 1 };

function renderOverview() {
  const filter = ($("#filter").value || "").toLowerCase();
  const rows = overview.rows
    .filter((row) => !filter || [row.name, row.state, row.mode, row.description].join(" ").toLowerCase().includes(filter))
    .sort((a, b) => {
      const x = a[overview.key], y = b[overview.key];
      if (x === y) return a.name < b.name ? -1 : 1;
      if (x === null || x === undefined) return 1;
      if (y === null || y === undefined) return -1;
      return (x < y ? -1 : 1) * overview.direction;
    });
  const body = $("#queries tbody");
  body.replaceChildren(
    ...rows.map((row) =>
      el(
        "tr",
        { "data-name": row.name, "data-state": row.state },
        el("td", {}, el("a", { href: `/query/${encodeURIComponent(row.name)}` }, row.name), el("div", { class: "muted small" }, row.description)),
        el("td", {}, row.mode),
        el("td", {}, `v${row.version}`),
        el("td", { title: row.why || "" }, el("span", { class: `state state-${row.state.split(" ")[0]}` }, row.state), row.why ? el("div", { class: "why small" }, row.why) : null),
        el("td", { class: "number rate" }, el("span", { class: "value" }, row.shown.rate), sparkline(row.series.t, row.series.rate, `input rows/s of ${row.name}`)),
        el("td", { class: "number" }, el("span", { class: "value" }, row.shown.batch), sparkline(row.series.t, row.series.ms, `batch duration (ms) of ${row.name}`)),
        el("td", { class: "number watermark" }, row.shown.watermark),
        el("td", { class: "number" }, row.shown.kafka_lag),
        el("td", { class: "number" }, row.dead_letters_hour.toLocaleString()),
        el("td", { class: "number" }, row.restarts.toLocaleString()),
        el("td", { class: "number last-batch" }, row.shown.last_batch),
      ),
    ),
  );
  $("#empty").hidden = overview.rows.length > 0;
}

function renderSession(session) {
  const target = $("#session-health");
  if (!session) {
    target.textContent = "No session has run for this team.";
    return;
  }
  const invalid = Object.keys(session.invalid || {}).length;
  const builds = session.stuck_builds === 1 ? "1 stuck build" : `${session.stuck_builds} stuck builds`;
  const manifests = invalid === 1 ? "1 manifest not deployable" : `${invalid} manifests not deployable`;
  target.replaceChildren(
    el("span", { class: `state state-${session.state}` }, session.state),
    ` run ${session.run_id}, up ${session.shown.uptime}: ${session.running} running, ${session.failing} failing, ` +
      `${session.parked} parked, ${builds}` +
      (invalid ? `, ${manifests}` : "") +
      `; health reported ${session.shown.updated} ago`,
  );
}

async function refreshOverview() {
  try {
    const data = await api("/api/overview");
    overview.rows = data.rows;
    renderSession(data.session);
    renderOverview();
    $("#updated").textContent = `updated ${new Date(data.at * 1000).toLocaleTimeString()}`;
  } catch (error) {
    $("#updated").textContent = `not updated: ${error.message}`;
  }
}

function startOverview() {
  for (const header of document.querySelectorAll("#queries th[data-key]")) {
    header.addEventListener("click", () => {
      const key = header.dataset.key;
      overview.direction = overview.key === key ? -overview.direction : header.hasAttribute("data-numeric") ? -1 : 1;
      overview.key = key;
      for (const other of document.querySelectorAll("#queries th")) other.removeAttribute("aria-sort");
      header.setAttribute("aria-sort", overview.direction > 0 ? "ascending" : "descending");
      renderOverview();
    });
  }
  $("#filter").addEventListener("input", renderOverview);
  refreshOverview();
  setInterval(refreshOverview, 2000);
}

// ---- one query ----------------------------------------------------------------------------------

function renderVerdict(verdict) {
  const box = $("#verdict");
  if (verdict.refused || verdict.error) {
    box.replaceChildren(
      el("h3", {}, "The desired manifest cannot be deployed"),
      el("ul", { class: "problems" }, ...(verdict.refused || [verdict.error]).map((p) => el("li", {}, p))),
    );
    return;
  }
  const parts = [
    el("h3", {}, "Verdict: ", el("span", { class: `verdict-${verdict.decision}`, id: "verdict-kind" }, verdict.decision), ` — ${verdict.summary}`),
    el("ul", { class: "reasons" }, ...(verdict.reasons || []).map((r) => el("li", { "data-code": r.code }, r.text))),
    verdict.sources && verdict.sources.length
      ? el("ul", { class: "sources" }, ...verdict.sources.map((s) => el("li", {}, `${s.table} starts ${s.how}: ${s.detail}`)))
      : null,
  ];
  box.replaceChildren(...parts.filter((part) => part !== null));
}

async function pollVerdict(name) {
  try {
    const verdict = await api(`/api/query/${encodeURIComponent(name)}/verdict`);
    if (verdict.pending) {
      setTimeout(() => pollVerdict(name), 700);
      return;
    }
    renderVerdict(verdict);
  } catch (error) {
    $("#verdict").replaceChildren(el("p", { class: "error" }, `No verdict: ${error.message}`));
  }
}

function startQuery() {
  const name = document.body.dataset.query;
  pollVerdict(name);
  for (const button of document.querySelectorAll("[data-action]")) {
    button.addEventListener("click", async () => {
      const action = button.dataset.action;
      const confirm = window.prompt(`${button.textContent} of ${name}: type the query's name to confirm`);
      if (confirm === null) return;
      const result = $("#action-result");
      result.textContent = `${action}: working…`;
      try {
        const done = await api(`/api/query/${encodeURIComponent(name)}/${action}`, {
          method: "POST",
          body: JSON.stringify({ confirm }),
        });
        result.textContent = `${done.decision}: ${done.summary} (${done.result})`;
        setTimeout(() => window.location.reload(), 1500);
      } catch (error) {
        result.textContent = `${action} refused: ${error.message}`;
      }
    });
  }
}

// ---- preview ------------------------------------------------------------------------------------

const preview = { id: null, seen: 0, timer: null };

function problems(list) {
  $("#problems").replaceChildren(...list.map((p) => el("li", {}, p)));
}

async function pollPreview() {
  const data = await api(`/api/preview/${preview.id}?seen=${preview.seen}`);
  const table = $("#rows");
  if (data.columns && !table.tHead.rows.length) {
    table.tHead.append(el("tr", {}, ...data.columns.map((c) => el("th", {}, c))));
  }
  for (const row of data.rows) {
    table.tBodies[0].append(el("tr", {}, ...row.map((v) => el("td", {}, v === null ? "NULL" : v))));
  }
  preview.seen = data.total;
  const by = data.answered_by ? ` by ${data.answered_by}` : "";
  if (data.error) {
    problems(data.problems.length ? data.problems : [data.error]);
    $("#preview-state").textContent = "refused";
  } else if (data.done) {
    $("#preview-state").textContent = `${rows(data.total)} in ${data.seconds.toFixed(1)} s${by}` + (data.timed_out ? " (time limit reached)" : "");
  } else {
    $("#preview-state").textContent = `${rows(data.total)} so far, ${data.seconds.toFixed(1)} s${by}…`;
  }
  if (!data.done) preview.timer = setTimeout(pollPreview, 300);
  else $("#run").disabled = false;
}

function request() {
  const kind = $("input[name=kind]:checked").value;
  return {
    [kind]: $("#editor").value,
    limit: Number($("#limit").value),
    timeout: Number($("#timeout").value),
  };
}

function startPreview() {
  $("#run").addEventListener("click", async () => {
    clearTimeout(preview.timer);
    problems([]);
    $("#rows").tHead.replaceChildren();
    $("#rows").tBodies[0].replaceChildren();
    $("#preview-state").textContent = "starting…";
    $("#run").disabled = true;
    try {
      const started = await api("/api/preview", { method: "POST", body: JSON.stringify(request()) });
      preview.id = started.id;
      preview.seen = 0;
      pollPreview();
    } catch (error) {
      problems(error.problems.length ? error.problems : [error.message]);
      $("#preview-state").textContent = "refused";
      $("#run").disabled = false;
    }
  });
  $("#validate").addEventListener("click", async () => {
    problems([]);
    $("#preview-state").textContent = "validating…";
    try {
      const ok = await api("/api/validate", { method: "POST", body: JSON.stringify({ manifest: $("#editor").value }) });
      const lookups = ok.lookups.length ? `; looks up ${ok.lookups.join(", ")}` : "";
      $("#preview-state").textContent = `ok ${ok.name}: reads ${ok.reads.join(", ") || "no tables"}${lookups}; writes ${ok.writes}`;
    } catch (error) {
      problems(error.problems.length ? error.problems : [error.message]);
      $("#preview-state").textContent = "not valid";
    }
  });
}

async function signOut() {
  await fetch("/logout", { method: "POST", credentials: "same-origin", headers: { "X-Console-Key": localStorage.getItem(KEY) || "" } });
  localStorage.removeItem(KEY);
  window.location.assign("/login");
}

document.addEventListener("DOMContentLoaded", () => {
  const page = document.body.dataset.page;
  if (page === "signed-in") return signedIn();
  localTimes();
  const out = $("#sign-out");
  if (out) out.addEventListener("click", signOut);
  if (page === "overview") startOverview();
  if (page === "query") startQuery();
  if (page === "preview") startPreview();
});
