/* Shared helpers of the evlog dashboard: API calls (with the token), colours, formatting, DOM. */
"use strict";
var EV = window.EV = window.EV || {};

EV.token = sessionStorage.getItem("evlog-token") || "";

/** GET an API path; resolves to the parsed JSON, rejects with {status, data}. */
EV.api = function (path, params) {
  var q = new URLSearchParams();
  // the run chosen in the header (else the server shows the newest, and the page follows new runs)
  if (EV.run !== undefined && EV.run !== null && !(params && "run" in params)) q.set("run", EV.run);
  Object.keys(params || {}).forEach(function (k) {
    if (params[k] !== null && params[k] !== undefined && params[k] !== "") q.set(k, params[k]);
  });
  var url = path + (q.toString() ? "?" + q : "");
  var headers = EV.token ? { Authorization: "Bearer " + EV.token } : {};
  return fetch(url, { headers: headers, cache: "no-store" }).then(function (r) {
    return r.json().catch(function () { return {}; }).then(function (data) {
      if (!r.ok) {
        if (r.status === 401 && EV.askToken) EV.askToken();
        throw { status: r.status, data: data };
      }
      return data;
    });
  });
};

/** A stable colour per name (task prefix, process): the same name keeps its colour across updates. */
EV.colour = function (name, light) {
  var h = 2166136261, s = String(name);  // FNV-1a, then the golden ratio spreads the hues apart
  for (var i = 0; i < s.length; i++) { h ^= s.charCodeAt(i); h = Math.imul(h, 16777619) >>> 0; }
  var hue = Math.round((h * 0.618033988749895 % 1) * 360);
  return "hsl(" + hue + "," + (55 + (h >>> 8) % 25) + "%," + (light ? 80 : 42 + (h >>> 16) % 14) + "%)";
};

/* One clock for the whole page: UTC or the browser's local time, chosen once (the header's button,
   kept in localStorage), always 24-hour and to the millisecond. */
EV.tz = localStorage.getItem("evlog-clock") === "local" ? "local" : "utc";
EV.tzName = function () {
  if (EV.tz === "utc") return "UTC";
  var zone = "";
  try { zone = Intl.DateTimeFormat().resolvedOptions().timeZone || ""; } catch (e) { /* no Intl */ }
  return zone ? "local time (" + zone + ")" : "local time";
};
EV.tzShort = function () { return EV.tz === "utc" ? "UTC" : "local"; };
EV.setClock = function (tz) { EV.tz = tz === "local" ? "local" : "utc"; localStorage.setItem("evlog-clock", EV.tz); };

EV.clock = function (secs, withDate) {
  if (secs === null || secs === undefined) return "-";
  var ms = secs * 1000;
  if (EV.tz === "local") ms -= new Date(ms).getTimezoneOffset() * 60000;  // ISO text of the local time
  var iso = new Date(ms).toISOString();
  return withDate ? iso.replace("T", " ").slice(0, 23) : iso.slice(11, 23);
};

/** A time axis tick: offsets from the start for a run under 2 s, else the clock (ms under 2 min). */
/** How many parts a time axis of ``px`` pixels is cut into: a label (up to 12 characters) every 110 px, 2 to 6. */
EV.tickCount = function (px) { return Math.max(2, Math.min(6, Math.floor(px / 110))); };

EV.tick = function (secs, t0, span) {
  return span < 2 ? "+" + EV.duration(secs - t0) : EV.clock(secs).slice(0, span < 120 ? 12 : 8);
};

/** A number for an axis label: 1.2k, 3.4M, ...; bytes as kB, MB, GB. */
EV.short = function (v, unit) {
  if (v === null || v === undefined || !isFinite(v)) return "";
  var a = Math.abs(v), bytes = unit === "bytes", k = 1000;
  var steps = bytes ? ["B", "kB", "MB", "GB", "TB"] : ["", "k", "M", "G", "T"];
  var i = 0;
  while (a >= k && i < steps.length - 1) { a /= k; v /= k; i++; }
  var txt = a >= 100 || a === Math.round(a) ? String(Math.round(v)) : v.toFixed(a >= 10 ? 1 : 2);
  return txt + (bytes ? " " + steps[i] : steps[i]);
};

EV.duration = function (secs) {
  if (secs < 1e-3) return (secs * 1e6).toFixed(0) + " µs";
  if (secs < 1) return (secs * 1e3).toFixed(secs < 0.01 ? 2 : 1) + " ms";
  if (secs < 120) return secs.toFixed(2) + " s";
  return (secs / 60).toFixed(1) + " min";
};

EV.num = function (n) { return (n === null || n === undefined) ? "-" : Number(n).toLocaleString("en-US"); };

/** el("td", {class: "x"}, "text" | node | [children]) */
EV.el = function (tag, attrs, children) {
  var e = document.createElement(tag);
  Object.keys(attrs || {}).forEach(function (k) {
    if (k === "onclick") e.addEventListener("click", attrs[k]);
    else e.setAttribute(k, attrs[k]);
  });
  [].concat(children === undefined ? [] : children).forEach(function (c) {
    if (c === null || c === undefined) return;
    e.appendChild(typeof c === "object" ? c : document.createTextNode(String(c)));
  });
  return e;
};

EV.table = function (head, rows, rowClass) {
  var t = EV.el("table", {}, [EV.el("thead", {}, EV.el("tr", {}, head.map(function (h) { return EV.el("th", {}, h); })))]);
  var tb = EV.el("tbody");
  rows.forEach(function (r, i) {
    tb.appendChild(EV.el("tr", rowClass ? { "class": rowClass(i) || "" } : {}, r.map(function (c) {
      return c && c.nodeType ? EV.el("td", {}, c) : EV.el("td", typeof c === "object" && c !== null && c.msg !== undefined ? { "class": "msg" } : {},
        typeof c === "object" && c !== null && c.msg !== undefined ? c.msg : c);
    })));
  });
  t.appendChild(tb);
  return t;
};

EV.msg = function (body) {
  return { msg: typeof body === "string" ? body : JSON.stringify(body) };
};

EV.log = function () {  /* informational messages go to the browser console, as DaggerWebDash does */
  var args = ["[evlog]"].concat([].slice.call(arguments));
  console.log.apply(console, args);
};
