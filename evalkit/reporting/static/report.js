/* evalkit report: charts (Chart.js, inlined above) and the lazily rendered sample list. No network, no innerHTML. */
(function () {
  "use strict";

  var PALETTE = ["#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2", "#ca8a04", "#db2777"];

  function readData() {
    var el = document.getElementById("report-data");
    if (!el) { return { charts: [] }; }
    return JSON.parse(el.textContent || "{}");
  }

  function color(i, alpha) {
    var hex = PALETTE[i % PALETTE.length];
    if (alpha === undefined) { return hex; }
    var r = parseInt(hex.slice(1, 3), 16), g = parseInt(hex.slice(3, 5), 16), b = parseInt(hex.slice(5, 7), 16);
    return "rgba(" + r + "," + g + "," + b + "," + alpha + ")";
  }

  function fmt(x, digits) {
    if (x === null || x === undefined) { return "—"; }
    return Number(x).toLocaleString(undefined, { maximumFractionDigits: digits === undefined ? 1 : digits });
  }

  /* Vertical CI whiskers for scatter points that carry lo/hi. */
  var whiskers = {
    id: "evalkitWhiskers",
    afterDatasetsDraw: function (chart) {
      var y = chart.scales.y, ctx = chart.ctx;
      chart.data.datasets.forEach(function (ds, di) {
        if (!ds.whiskers || !chart.isDatasetVisible(di)) { return; }
        var meta = chart.getDatasetMeta(di);
        ds.data.forEach(function (p, i) {
          if (p.lo === null || p.hi === null || p.lo === undefined || p.hi === undefined) { return; }
          var el = meta.data[i];
          if (!el) { return; }
          var x = el.x, top = y.getPixelForValue(p.hi), bot = y.getPixelForValue(p.lo);
          ctx.save();
          ctx.strokeStyle = "rgba(60,60,60,0.7)";
          ctx.lineWidth = 1.2;
          ctx.beginPath();
          ctx.moveTo(x, top); ctx.lineTo(x, bot);
          ctx.moveTo(x - 4, top); ctx.lineTo(x + 4, top);
          ctx.moveTo(x - 4, bot); ctx.lineTo(x + 4, bot);
          ctx.stroke();
          ctx.restore();
        });
      });
    }
  };

  /* Text labels next to scatter points, none over another: each takes the first free spot of four around its
     point (right above, right below, left above, left below); a label with none free is left out (the point's
     tooltip names it). The boxes drawn are kept on the chart as $evalkitLabels. */
  var pointLabels = {
    id: "evalkitPointLabels",
    afterDatasetsDraw: function (chart) {
      var ctx = chart.ctx, boxes = [], area = chart.chartArea;
      function free(b) {
        if (area && (b.x0 < area.left || b.x1 > area.right + 40)) { return false; }
        return boxes.every(function (o) { return b.x1 <= o.x0 || b.x0 >= o.x1 || b.y1 <= o.y0 || b.y0 >= o.y1; });
      }
      chart.data.datasets.forEach(function (ds, di) {
        if (!ds.pointLabels || !chart.isDatasetVisible(di)) { return; }
        var meta = chart.getDatasetMeta(di);
        ctx.save();
        ctx.font = "12px system-ui, sans-serif";
        ctx.fillStyle = "#1d232b";
        ctx.textBaseline = "middle";
        ds.data.forEach(function (p, i) {
          var el = meta.data[i];
          if (!el) { return; }
          var text = String(p.label || "");
          if (text.length > 40) { text = text.slice(0, 39) + "…"; }
          var w = ctx.measureText(text).width, h = 14;
          var spots = [[el.x + 8, el.y - 8], [el.x + 8, el.y + 8], [el.x - 8 - w, el.y - 8], [el.x - 8 - w, el.y + 8]];
          for (var k = 0; k < spots.length; k++) {
            var b = { x0: spots[k][0], y0: spots[k][1] - h / 2, x1: spots[k][0] + w, y1: spots[k][1] + h / 2, text: text };
            if (free(b)) {
              boxes.push(b);
              ctx.fillText(text, spots[k][0], spots[k][1]);
              break;
            }
          }
        });
        ctx.restore();
      });
      chart.$evalkitLabels = boxes;
    }
  };

  /* "n=…" above each bar of bar datasets that carry counts. */
  var barCounts = {
    id: "evalkitBarCounts",
    afterDatasetsDraw: function (chart) {
      var ctx = chart.ctx;
      chart.data.datasets.forEach(function (ds, di) {
        if (!ds.counts || !chart.isDatasetVisible(di)) { return; }
        var meta = chart.getDatasetMeta(di);
        ctx.save();
        ctx.font = "11px system-ui, sans-serif";
        ctx.fillStyle = "#69737f";
        ctx.textAlign = "center";
        ctx.textBaseline = "bottom";
        meta.data.forEach(function (el, i) {
          var n = ds.counts[i];
          if (!n) { return; }
          ctx.fillText("n=" + n, el.x, el.y - 3);
        });
        ctx.restore();
      });
    }
  };

  function baseOptions(spec) {
    return {
      responsive: true,
      maintainAspectRatio: false,
      animation: false,
      plugins: {
        title: { display: true, text: spec.title },
        legend: { display: true, position: "bottom" }
      }
    };
  }

  function cdfConfig(spec) {
    var opts = baseOptions(spec);
    opts.interaction = { mode: "nearest", intersect: false, axis: "x" };
    opts.scales = {
      x: { type: "linear", title: { display: true, text: spec.x } },
      y: { min: 0, max: 100, title: { display: true, text: "% of requests ≤ x" } }
    };
    opts.plugins.tooltip = {
      callbacks: {
        label: function (c) { return c.dataset.label + ": " + fmt(c.parsed.y) + "% ≤ " + fmt(c.parsed.x, 2); }
      }
    };
    return {
      type: "line",
      data: {
        datasets: spec.series.map(function (s, i) {
          return {
            label: s.label,
            data: s.points.map(function (p) { return { x: p[0], y: p[1] * 100 }; }),
            borderColor: color(i),
            backgroundColor: color(i, 0.15),
            borderWidth: 2,
            pointRadius: 0,
            stepped: true
          };
        })
      },
      options: opts
    };
  }

  function barConfig(spec) {
    var opts = baseOptions(spec);
    opts.scales = {
      x: { title: { display: true, text: spec.x } },
      y: { min: 0, max: 110, title: { display: true, text: spec.y },
           ticks: { callback: function (v) { return v <= 100 ? v : ""; } } }
    };
    opts.plugins.tooltip = {
      callbacks: {
        label: function (c) {
          var n = spec.series[c.datasetIndex].n[c.dataIndex];
          return c.dataset.label + ": " + fmt(c.parsed.y) + "% (n=" + n + ")";
        }
      }
    };
    return {
      type: "bar",
      data: {
        labels: spec.labels,
        datasets: spec.series.map(function (s, i) {
          return {
            label: s.label, data: s.values, counts: s.n,
            backgroundColor: color(i, 0.75), borderColor: color(i), borderWidth: 1
          };
        })
      },
      options: opts
    };
  }

  function scatterConfig(spec) {
    var opts = baseOptions(spec);
    var ys = [];
    spec.points.forEach(function (p) {
      ys.push(p.y);
      if (p.lo !== null) { ys.push(p.lo); }
      if (p.hi !== null) { ys.push(p.hi); }
    });
    var ymin = Math.min.apply(null, ys), ymax = Math.max.apply(null, ys), pad = Math.max((ymax - ymin) * 0.15, 0.5);
    var xs = spec.points.map(function (p) { return p.x; });
    var xmin = Math.min.apply(null, xs), xmax = Math.max.apply(null, xs), xpad = Math.max((xmax - xmin) * 0.15, 1);
    opts.scales = {
      x: {
        type: "linear", suggestedMin: Math.max(0, xmin - xpad), suggestedMax: xmax + xpad * 1.5,
        title: { display: true, text: spec.x }
      },
      y: { suggestedMin: ymin - pad, suggestedMax: ymax + pad, title: { display: true, text: spec.y } }
    };
    opts.plugins.tooltip = {
      callbacks: {
        label: function (c) {
          var p = c.raw;
          if (!p || p.label === undefined) { return "Pareto front"; }
          var ci = (p.lo !== null && p.hi !== null) ? " [" + fmt(p.lo, 2) + ", " + fmt(p.hi, 2) + "]" : "";
          return p.label + ": " + fmt(p.y, 2) + ci + " at " + fmt(p.x) + " tok/s" + (p.front ? " (Pareto)" : "");
        }
      }
    };
    var frontLine = {
      label: "Pareto front", data: spec.front, showLine: true, borderColor: color(2), backgroundColor: color(2, 0.2),
      borderDash: [6, 4], borderWidth: 2, pointRadius: 0
    };
    if (spec.sides) {  /* several runs a side: one colour per side, named in the legend, no labels to overlap */
      var bySide = spec.sides.map(function (name, k) {
        var pts = spec.points.filter(function (p) { return p.side === k; });
        return { label: name + " (● on Pareto front, ○ dominated)", data: pts, whiskers: true, pointRadius: 6,
          pointHoverRadius: 8, pointBorderWidth: 2, borderColor: color(k), backgroundColor: color(k),
          pointBorderColor: color(k),
          pointBackgroundColor: pts.map(function (p) { return p.front ? color(k) : "#ffffff"; }) };
      });
      return { type: "scatter", data: { datasets: bySide.concat([frontLine]) }, options: opts };
    }
    return {
      type: "scatter",
      data: {
        datasets: [
          {
            label: "runs (● on Pareto front, ○ dominated)",
            data: spec.points,
            whiskers: true,
            pointLabels: true,
            pointRadius: 6,
            pointHoverRadius: 8,
            pointBackgroundColor: spec.points.map(function (p) { return p.front ? color(0) : "#ffffff"; }),
            pointBorderColor: color(0),
            pointBorderWidth: 2,
            borderColor: color(0),
            backgroundColor: color(0)
          },
          {
            label: "Pareto front",
            data: spec.front,
            showLine: true,
            borderColor: color(2),
            backgroundColor: color(2, 0.2),
            borderDash: [6, 4],
            borderWidth: 2,
            pointRadius: 0
          }
        ]
      },
      options: opts
    };
  }

  /* Output tok/s (left axis), requests in flight and the concurrency limit (right axis) over time. */
  function timelineConfig(spec) {
    var opts = baseOptions(spec), datasets = [];
    opts.interaction = { mode: "nearest", intersect: false, axis: "x" };
    opts.scales = {
      x: { type: "linear", min: 0, title: { display: true, text: spec.x } },
      y: { min: 0, position: "left", title: { display: true, text: "output tokens/s" } },
      y1: { min: 0, position: "right", grid: { drawOnChartArea: false }, title: { display: true, text: "requests" } }
    };
    spec.series.forEach(function (s, i) {
      var name = spec.series.length > 1 ? s.label + ": " : "";
      datasets.push({ label: name + "output tok/s", yAxisID: "y", borderColor: color(i), backgroundColor: color(i, 0.1),
        borderWidth: 2, pointRadius: 0, data: s.t.map(function (t, k) { return { x: t, y: s.tok_s[k] }; }) });
      datasets.push({ label: name + "requests in flight", yAxisID: "y1", borderColor: color(i, 0.6), borderDash: [5, 3],
        borderWidth: 1.5, pointRadius: 0, data: s.t.map(function (t, k) { return { x: t, y: s.in_flight[k] }; }) });
      if (s.limit.length) {
        var end = s.t.length ? s.t[s.t.length - 1] : 0, pts = s.limit.map(function (p) { return { x: p[0], y: p[1] }; });
        pts.push({ x: Math.max(end, pts[pts.length - 1].x), y: pts[pts.length - 1].y });
        datasets.push({ label: name + "concurrency limit", yAxisID: "y1", borderColor: color(i, 0.9), borderDash: [2, 2],
          borderWidth: 1.5, pointRadius: 0, stepped: true, data: pts });
      }
    });
    return { type: "line", data: { datasets: datasets }, options: opts };
  }

  /* One line per series over a numeric x (a sweep's concurrency levels), on a log-2 x axis when it spans > 8x.
     A series with band "lower" / "upper" is an edge of a shaded interval: no line or points, the area between
     the two filled (the upper one, next after the lower, named in the legend). spec.percent: a 0-100% y axis. */
  function lineConfig(spec) {
    var opts = baseOptions(spec), xs = [];
    spec.series.forEach(function (s) { s.points.forEach(function (p) { xs.push(p.x); }); });
    var wide = xs.length && Math.min.apply(null, xs) > 0 && Math.max.apply(null, xs) / Math.min.apply(null, xs) > 8;
    opts.scales = {
      x: { type: wide ? "logarithmic" : "linear", title: { display: true, text: spec.x } },
      y: { min: 0, title: { display: true, text: spec.y } }
    };
    if (spec.percent) {
      opts.scales.y.max = 100;
      opts.scales.y.ticks = { stepSize: 25, callback: function (v) { return v + "%"; } };
    }
    opts.plugins.legend.labels = { filter: function (item, data) { return data.datasets[item.datasetIndex].band !== "lower"; } };
    var line = 0;
    return {
      type: "line",
      data: {
        datasets: spec.series.map(function (s) {
          if (s.band) {
            var c = color(Math.max(0, line - 1), 0.18);
            return { label: s.label, data: s.points, band: s.band, borderWidth: 0, pointRadius: 0,
              pointHitRadius: 0, borderColor: c, backgroundColor: c, fill: s.band === "upper" ? "-1" : false };
          }
          var i = line++;
          return { label: s.label, data: s.points, borderColor: color(i), backgroundColor: color(i, 0.2),
            borderWidth: 2, pointRadius: 4 };
        })
      },
      options: opts
    };
  }

  var BUILDERS = { cdf: cdfConfig, bar: barConfig, scatter: scatterConfig, timeline: timelineConfig, line: lineConfig };

  function buildCharts(data) {
    if (typeof window.Chart !== "function") {
      console.warn("Chart.js missing: charts not drawn");
      return;
    }
    window.Chart.register(whiskers, pointLabels, barCounts);
    var canvases = {};
    document.querySelectorAll("canvas[data-chart]").forEach(function (c) { canvases[c.dataset.chart] = c; });
    (data.charts || []).forEach(function (spec) {
      var canvas = canvases[spec.id], make = BUILDERS[spec.kind];
      if (!canvas || !make) { return; }
      new window.Chart(canvas, make(spec));
    });
  }

  /* ---- the sample list: gzip'd JSON in #samples-data, rendered a page of rows at a time ---- */

  var PAGE = 100;

  function decodeSamples(b64) {
    if (typeof DecompressionStream !== "function") {
      return Promise.reject(new Error("this browser cannot decompress data (no DecompressionStream)"));
    }
    var bin = atob(b64.trim()), bytes = new Uint8Array(bin.length);
    for (var i = 0; i < bin.length; i++) { bytes[i] = bin.charCodeAt(i); }
    var stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip"));
    return new Response(stream).text().then(JSON.parse);
  }

  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) { e.className = cls; }
    if (text !== undefined && text !== null) { e.textContent = String(text); }
    return e;
  }

  function ms(x) {
    if (x === null || x === undefined) { return "—"; }
    return Math.abs(x) >= 100 ? fmt(x, 0) + " ms" : fmt(x, 1) + " ms";
  }

  /* A stored text: a string, or [head, tail, omitted, total] when it was cut. */
  function textOf(t) { return t === null || t === undefined ? "" : (typeof t === "string" ? t : t[0] + " " + t[1]); }

  function textBlock(label, t, note) {
    var box = el("div", "tb");
    var head = el("div", "tl", label);
    var total = typeof t === "string" ? t.length : t[3];
    head.appendChild(el("span", "muted", " (" + total.toLocaleString() + " chars" + (note ? ", " + note : "") + ")"));
    box.appendChild(head);
    if (total === 0) { box.appendChild(el("div", "muted", "(empty)")); return box; }
    var pre = el("pre", "t");
    if (typeof t === "string") {
      pre.textContent = t;
    } else {
      pre.appendChild(document.createTextNode(t[0]));
      pre.appendChild(el("span", "cut", "\n[… " + t[2].toLocaleString() + " of " + t[3].toLocaleString() +
        " characters omitted …] (cut; full text in samples.jsonl)\n"));
      pre.appendChild(document.createTextNode(t[1]));
    }
    box.appendChild(pre);
    return box;
  }

  function collapsed(label, fill) {
    var d = el("details", "more-text");
    d.appendChild(el("summary", null, label));
    d.addEventListener("toggle", function () {
      if (d.open && d.childNodes.length === 1) { fill(d); }
    });
    return d;
  }

  function buildBody(data, r) {
    var body = el("div", "body");
    var meta = el("div", "meta");
    function kv(k, v, cls) {
      var sp = el("span", null, k + " ");
      sp.appendChild(el("b", null, v === null || v === undefined ? "—" : v));
      if (cls) { sp.appendChild(document.createTextNode(" ")); sp.appendChild(el("i", cls, cls)); }
      meta.appendChild(sp);
    }
    kv("gold answer", r.g);
    if (r.fr) { kv("finish_reason", r.fr); }
    (r.fl || []).forEach(function (f) { kv(f[0] + ":", f[1], f[2]); });
    (r.ex || []).forEach(function (x) { kv(x[0], x[1]); });
    body.appendChild(meta);
    if (r.er) { body.appendChild(el("div", "err mono", r.er)); }
    if (r.q !== undefined) {
      body.appendChild(textBlock(r.fs ? "Question under test" : "Prompt", data.texts[r.q],
        r.fs ? "after " + r.fs.length + " few-shot examples, below" : ""));
    }
    (r.m || []).forEach(function (m) { body.appendChild(textBlock("Message · " + m[0], data.texts[m[1]])); });
    if (r.r !== undefined && r.r !== null) { body.appendChild(textBlock("Response", r.r)); }
    if (r.rs !== undefined && r.rs !== null) {
      var n = typeof r.rs === "string" ? r.rs.length : r.rs[3];
      body.appendChild(collapsed("Reasoning (" + n.toLocaleString() + " chars)", function (d) {
        d.appendChild(textBlock("Reasoning", r.rs));
      }));
    }
    if (r.tg !== undefined) {
      body.appendChild(collapsed("Target, in full", function (d) { d.appendChild(textBlock("Target", data.texts[r.tg])); }));
    }
    if (r.fs) {
      var label = r.fs.length + " few-shot examples before the question (" + (r.fc || 0).toLocaleString() + " chars)";
      if (!data.fewshot) {
        body.appendChild(el("p", "muted", label + ": left out of this report to keep it small; the full prompt is in samples.jsonl."));
      } else {
        body.appendChild(collapsed(label, function (d) {
          r.fs.forEach(function (id, k) { d.appendChild(textBlock("Example " + (k + 1), data.fewshot[id])); });
        }));
      }
    }
    return body;
  }

  var CELLS = [
    ["task", function (d, r) { return d.tasks[r.t]; }],
    ["doc", function (d, r) { return r.d; }],
    ["#", function (d, r) { return r.i; }],
    ["status", function (d, r) { return r.s; }, function (r) { return "st st-" + r.s; }],
    ["correct", function (d, r) { return r.v; }, function (r) { return "vd " + r.v; }],
    ["extracted", function (d, r) { return r.x === null || r.x === undefined ? "—" : r.x; }, function () { return "mono"; }],
    ["gold answer", function (d, r) { return r.g === null || r.g === undefined ? "—" : r.g; }, function () { return "mono"; }],
    ["out tok", function (d, r) { return r.o === null || r.o === undefined ? "—" : r.o.toLocaleString(); }],
    ["TTFT", function (d, r) { return ms(r.a); }],
    ["TPOT", function (d, r) { return ms(r.p); }],
    ["E2E", function (d, r) { return ms(r.e); }]
  ];

  function rowElement(data, r) {
    var det = el("details", "s"), sum = el("summary");
    CELLS.forEach(function (c) {
      var sp = el("span", c[2] ? c[2](r) : null, c[1](data, r));
      sp.setAttribute("data-l", c[0]);
      sum.appendChild(sp);
    });
    det.appendChild(sum);
    det.addEventListener("toggle", function () {
      if (det.open && det.childNodes.length === 1) { det.appendChild(buildBody(data, r)); }
    });
    return det;
  }

  function setupSamples() {
    var src = document.getElementById("samples-data"), list = document.getElementById("rows");
    var task = document.getElementById("f-task"), status = document.getElementById("f-status");
    var verdict = document.getElementById("f-verdict"), q = document.getElementById("f-q");
    var count = document.getElementById("f-count"), more = document.getElementById("f-more");
    var form = document.getElementById("filters");
    if (!src || !list || !task || !status || !verdict || !q || !count || !more) { return Promise.resolve(); }
    return decodeSamples(src.textContent || "").then(function (data) {
      var matched = [], rendered = 0, hay = null, timer = null;

      function haystack(i) {
        if (hay === null) { hay = []; }
        if (hay[i] === undefined) {
          var r = data.rows[i];
          hay[i] = [r.d, r.x, r.g, r.s, textOf(r.r), r.q !== undefined ? textOf(data.texts[r.q]) : ""]
            .join("\n").toLowerCase();
        }
        return hay[i];
      }

      function renderMore() {
        var frag = document.createDocumentFragment(), stop = Math.min(matched.length, rendered + PAGE);
        for (; rendered < stop; rendered++) { frag.appendChild(rowElement(data, data.rows[matched[rendered]])); }
        list.appendChild(frag);
        more.hidden = rendered >= matched.length;
        more.textContent = "show " + Math.min(PAGE, matched.length - rendered).toLocaleString() + " more (" +
          (matched.length - rendered).toLocaleString() + " not listed yet)";
        count.textContent = matched.length.toLocaleString() + " of " + data.rows.length.toLocaleString() +
          " samples match; " + rendered.toLocaleString() + " listed";
      }

      function apply() {
        var t = task.value, s = status.value, v = verdict.value, needle = q.value.trim().toLowerCase();
        matched = [];
        data.rows.forEach(function (r, i) {
          if ((t === "" || String(r.t) === t) && (!s || r.s === s) && (!v || r.v === v) &&
              (!needle || haystack(i).indexOf(needle) !== -1)) { matched.push(i); }
        });
        list.querySelectorAll("details.s").forEach(function (d) { d.remove(); });
        rendered = 0;
        renderMore();
      }

      [task, status, verdict].forEach(function (e) { e.addEventListener("change", apply); });
      q.addEventListener("input", function () {
        if (timer !== null) { clearTimeout(timer); }
        timer = setTimeout(apply, 150);
      });
      if (form) { form.addEventListener("submit", function (e) { e.preventDefault(); apply(); }); }
      more.addEventListener("click", renderMore);
      var open = document.getElementById("f-open"), close = document.getElementById("f-close");
      if (open) { open.addEventListener("click", function () { list.querySelectorAll("details.s").forEach(function (d) { d.open = true; }); }); }
      if (close) { close.addEventListener("click", function () { list.querySelectorAll("details.s").forEach(function (d) { d.open = false; }); }); }
      apply();
      window.evalkitReport.applyFilter = apply;
      window.evalkitReport.showMore = renderMore;
    }).catch(function (e) {
      list.appendChild(el("p", "err", "The sample list could not be shown: " + e.message + ". The samples are in samples.jsonl."));
    });
  }

  function main() {
    window.evalkitReport = {};
    window.evalkitReport.ready = setupSamples();
    buildCharts(readData());
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", main);
  } else {
    main();
  }
})();
