// rulecheck report: draws the charts of the page's embedded data with
// dygraphs (inlined before this script), then records a self-check in
// #vigil-selftest that tests read from the DOM (docs/report.md).
//
// Data (JSON in #vigil-data), built by report_html.cpp:
//   traces:  [{name, path, observations, first, last, error}]
//   rules:   [name, ...]
//   firings: [[trace, rule, step, severity, labels, value, pending_since], ...]
//   charts:  [{key, name, eval, lines: [{trace, steps, values}], marks: [firing, ...]}]
//   points:  lines longer than this are drawn min/max-downsampled
// Values are numbers, or "NaN" / "Infinity" / "-Infinity".
(function () {
  'use strict';
  var selftest = window.__vigilSelftest;
  var data = JSON.parse(document.getElementById('vigil-data').textContent);
  // Okabe-Ito, without yellow (too pale on white); one colour per trace.
  var PALETTE = ['#0072B2', '#E69F00', '#009E73', '#CC79A7', '#56B4E9', '#D55E00', '#000000'];
  var SEVERITY = { info: '#005a9c', warning: '#7a4f00', error: '#b03a00', critical: '#8b0a50' };
  var NONFINITE = '#b03a00';
  var MARKS = 'firings';

  function num(v) {
    if (typeof v === 'number') return v;
    if (v === 'NaN') return NaN;
    if (v === 'Infinity') return Infinity;
    if (v === '-Infinity') return -Infinity;
    return null;
  }
  function traceColor(t) { return PALETTE[t % PALETTE.length]; }
  function fmt(v) {
    if (v === null || v === undefined) return '';
    if (typeof v !== 'number' || !isFinite(v)) return String(v);
    return Math.abs(v) >= 1e6 || (Math.abs(v) < 1e-4 && v !== 0) ? v.toExponential(4) : String(+v.toPrecision(6));
  }
  function el(tag, attrs, text) {
    var e = document.createElement(tag);
    for (var k in attrs || {}) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = text;
    return e;
  }

  // Indices of the points of one line to draw: all of them, or per bucket of
  // consecutive samples the first, the minimum, the maximum and the last
  // finite one plus the first non-finite one, so spikes and NaN gaps survive.
  function pick(values, limit, full) {
    var n = values.length, idx = [];
    if (full || n <= limit) { for (var i = 0; i < n; i++) idx.push(i); return idx; }
    var buckets = Math.max(1, Math.floor(limit / 4)), size = n / buckets;
    for (var b = 0; b < buckets; b++) {
      var lo = Math.floor(b * size), hi = Math.min(n, Math.floor((b + 1) * size));
      var mn = -1, mx = -1, bad = -1, first = -1, last = -1;
      for (var j = lo; j < hi; j++) {
        var v = values[j];
        if (!isFinite(v)) { if (bad < 0) bad = j; continue; }
        if (first < 0) first = j;
        last = j;
        if (mn < 0 || v < values[mn]) mn = j;
        if (mx < 0 || v > values[mx]) mx = j;
      }
      var keep = [first, mn, mx, last, bad].filter(function (x) { return x >= 0; });
      keep.sort(function (a, c) { return a - c; });
      for (var k = 0; k < keep.length; k++) if (k === 0 || keep[k] !== keep[k - 1]) idx.push(keep[k]);
    }
    return idx;
  }

  // The dygraphs matrix of one chart: a row per step that any drawn point or
  // firing mark has; a column per trace line (null where that trace has no
  // sample), then the firing-mark columns. Annotations need a point of their
  // own series at their step, and dygraphs keeps one annotation per
  // (series, step), so the k-th firing at a step goes to mark column k.
  function build(chart, full) {
    var rows = new Map(), nl = chart.lines.length, lo = Infinity, hi = -Infinity;
    chart.lines.forEach(function (line) {
      line.vals = line.vals || line.values.map(num);
      line.vals.forEach(function (v) { if (isFinite(v)) { lo = Math.min(lo, v); hi = Math.max(hi, v); } });
    });
    // A mark sits at the bottom of the plot (attachAtBottom), but dygraphs
    // skips a point outside the plotted range, so its value is mid-range
    // (inside it on a linear and on a log axis alike).
    var mid = isFinite(lo) ? (lo + hi) / 2 : 1;
    var perStep = new Map(), markCols = 0, placed = [];
    chart.marks.forEach(function (f) {
      var step = data.firings[f][2], k = perStep.get(step) || 0;
      perStep.set(step, k + 1);
      markCols = Math.max(markCols, k + 1);
      placed.push([f, step, k]);
    });
    var width = 1 + nl + markCols;
    function row(step) {
      var r = rows.get(step);
      if (!r) { r = new Array(width).fill(null); r[0] = step; rows.set(step, r); }
      return r;
    }
    chart.lines.forEach(function (line, li) {
      var idx = pick(line.vals, data.points, full);
      line.drawn = idx.length;
      // For the self-check: downsampling kept the extremes and a non-finite sample.
      var ext = function (list) {
        var e = { lo: Infinity, hi: -Infinity, bad: false };
        list.forEach(function (v) { if (isFinite(v)) { e.lo = Math.min(e.lo, v); e.hi = Math.max(e.hi, v); } else e.bad = true; });
        return e;
      };
      var all = ext(line.vals), kept = ext(idx.map(function (i) { return line.vals[i]; }));
      line.extremesKept = all.lo === kept.lo && all.hi === kept.hi && all.bad === kept.bad;
      idx.forEach(function (i) { row(line.steps[i])[1 + li] = isFinite(line.vals[i]) ? line.vals[i] : NaN; });
    });
    placed.forEach(function (p) { row(p[1])[1 + nl + p[2]] = mid; });
    var matrix = Array.from(rows.values()).sort(function (a, b) { return a[0] - b[0]; });
    return { matrix: matrix, markCols: markCols, placed: placed };
  }

  function severityLetter(s) { return s.charAt(0).toUpperCase(); }

  function annotations(chart, built, labels, width) {
    var dense = built.placed.length > 40 || built.placed.length * 100 > 3 * width;
    return built.placed.map(function (p) {
      var f = data.firings[p[0]], rule = data.rules[f[1]], sev = f[3];
      // More firings than three rows of labels hold: the severity letter
      // only (the rule is in the tooltip), so the flags stay apart.
      var short = dense ? severityLetter(sev)
                        : severityLetter(sev) + ' ' + (rule.length > 18 ? rule.slice(0, 17) + '\u2026' : rule);
      return {
        series: labels[1 + chart.lines.length + p[2]], x: p[1], shortText: short,
        text: rule + ' (' + sev + ') at step ' + f[2] + ' in ' + data.traces[f[0]].name +
              (f[4] ? ' ' + f[4] : '') + (f[5] !== null ? ' value=' + fmt(num(f[5])) : '') +
              (f[6] < f[2] ? ', pending since step ' + f[6] : ''),
        attachAtBottom: true, cssClass: 'mark sev-' + sev, tickColor: SEVERITY[sev],
        width: 7 * short.length + 6, height: 15
      };
    });
  }

  var graphs = [];
  var container = document.getElementById('charts');
  var logBox = document.getElementById('ctl-log');
  var smoothBox = document.getElementById('ctl-smooth');
  var fullBox = document.getElementById('ctl-full');

  function legendFormatter(chart) {
    return function (d) {
      if (d.x === undefined || d.x === null) {
        return chart.lines.map(function (l) {
          return '<span class="swatch" style="background:' + traceColor(l.trace) + '"></span>' +
                 escapeHtml(data.traces[l.trace].name);
        }).join('');
      }
      var out = 'step ' + d.xHTML;
      d.series.forEach(function (s, i) {
        if (i >= chart.lines.length) return;  // firing-mark columns
        var l = chart.lines[i];
        out += '<span class="swatch" style="background:' + traceColor(l.trace) + '"></span>' +
               escapeHtml(data.traces[l.trace].name) + ': ' + (s.y === undefined || s.y === null ? '\u2013' : fmt(s.y));
      });
      return out;
    };
  }
  function escapeHtml(s) {
    return String(s).replace(/[&<>"]/g, function (c) { return { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;' }[c]; });
  }

  // Pending spans (a firing's pending_since..step) shaded in its severity's
  // colour; NaN/Inf samples as a triangle at the top and a dashed line.
  function underlay(chart) {
    return function (ctx, area, g) {
      chart.marks.forEach(function (fi) {
        var f = data.firings[fi];
        if (!(f[6] < f[2])) return;
        var x0 = g.toDomXCoord(f[6]), x1 = g.toDomXCoord(f[2]);
        ctx.fillStyle = SEVERITY[f[3]];
        ctx.globalAlpha = 0.12;
        ctx.fillRect(Math.max(area.x, x0), area.y, Math.min(area.x + area.w, x1) - Math.max(area.x, x0), area.h);
        ctx.globalAlpha = 1;
      });
      chart.lines.forEach(function (line) {
        line.vals.forEach(function (v, i) {
          if (isFinite(v)) return;
          var x = g.toDomXCoord(line.steps[i]);
          if (x < area.x || x > area.x + area.w) return;
          ctx.strokeStyle = NONFINITE;
          ctx.setLineDash([3, 3]);
          ctx.beginPath(); ctx.moveTo(x, area.y); ctx.lineTo(x, area.y + area.h); ctx.stroke();
          ctx.setLineDash([]);
          ctx.fillStyle = traceColor(line.trace);
          ctx.beginPath(); ctx.moveTo(x - 5, area.y); ctx.lineTo(x + 5, area.y); ctx.lineTo(x, area.y + 8);
          ctx.closePath(); ctx.fill();
        });
      });
    };
  }

  // Firing labels that would overlap (nearby steps) go to rows above each
  // other, greedily left to right; dygraphs itself only stacks equal steps.
  function stagger(box) {
    var divs = Array.prototype.slice.call(box.querySelectorAll('.dygraph-annotation.mark'));
    if (!divs.length) return;
    var bottom = 0;
    divs.forEach(function (d) { bottom = Math.max(bottom, parseFloat(d.style.top)); });
    divs.sort(function (a, b) { return parseFloat(a.style.left) - parseFloat(b.style.left); });
    var rowEnd = [], room = box.querySelector('.graph').clientWidth;
    divs.forEach(function (d) {
      var width = parseFloat(d.style.width), r = 0;
      // A flag at the first or last step stays inside the chart (its tick
      // still marks the step).
      var left = Math.max(0, Math.min(parseFloat(d.style.left), room - width - 4));
      d.style.left = left + 'px';
      while (r < rowEnd.length && rowEnd[r] > left) r++;
      if (r >= 6) r = 0;  // crowded: overlap rather than cover the plot
      rowEnd[r] = left + width + 3;
      d.style.top = (bottom - r * (parseFloat(d.style.height) + 3)) + 'px';
    });
  }

  data.charts.forEach(function (chart, ci) {
    var box = el('section', { 'class': 'chart', id: 'chart-' + ci, 'data-marks': String(chart.marks.length) });
    var head = el('div', { 'class': 'chart-head' });
    head.appendChild(el('h3', {}, chart.key + (chart.eval ? '  (eval)' : '')));
    var total = 0, bad = [];
    chart.lines.forEach(function (l) {
      total += l.values.length;
      var nan = 0, inf = 0;
      l.values.forEach(function (v) { if (v === 'NaN') nan++; else if (typeof v === 'string') inf++; });
      if (nan + inf) bad.push(data.traces[l.trace].name + ': ' + (nan ? nan + ' NaN' : '') + (nan && inf ? ', ' : '') + (inf ? inf + ' \u00b1Inf' : ''));
    });
    var positive = chart.lines.every(function (l) {
      return l.values.every(function (v) { var x = num(v); return !isFinite(x) || x > 0; });
    });
    head.appendChild(el('span', { 'class': 'note' }, total + ' samples, ' + chart.marks.length + ' firing' + (chart.marks.length === 1 ? '' : 's')));
    var full = el('input', { type: 'checkbox' });
    var fullLabel = el('label', { 'class': 'note' });
    fullLabel.appendChild(full);
    fullLabel.appendChild(document.createTextNode(' all points'));
    head.appendChild(fullLabel);
    if (!positive) head.appendChild(el('span', { 'class': 'note' }, 'log scale off: values \u2264 0'));
    if (bad.length) head.appendChild(el('span', { 'class': 'nonfinite' }, '\u25bc non-finite samples \u2014 ' + bad.join('; ')));
    box.appendChild(head);
    var graphDiv = el('div', { 'class': 'graph' });
    var legend = el('div', { 'class': 'legend' });
    box.appendChild(graphDiv);
    box.appendChild(legend);
    container.appendChild(box);

    var built = build(chart, fullBox.checked);
    var downsampled = chart.lines.some(function (l) { return l.drawn < l.values.length; });
    fullLabel.style.display = downsampled ? '' : 'none';
    var labels = ['step'];
    chart.lines.forEach(function (l) { labels.push(data.traces[l.trace].name); });
    for (var k = 0; k < built.markCols; k++) labels.push(MARKS + (k ? ' ' + (k + 1) : ''));
    var series = {};
    labels.slice(1 + chart.lines.length).forEach(function (name) {
      series[name] = { strokeWidth: 0, drawPoints: false, highlightCircleSize: 0, color: '#888' };
    });
    var colors = chart.lines.map(function (l) { return traceColor(l.trace); });
    for (k = 0; k < built.markCols; k++) colors.push('#888');
    var entry = { chart: chart, box: box, drawn: false, positive: positive, full: full };
    var g = new Dygraph(graphDiv, built.matrix, {
      labels: labels, colors: colors, series: series,
      xlabel: 'step', ylabel: chart.name, axisLabelWidth: 70, yLabelWidth: 16, xLabelHeight: 16,
      connectSeparatedPoints: true, drawPoints: total < 60, pointSize: 2, strokeWidth: 1.4,
      labelsDiv: legend, legend: 'always', legendFormatter: legendFormatter(chart),
      logscale: positive && logBox.checked, rollPeriod: +smoothBox.value || 1,
      underlayCallback: underlay(chart),
      drawCallback: function () { entry.drawn = true; stagger(box); }
    });
    entry.graph = g;
    g.ready(function () { g.setAnnotations(annotations(chart, built, labels, graphDiv.clientWidth)); });
    full.addEventListener('change', function () {
      var b = build(chart, full.checked || fullBox.checked);
      g.updateOptions({ file: b.matrix });
      g.setAnnotations(annotations(chart, b, labels, graphDiv.clientWidth));
    });
    graphs.push(entry);
  });

  logBox.addEventListener('change', function () {
    graphs.forEach(function (e) { if (e.positive) e.graph.updateOptions({ logscale: logBox.checked }); });
  });
  smoothBox.addEventListener('input', function () {
    var r = Math.max(1, Math.min(1000, Math.floor(+smoothBox.value) || 1));
    graphs.forEach(function (e) { e.graph.updateOptions({ rollPeriod: r }); });
  });
  fullBox.addEventListener('change', function () {
    graphs.forEach(function (e) { e.full.checked = fullBox.checked; e.full.dispatchEvent(new Event('change')); });
  });

  // The self-check: every chart drew, and each shows one annotation per
  // firing mark it was given.
  function check(result, when) {
    graphs.forEach(function (e) {
      var canvas = e.box.querySelector('canvas');
      if (when === '' && e.drawn && canvas && canvas.width > 0) result.rendered++;
      var n = e.box.querySelectorAll('.dygraph-annotation').length;
      if (when === '') { result.annotations += n; result.expected += e.chart.marks.length; }
      if (n !== e.chart.marks.length)
        result.mismatched.push(e.chart.key + when + ': ' + n + ' of ' + e.chart.marks.length);
      e.chart.lines.forEach(function (l) {
        if (!l.extremesKept) result.mismatched.push(e.chart.key + when + ': downsampling lost an extreme of ' + data.traces[l.trace].name);
      });
      if (when === '') result.downsampled = (result.downsampled || 0) +
        e.chart.lines.filter(function (l) { return l.drawn < l.values.length; }).length;
    });
  }
  var result = { charts: graphs.length, rendered: 0, annotations: 0, expected: 0, mismatched: [] };
  check(result, '');
  // Pixels the page is wider than the window (0: nothing needs sideways
  // scrolling of the whole page; wide tables scroll inside their own box).
  result.overflow = Math.max(0, document.documentElement.scrollWidth - document.documentElement.clientWidth);
  // With #selftest-controls (the browser test), every control is exercised
  // once — log scale, smoothing, all points — and checked again, then reset.
  if (location.hash === '#selftest-controls') {
    result.controls = [];
    [[logBox, 'checked', true, 'change'], [smoothBox, 'value', '5', 'input'], [fullBox, 'checked', true, 'change']]
      .forEach(function (c) {
        var before = c[0][c[1]];
        c[0][c[1]] = c[2];
        c[0].dispatchEvent(new Event(c[3]));
        check(result, ' (' + c[0].id + ')');
        result.controls.push(c[0].id);
        c[0][c[1]] = before;
        c[0].dispatchEvent(new Event(c[3]));
      });
    check(result, ' (reset)');
  }
  selftest.finish(result);
})();
