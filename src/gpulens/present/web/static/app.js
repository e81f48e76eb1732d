// gpulens dashboard: draws the page's plotly figures, polls the "now" strip, refreshes the
// figures of a relative time range, and uploads traces. All numbers come from the server.
(function () {
  "use strict";
  var page = JSON.parse(document.getElementById("page-data").textContent);
  var config = { responsive: true, displaylogo: false };

  function draw(figures) {
    Object.keys(figures || {}).forEach(function (id) {
      var el = document.getElementById("chart-" + id);
      if (!el || typeof Plotly === "undefined") return;
      var fig = figures[id];
      Plotly.react(el, fig.data, fig.layout, config);
      if (fig.links && !el.dataset.linked) {
        el.dataset.linked = "1";
        el.on("plotly_click", function (ev) {
          var href = fig.links[ev.points[0].y];
          if (href) window.location.href = href + window.location.search;
        });
      }
    });
  }

  function pct(x) { return x === null || x === undefined ? "–" : Math.round(100 * x) + "%"; }

  function span(text, cls) {
    var s = document.createElement("span");
    s.textContent = text;
    if (cls) s.className = cls;
    return s;
  }

  function renderNow(now) {
    var box = document.getElementById("now");
    if (!box) return;
    box.textContent = "";
    if (!now.live) {
      var idle = page.collecting === false
        ? "no collection on this agent: the cluster from Prometheus"
        : "not live: showing stored history";
      box.appendChild(span(idle, "muted"));
      return;
    }
    var t = new Date(now.ts_ns / 1e6).toISOString().replace("T", " ").slice(0, 19) + " UTC";
    box.appendChild(span("live " + t, "live"));
    box.appendChild(span(now.gpus + " GPUs"));
    box.appendChild(span("duty " + pct(now.mean_duty)));
    box.appendChild(span("SM " + pct(now.mean_sm_active)));
    box.appendChild(span("tensor " + pct(now.mean_tensor_active)));
    box.appendChild(span("useful " + pct(now.mean_useful_ratio), "useful"));
    if (now.power_watts !== null) box.appendChild(span((now.power_watts / 1000).toFixed(1) + " kW"));
    var states = Object.keys(now.states).map(function (k) { return k + " " + now.states[k]; });
    if (states.length) box.appendChild(span(states.join(" · "), "muted"));
    var link = document.createElement("a");
    link.href = "/findings";
    link.textContent = now.findings + " findings";
    box.appendChild(link);
    var failing = now.collectors.filter(function (c) { return c.status !== "ok"; });
    if (failing.length) box.appendChild(span(failing.length + " collector(s) failing", "bad"));
  }

  function poll() {
    fetch("/api/now", { credentials: "same-origin" })
      .then(function (r) { return r.ok ? r.json() : null; })
      .then(function (now) { if (now) renderNow(now); })
      .catch(function () {});
  }

  function refresh() {
    fetch(page.refresh, { credentials: "same-origin" })
      .then(function (r) { return r.ok ? r.json() : null; })
      .then(function (d) { if (d) { draw(d.figures); if (d.status) status(d.status); } })
      .catch(function () {});
  }

  // a page whose source can fail (the Cluster page's Prometheus) says so without a reload
  function status(st) {
    var box = document.getElementById("source-error");
    if (!box) return;
    if (st.error) {
      box.textContent = "The source could not be read: " + st.error;
      box.hidden = false;
    } else {
      box.hidden = true;
    }
  }

  function upload(form) {
    var input = form.querySelector("input[type=file]");
    var status = form.querySelector(".status");
    if (!input.files.length) return;
    var file = input.files[0];
    status.textContent = "analysing " + file.name + "…";
    fetch("/api/traces/upload?name=" + encodeURIComponent(file.name), {
      method: "POST",
      credentials: "same-origin",
      headers: { "Content-Type": "application/octet-stream" },
      body: file,
    })
      .then(function (r) { return r.json().then(function (d) { return [r.ok, d]; }); })
      .then(function (res) {
        if (res[0]) window.location.href = "/traces?upload=" + encodeURIComponent(res[1].id);
        else status.textContent = String(res[1].detail || "upload failed");
      })
      .catch(function (e) { status.textContent = "upload failed: " + e; });
  }

  draw(page.figures);
  poll();
  window.setInterval(poll, (page.now_every_s || 5) * 1000);
  if (page.refresh) window.setInterval(refresh, (page.refresh_every_s || 60) * 1000);
  var form = document.getElementById("upload");
  if (form) form.addEventListener("submit", function (ev) { ev.preventDefault(); upload(form); });
})();
