/* evalkit report: charts (Chart.js, inlined above) and the sample filter. No network, no innerHTML. */
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

  /* Text labels next to scatter points. */
  var pointLabels = {
    id: "evalkitPointLabels",
    afterDatasetsDraw: function (chart) {
      var ctx = chart.ctx;
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
          ctx.fillText(text, el.x + 8, el.y - 8);
        });
        ctx.restore();
      });
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

  var BUILDERS = { cdf: cdfConfig, bar: barConfig, scatter: scatterConfig };

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

  function setupFilter() {
    var rows = Array.prototype.slice.call(document.querySelectorAll("#rows details.s"));
    var task = document.getElementById("f-task"), status = document.getElementById("f-status");
    var verdict = document.getElementById("f-verdict"), q = document.getElementById("f-q");
    var count = document.getElementById("f-count"), form = document.getElementById("filters");
    if (!rows.length || !task || !status || !verdict || !q || !count) { return; }
    var texts = null, timer = null;

    function apply() {
      var t = task.value, s = status.value, v = verdict.value, needle = q.value.trim().toLowerCase(), shown = 0;
      if (needle && texts === null) {
        texts = rows.map(function (r) { return (r.textContent || "").toLowerCase(); });
      }
      rows.forEach(function (r, i) {
        var ok = (!t || r.dataset.task === t) && (!s || r.dataset.status === s) && (!v || r.dataset.verdict === v) &&
          (!needle || texts[i].indexOf(needle) !== -1);
        r.hidden = !ok;
        if (ok) { shown += 1; }
      });
      count.textContent = shown.toLocaleString() + " of " + rows.length.toLocaleString() + " rows";
    }

    [task, status, verdict].forEach(function (el) { el.addEventListener("change", apply); });
    q.addEventListener("input", function () {
      if (timer !== null) { clearTimeout(timer); }
      timer = setTimeout(apply, 150);
    });
    if (form) { form.addEventListener("submit", function (e) { e.preventDefault(); apply(); }); }
    var open = document.getElementById("f-open"), close = document.getElementById("f-close");
    if (open) {
      open.addEventListener("click", function () {
        var n = 0;
        rows.forEach(function (r) { if (!r.hidden && n < 200) { r.open = true; n += 1; } });
      });
    }
    if (close) { close.addEventListener("click", function () { rows.forEach(function (r) { r.open = false; }); }); }
    apply();
    window.evalkitReport = { applyFilter: apply };
  }

  function main() {
    setupFilter();
    buildCharts(readData());
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", main);
  } else {
    main();
  }
})();
