/* Colours of task prefixes: categorical palettes (d3-scale-chromatic's Tableau10, then Dark2 and Set1,
   vendored in static/vendor/d3-scale-chromatic), given out in the order prefixes are first seen on the
   page, so the first ten prefixes of a run get ten clearly different colours and a prefix keeps its
   colour across updates, in the Gantt, its legend and the task graph. Red comes last (red outlines mean erred). Past 24 prefixes: hashed hues. */
"use strict";
(function () {
  var S = window.d3SchemeCategorical || {};
  var T = S.Tableau10 || [];
  // Tableau's red last: red outlines mean "erred" on the same bars
  var LIST = [].concat(T.filter(function (c) { return c !== "#e15759"; }), S.Dark2 || [], (S.Set1 || []).filter(function (c) {
    return c !== "#ffff33" && c !== "#999999" && c !== "#e41a1c";  // too pale on white; grey reads as "no prefix"; red
  }), T.indexOf("#e15759") >= 0 ? ["#e15759"] : []);
  var given = {}, next = 0;

  /** The colour of a prefix; light: a pale tint of it (DAG node fill). */
  EV.prefixColour = function (name, light) {
    var key = String(name);
    if (!(key in given)) given[key] = next < LIST.length ? LIST[next++] : null;
    var c = given[key];
    if (c === null) return EV.colour(key, light);
    return light ? tint(c, 0.72) : c;
  };

  function tint(hex, f) {
    var n = parseInt(hex.slice(1), 16), r = n >> 16, g = (n >> 8) & 255, b = n & 255;
    var m = function (v) { return Math.round(v + (255 - v) * f); };
    return "rgb(" + m(r) + "," + m(g) + "," + m(b) + ")";
  }

  /** Prefixes in the order given (the Gantt registers its prefixes first, in order of first start). */
  EV.seePrefixes = function (names) { names.forEach(function (p) { EV.prefixColour(p); }); };
})();
