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
  var gen = EV.runGeneration;
  return fetch(url, { headers: headers, cache: "no-store" }).then(function (r) {
    return r.json().catch(function () { return {}; }).then(function (data) {
      if (gen !== EV.runGeneration) throw { stale: true, status: 0 };  // asked before the run shown changed
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
  var ms = Math.round(secs * 1000);  // to the nearest ms (a Date would cut 0.3999999 s to 0.399)
  if (EV.tz === "local") ms -= new Date(ms).getTimezoneOffset() * 60000;  // ISO text of the local time
  var iso = new Date(ms).toISOString();
  return withDate ? iso.replace("T", " ").slice(0, 23) : iso.slice(11, 23);
};

/** How many parts a time axis of ``px`` pixels is cut into: a label (up to 15 characters) every 110 px, 2 to 6. */
EV.tickCount = function (px) { return Math.max(2, Math.min(6, Math.floor(px / 110))); };

/* Time axis ticks fall on round instants of the page's clock (every 1, 2 or 5 µs ... ms ... s, 10, 15
   or 30 s, minutes, hours), as many as the axis holds; labels stay wall-clock times at any zoom. */
var STEPS = [];
[1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 0.1].forEach(function (d) { STEPS.push(d, 2 * d, 5 * d); });
STEPS.push(1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400);

/** The tick step (seconds) for [min, max] cut into about ``n`` parts. */
EV.tickStep = function (min, max, n) {
  var want = (max - min) / Math.max(1, n);
  for (var i = 0; i < STEPS.length; i++) if (STEPS[i] >= want) return STEPS[i];
  return Math.ceil(want / 86400) * 86400;
};

/** Ticks (seconds) at multiples of the step on the page's clock, within [min, max]. */
EV.ticks = function (min, max, n) {
  if (!(max > min)) return [min];
  var step = EV.tickStep(min, max, n), off = 0;
  if (EV.tz === "local") off = -new Date(min * 1000).getTimezoneOffset() * 60;  // round on the local clock
  var out = [], k = Math.ceil((min + off) / step - 1e-9);
  for (var t = k * step - off; t <= max + 1e-9 && out.length < 50; t = (++k) * step - off) out.push(t);
  return out;
};

/** A tick's label: the wall-clock time to the precision its step needs (HH:MM, HH:MM:SS, .mmm, .mmmuuu). */
EV.tick = function (secs, step) {
  var txt = EV.clock(secs);  // HH:MM:SS.mmm
  if (step >= 60 && step % 60 === 0) return txt.slice(0, 5);
  if (step >= 1) return txt.slice(0, 8);
  if (step >= 1e-3) return txt.slice(0, step >= 0.1 ? 10 : step >= 0.01 ? 11 : 12);
  var all = Math.round(secs * 1e6), us = ((all % 1000) + 1000) % 1000;
  return EV.clock((all - us) / 1e6).slice(0, 12) + String(us).padStart(3, "0");
};

/** Labels of y-axis values, as many decimals as tell neighbouring ticks apart (94.85, 94.90, 94.95). */
EV.axisNumbers = function (vals, unit) {
  var nums = vals.filter(function (v) { return v !== null && isFinite(v); });
  var top = nums.reduce(function (a, v) { return Math.max(a, Math.abs(v)); }, 0);
  var step = Infinity;
  for (var i = 1; i < nums.length; i++) if (nums[i] !== nums[i - 1]) step = Math.min(step, Math.abs(nums[i] - nums[i - 1]));
  var bytes = unit === "bytes", names = bytes ? ["B", "kB", "MB", "GB", "TB"] : ["", "k", "M", "G", "T"], p = 0;
  while (top >= 1000 && p < names.length - 1) { top /= 1000; p++; }
  var div = Math.pow(1000, p);
  var dec = isFinite(step) ? Math.max(0, Math.min(6, Math.ceil(-Math.log10(step / div) - 1e-9))) : 0;
  return vals.map(function (v) {
    if (v === null || !isFinite(v)) return "";
    return (v / div).toFixed(dec) + (bytes ? " " + names[p] : names[p]);
  });
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
  if (secs === null || secs === undefined || !isFinite(secs)) return "-";
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
