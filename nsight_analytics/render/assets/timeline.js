// nsa report timeline: one canvas per timeline, drawn from the JSON block #nsa-data.
// The data's times are ns from the timeline's first GPU activity (tl.t0); every time the page
// shows is tl.t0 later: time since the capture started, as the findings and `nsa query` give it. Per frame each lane draws only the events
// in view, and events narrower than a pixel share one 1-px column, so a frame costs at most a few
// marks per pixel whatever the event count. window.nsaTimelines[i] is the scripting (and test) API.
// A run's timeline (tl.ranks) groups the lanes by rank under a header row, draws communication
// kernels (lanes of kind "comm") apart from compute, and lines up the collectives (tl.collectives).
(function () {
  "use strict";
  var blob = JSON.parse(document.getElementById("nsa-data").textContent);
  var COPY = { HtoD: "#f28e2b", DtoH: "#e15759", DtoD: "#76b7b2", PtoP: "#9c755f" };
  var KIND = { memset: "#8c8c8c", graph: "#b07aa1" };
  var CAUSE = { sync: "#e15759", host_wait: "#f28e2b", late_launch: "#edc948", unknown: "#9e9e9e" };
  var SEV = { critical: "#b00020", warning: "#e67e00", info: "#2962ff" };
  // run pages (render/run_panels.py names the same colours in its legend)
  var COMM = "#c2187a", WAIT = "rgba(194,24,122,0.85)", AFTER = "rgba(194,24,122,0.3)";
  var LABEL_W = 230;
  window.nsaTimelines = [];

  function fmtNs(ns) {
    var a = Math.abs(ns);
    if (a >= 1e9) return (ns / 1e9).toPrecision(4) + " s";
    if (a >= 1e6) return (ns / 1e6).toPrecision(4) + " ms";
    if (a >= 1e3) return (ns / 1e3).toPrecision(4) + " µs";
    return Math.round(ns) + " ns";
  }
  function fmtBytes(b) {
    if (b >= 1e9) return (b / 1e9).toPrecision(3) + " GB";
    if (b >= 1e6) return (b / 1e6).toPrecision(3) + " MB";
    if (b >= 1e3) return (b / 1e3).toPrecision(3) + " kB";
    return b + " B";
  }
  // a point in time since the capture started, to the microsecond: 11.912345 s
  function fmtAt(ns) { return (ns / 1e9).toFixed(6) + " s"; }
  // an axis tick: in the unit of the largest time shown, with the decimals the tick step needs
  function fmtTick(ns, step, top) {
    var units = [[1e9, " s"], [1e6, " ms"], [1e3, " µs"], [1, " ns"]], u = units[3];
    for (var j = 0; j < units.length; j++) { if (Math.abs(top) >= units[j][0]) { u = units[j]; break; } }
    var dec = Math.max(0, Math.min(9, Math.ceil(Math.log10(u[0] / step) - 1e-9)));
    return (ns / u[0]).toFixed(dec) + u[1];
  }
  function hue(i) { return "hsl(" + ((i * 47) % 360) + ",55%,52%)"; }
  // compute kernels of a run: blues and teals only, so communication (magenta) stands apart
  function computeHue(i) { return "hsl(" + (175 + (i * 37) % 80) + ",50%," + (38 + (i * 17) % 22) + "%)"; }
  function esc(s) {
    return String(s).replace(/[&<>"]/g, function (c) { return { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" }[c]; });
  }
  // first index whose value is >= x, in a sorted array
  function lowerBound(arr, x) {
    var lo = 0, hi = arr.length;
    while (lo < hi) { var mid = (lo + hi) >> 1; if (arr[mid] < x) lo = mid + 1; else hi = mid; }
    return lo;
  }
  function decode(lane) {
    var n = lane.d ? lane.d.length : 0, start = new Float64Array(n), t = 0, maxDur = 0;
    for (var i = 0; i < n; i++) { t += lane.s[i]; start[i] = t; if (lane.d[i] > maxDur) maxDur = lane.d[i]; }
    lane.start = start; lane.maxDur = maxDur;
  }
  function laneColor(lane, tl, i) {
    if (lane.kind === "memcpy") return COPY[lane.label.split("memcpy ")[1]] || "#f28e2b";
    if (lane.kind === "comm") return COMM;
    if (KIND[lane.kind]) return KIND[lane.kind];
    return tl.ranks ? computeHue(lane.n[i]) : hue(lane.n[i]);
  }
  // collectives: starts (first arrivals) from their deltas; w: to the last arrival, e: to the last end
  function decodeCollectives(c) {
    var n = c.s.length, start = new Float64Array(n), t = 0, maxDur = 0;
    for (var i = 0; i < n; i++) { t += c.s[i]; start[i] = t; if (c.e[i] > maxDur) maxDur = c.e[i]; }
    c.start = start; c.maxDur = maxDur;
  }

  function Timeline(el, tl, report, index) {
    this.el = el; this.tl = tl; this.index = index;
    this.canvas = el.querySelector("canvas"); this.tip = el.querySelector(".tip");
    this.findings = (report && report.findings) || [];
    this.full = [0, tl.t1 - tl.t0];
    this.view = tl.view ? [tl.view[0], tl.view[1]] : [this.full[0], this.full[1]];
    this.marks = 0;
    var rows = [{ type: "axis", h: 22 }];
    if (tl.steps.length) rows.push({ type: "steps", h: 16, label: tl.steps_label || "steps" });
    if (this.findings.length) rows.push({ type: "findings", h: 16, label: "findings" });
    if (tl.collectives) { decodeCollectives(tl.collectives); rows.push({ type: "collectives", h: 18, label: "collectives" }); }
    var lanes = tl.lanes.slice().sort(function (a, b) {
      var na = a.kind === "nvtx" ? 1 : 0, nb = b.kind === "nvtx" ? 1 : 0;
      return (a.rank || 0) - (b.rank || 0) || na - nb || (a.device || 0) - (b.device || 0);
    });
    var groups = {}, lastRank = null;
    (tl.ranks || []).forEach(function (g) { groups[g.rank] = g; });
    lanes.forEach(function (lane) {
      decode(lane);
      if (tl.ranks && lane.rank !== lastRank) {
        lastRank = lane.rank;
        rows.push({ type: "group", h: 20, group: groups[lane.rank] || { rank: lane.rank, label: "rank " + lane.rank, offset_ns: 0 } });
      }
      rows.push({ type: "lane", lane: lane, h: lane.kind === "nvtx" ? 11 * (lane.levels || 1) + 4 : 18, label: lane.label });
    });
    var y = 0;
    rows.forEach(function (r) { r.y = y; y += r.h; });
    this.rows = rows; this.height = y + 4;
    this.bind();
    this.draw();
  }

  Timeline.prototype.x = function (t) {
    return LABEL_W + (t - this.view[0]) * (this.width - LABEL_W) / (this.view[1] - this.view[0]);
  };
  Timeline.prototype.t = function (x) {
    return this.view[0] + (x - LABEL_W) * (this.view[1] - this.view[0]) / (this.width - LABEL_W);
  };

  Timeline.prototype.setView = function (a, b) {
    var span = this.full[1] - this.full[0], w = Math.max(b - a, 1000);
    w = Math.min(w, span * 1.05);
    a = Math.max(this.full[0] - span * 0.05, Math.min(a, this.full[1] - w + span * 0.05));
    this.view = [a, a + w];
    this.draw();
  };
  Timeline.prototype.zoom = function (factor, frac) {
    if (frac === undefined) frac = 0.5;
    var w = this.view[1] - this.view[0], c = this.view[0] + w * frac, nw = w * factor;
    this.setView(c - nw * frac, c - nw * frac + nw);
  };

  Timeline.prototype.draw = function () {
    var t0 = performance.now();
    var dpr = window.devicePixelRatio || 1, c = this.canvas;
    this.width = Math.max(this.el.clientWidth, 400);
    c.width = this.width * dpr; c.height = this.height * dpr;
    c.style.width = this.width + "px"; c.style.height = this.height + "px";
    var ctx = c.getContext("2d");
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, this.width, this.height);
    ctx.font = "11px system-ui, sans-serif";
    this.marks = 0;
    var self = this;
    this.rows.forEach(function (r, i) {
      if (i % 2 === 0 && r.type === "lane") { ctx.fillStyle = "#fafafa"; ctx.fillRect(0, r.y, self.width, r.h); }
    });
    this.drawGaps(ctx);
    this.drawCollectives(ctx, true);
    this.rows.forEach(function (r) {
      if (r.type === "lane") self.drawLane(ctx, r);
    });
    this.drawAxis(ctx);
    this.drawSteps(ctx);
    this.drawFindings(ctx);
    this.drawCollectives(ctx, false);
    ctx.fillStyle = "#fff"; ctx.fillRect(0, 0, LABEL_W - 2, this.height);
    ctx.fillStyle = "#333";
    this.rows.forEach(function (r) {
      if (r.label) ctx.fillText(r.label.length > 38 ? r.label.slice(0, 37) + "…" : r.label, 4, r.y + 12);
    });
    this.drawGroups(ctx);
    var ms = performance.now() - t0;
    this.el.dataset.viewA = this.view[0]; this.el.dataset.viewB = this.view[1];
    this.el.dataset.marks = this.marks; this.el.dataset.drawMs = ms.toFixed(1);
    var range = this.el.parentNode.querySelector(".tl-range");
    if (range) range.textContent = "visible " + fmtAt(this.tl.t0 + this.view[0]) + " – " + fmtAt(this.tl.t0 + this.view[1]) +
      " (" + fmtNs(this.view[1] - this.view[0]) + ") since the capture started";
  };

  Timeline.prototype.drawLane = function (ctx, r) {
    var lane = r.lane, a = this.view[0], b = this.view[1], self = this;
    if (lane.bins && lane.start.length < lane.count) {
      var w = lane.bins.w;
      ctx.globalAlpha = 0.35;
      ctx.fillStyle = lane.kind === "memcpy" || lane.kind === "comm" ? laneColor(lane, this.tl, 0) : "#4e79a7";
      for (var j = 0; j < lane.bins.i.length; j++) {
        var s = lane.bins.i[j] * w;
        if (s + w < a || s > b) continue;
        var h = Math.max(2, Math.min(1, lane.bins.d[j] / w) * (r.h - 4));
        var x0 = this.x(s), x1 = this.x(s + w);
        ctx.fillRect(x0, r.y + r.h - 2 - h, Math.max(1, x1 - x0), h);
        this.marks++;
      }
      ctx.globalAlpha = 1;
    }
    var st = lane.start, d = lane.d, n = st.length;
    var i = lowerBound(st, a - lane.maxDur), lastCol = -1, lastColLevel = -1;
    var k = (this.width - LABEL_W) / (b - a);
    for (; i < n && st[i] <= b; i++) {
      var e = st[i] + d[i];
      if (e < a) continue;
      var level = lane.l ? lane.l[i] : 0;
      var y = r.y + 2 + level * 11, hh = lane.l ? 10 : r.h - 4;
      var xa = LABEL_W + (st[i] - a) * k, xb = LABEL_W + (e - a) * k;
      if (xb - xa < 1) {
        var col = Math.floor(xa);
        if (col === lastCol && level === lastColLevel) continue;
        lastCol = col; lastColLevel = level;
        ctx.fillStyle = laneColor(lane, self.tl, i);
        ctx.fillRect(col, y, 1, hh);
        this.marks++;
        continue;
      }
      ctx.fillStyle = laneColor(lane, self.tl, i);
      var x0 = Math.max(xa, LABEL_W - 1), x1 = Math.min(xb, this.width);
      ctx.fillRect(x0, y, x1 - x0, hh);
      this.marks++;
      if (x1 - x0 > 50) {
        ctx.save(); ctx.beginPath(); ctx.rect(x0, y, x1 - x0, hh); ctx.clip();
        ctx.fillStyle = "#fff"; ctx.fillText(this.tl.names[lane.n[i]], x0 + 3, y + hh - 3);
        ctx.restore();
      }
    }
  };

  Timeline.prototype.deviceRows = function (device, rank) {
    return this.rows.filter(function (r) {
      return r.type === "lane" && r.lane.kind !== "nvtx" && r.lane.device === device && (rank === undefined || r.lane.rank === rank);
    });
  };

  // a run's rank headers: a band across the canvas naming the rank, its GPU and report
  Timeline.prototype.drawGroups = function (ctx) {
    var self = this;
    this.rows.forEach(function (r) {
      if (r.type !== "group") return;
      ctx.fillStyle = "#e6ebf2"; ctx.fillRect(0, r.y, self.width, r.h);
      ctx.fillStyle = "#9aa7b8"; ctx.fillRect(0, r.y, self.width, 1);
      ctx.fillStyle = "#1f2a37"; ctx.font = "bold 11px system-ui, sans-serif";
      var off = r.group.offset_ns ? "   (clock offset +" + fmtNs(r.group.offset_ns) + ")" : "";
      ctx.fillText(r.group.label + off, 4, r.y + 14);
      ctx.font = "11px system-ui, sans-serif";
    });
  };

  // The collectives of a run: in their row, each from its first arrival to the last end, the
  // stretch to the last arrival (what the early ranks wait) solid. Wide enough, a collective also
  // shades the lanes from its first to its last arrival (`under`, before the lanes) and marks
  // the last arrival across them (after the lanes).
  Timeline.prototype.drawCollectives = function (ctx, under) {
    var c = this.tl.collectives, row = this.rows.filter(function (r) { return r.type === "collectives"; })[0];
    if (!c || !row) return;
    var a = this.view[0], b = this.view[1], k = (this.width - LABEL_W) / (b - a), st = c.start, lastCol = -1;
    var top = row.y + row.h, bottom = this.height;
    for (var i = lowerBound(st, a - c.maxDur); i < st.length && st[i] <= b; i++) {
      if (st[i] + c.e[i] < a) continue;
      var x0 = LABEL_W + (st[i] - a) * k, xw = x0 + c.w[i] * k, x1 = x0 + c.e[i] * k;
      var cx0 = Math.max(x0, LABEL_W);
      if (under) {
        if (x1 - x0 < 6 || xw <= LABEL_W) continue;
        ctx.fillStyle = "rgba(194,24,122,0.07)"; ctx.fillRect(cx0, top, Math.max(xw - cx0, 1), bottom - top);
        continue;
      }
      if (x1 - x0 < 1) {
        var col = Math.floor(x0);
        if (col === lastCol) continue;
        lastCol = col; ctx.fillStyle = WAIT; ctx.fillRect(col, row.y + 3, 1, row.h - 6); this.marks++;
        continue;
      }
      ctx.fillStyle = AFTER; ctx.fillRect(cx0, row.y + 5, Math.max(x1 - cx0, 1), row.h - 10);
      ctx.fillStyle = WAIT; ctx.fillRect(cx0, row.y + 3, Math.max(xw - cx0, 1), row.h - 6);
      this.marks++;
      if (x1 - x0 >= 6 && xw >= LABEL_W) {
        ctx.strokeStyle = "rgba(194,24,122,0.6)"; ctx.setLineDash([3, 3]);
        ctx.beginPath(); ctx.moveTo(xw + 0.5, top); ctx.lineTo(xw + 0.5, bottom); ctx.stroke(); ctx.setLineDash([]);
      }
      if (xw - cx0 > 44) {
        ctx.save(); ctx.beginPath(); ctx.rect(cx0, row.y, xw - cx0, row.h); ctx.clip();
        ctx.fillStyle = "#fff"; ctx.fillText("rank " + c.last[i] + " last", cx0 + 3, row.y + 13); ctx.restore();
      }
    }
  };

  Timeline.prototype.drawGaps = function (ctx) {
    var self = this;
    this.tl.gaps.forEach(function (g) {
      if (g.s + g.d < self.view[0] || g.s > self.view[1]) return;
      var rows = self.deviceRows(g.device);
      if (!rows.length) return;
      var y0 = rows[0].y, y1 = rows[rows.length - 1].y + rows[rows.length - 1].h;
      var x0 = Math.max(self.x(g.s), LABEL_W), x1 = Math.min(self.x(g.s + g.d), self.width);
      if (x1 - x0 < 0.5) return;
      ctx.globalAlpha = 0.18; ctx.fillStyle = CAUSE[g.cause] || CAUSE.unknown;
      ctx.fillRect(x0, y0, x1 - x0, y1 - y0); ctx.globalAlpha = 1;
      self.marks++;
      if (x1 - x0 > 60) {
        ctx.fillStyle = "#444";
        ctx.fillText("idle: " + g.cause + " " + fmtNs(g.d), x0 + 3, y0 + 12);
      }
    });
  };

  // ticks at round times since the capture started (view + tl.t0)
  Timeline.prototype.drawAxis = function (ctx) {
    var w = this.view[1] - this.view[0], raw = w / 8, pow = Math.pow(10, Math.floor(Math.log10(raw)));
    var step = [1, 2, 5, 10].map(function (m) { return m * pow; }).filter(function (s) { return s >= raw; })[0];
    var o = this.tl.t0, top = o + this.view[1], ticks = [];
    ctx.fillStyle = "#fff"; ctx.fillRect(LABEL_W, 0, this.width, 22);
    ctx.strokeStyle = "#ddd"; ctx.fillStyle = "#333";
    for (var t = Math.ceil((o + this.view[0]) / step) * step; t <= top; t += step) {
      var x = this.x(t - o);
      ctx.beginPath(); ctx.moveTo(x, 16); ctx.lineTo(x, this.height); ctx.stroke();
      var label = fmtTick(t, step, top);
      if (x >= LABEL_W && x + 2 + ctx.measureText(label).width <= this.width) ctx.fillText(label, x + 2, 12);
      ticks.push(label);
    }
    this.el.dataset.ticks = JSON.stringify(ticks);
  };

  Timeline.prototype.drawSteps = function (ctx) {
    var row = this.rows.filter(function (r) { return r.type === "steps"; })[0];
    if (!row) return;
    var lastX = -1e9, lastLabel = -1e9, self = this;
    this.tl.steps.forEach(function (s) {
      var x = self.x(s.s);
      if (x < LABEL_W || x > self.width || x - lastX < 2) return;
      lastX = x;
      ctx.strokeStyle = s.steady ? "rgba(41,98,255,0.35)" : "rgba(120,120,120,0.35)";
      ctx.beginPath(); ctx.moveTo(x, row.y); ctx.lineTo(x, self.height); ctx.stroke();
      self.marks++;
      if (x > lastLabel) {
        ctx.fillStyle = s.steady ? "#2962ff" : "#777"; ctx.fillText(s.name, x + 2, row.y + 12);
        lastLabel = x + ctx.measureText(s.name).width + 8;
      }
    });
  };

  Timeline.prototype.drawFindings = function (ctx) {
    var row = this.rows.filter(function (r) { return r.type === "findings"; })[0];
    if (!row) return;
    var self = this;
    this.findings.forEach(function (f, i) {
      if (!f.pin) return;
      var x0 = Math.max(self.x(f.pin.s), LABEL_W), x1 = Math.min(self.x(f.pin.s + f.pin.d), self.width);
      if (x1 < LABEL_W || x0 > self.width) return;
      ctx.fillStyle = SEV[f.severity] || "#333";
      ctx.globalAlpha = 0.5; ctx.fillRect(x0, row.y + 9 + (i % 2) * 3, Math.max(x1 - x0, 2), 3); ctx.globalAlpha = 1;
      ctx.beginPath(); ctx.moveTo(x0, row.y + 2); ctx.lineTo(x0 + 5, row.y + 9); ctx.lineTo(x0 - 5, row.y + 9); ctx.fill();
      self.marks++;
    });
  };

  Timeline.prototype.hit = function (x, y) {
    var row = this.rows.filter(function (r) { return y >= r.y && y < r.y + r.h; })[0];
    if (!row || x < LABEL_W) return null;
    var t = this.t(x), tol = 3 * (this.view[1] - this.view[0]) / (this.width - LABEL_W), self = this;
    if (row.type === "steps") {
      var s = this.tl.steps.filter(function (s) { return t >= s.s - tol && t <= s.s + s.d; })[0];
      return s && "<b>" + esc(s.name) + "</b> " + (s.steady ? "steady" : "warm-up") + " step<br>duration " + fmtNs(s.d) + " · starts at " + fmtAt(this.tl.t0 + s.s);
    }
    if (row.type === "findings") {
      var f = this.findings.filter(function (f) { return f.pin && t >= f.pin.s - tol && t <= f.pin.s + f.pin.d + tol; })[0];
      return f && "<b>" + esc(f.severity) + ": " + esc(f.title) + "</b><br>" + esc(f.rule_id) + " · pinned at the " + esc(f.pin.how) + "<br>" + fmtAt(self.tl.t0 + f.pin.s) + " – " + fmtAt(self.tl.t0 + f.pin.s + f.pin.d);
    }
    if (row.type === "collectives") return this.hitCollective(t, tol);
    if (row.type === "group") {
      var g = row.group;
      return "<b>" + esc(g.label) + "</b><br>clock offset " + (g.offset_ns ? "+" + fmtNs(g.offset_ns) : "0") + " (added to its report's times)";
    }
    if (row.type !== "lane") return null;
    var lane = row.lane, st = lane.start, level = lane.l ? Math.floor((y - row.y - 2) / 11) : 0;
    var best = -1;
    for (var i = lowerBound(st, t - lane.maxDur - tol); i < st.length && st[i] <= t + tol; i++) {
      if (st[i] + lane.d[i] + tol >= t && (!lane.l || lane.l[i] === level) && (best < 0 || lane.d[i] < lane.d[best])) best = i;
    }
    if (best >= 0) {
      var html = "<b>" + esc(this.tl.names[lane.n[best]]) + "</b><br>duration " + fmtNs(lane.d[best]) + " · starts at " + fmtAt(this.tl.t0 + st[best]);
      if (lane.a && lane.a[best] >= 0) html += "<br>launch call " + esc(this.tl.apis[lane.a[best]]);
      if (lane.b) html += "<br>" + fmtBytes(lane.b[best]);
      return html + "<br><i>" + esc(lane.label) + "</i>";
    }
    var gap = this.tl.gaps.filter(function (g) {
      return g.device === lane.device && (g.rank === undefined || g.rank === lane.rank) && lane.kind !== "nvtx" && t >= g.s && t <= g.s + g.d;
    })[0];
    if (gap) return "<b>idle " + fmtNs(gap.d) + "</b> from " + fmtAt(this.tl.t0 + gap.s) + ": " + esc(gap.cause) + (gap.detail ? " (" + esc(gap.detail) + ")" : "") +
      "<br>after " + esc(gap.before || "?") + "<br>before " + esc(gap.after || "?");
    if (lane.bins) {
      var bi = Math.floor(t / lane.bins.w), j = lowerBound(lane.bins.i, bi);
      if (lane.bins.i[j] === bi) return "<b>" + lane.bins.c[j] + " events</b> (aggregated), " + fmtNs(lane.bins.d[j]) + " busy in " + fmtNs(lane.bins.w);
    }
    return null;
  };

  Timeline.prototype.hitCollective = function (t, tol) {
    var c = this.tl.collectives, best = -1;
    for (var i = lowerBound(c.start, t - c.maxDur - tol); i < c.start.length && c.start[i] <= t + tol; i++) {
      if (c.start[i] + c.e[i] + tol >= t && (best < 0 || c.e[i] < c.e[best])) best = i;
    }
    if (best < 0) return null;
    return "<b>" + esc(c.ops[c.op[best]]) + " #" + c.seq[best] + "</b> (" + esc(c.channels[c.ch[best]]) + ", " + c.n[best] + " ranks)" +
      "<br>first arrival: rank " + c.first[best] + " at " + fmtAt(this.tl.t0 + c.start[best]) +
      "<br>last arrival: rank " + c.last[best] + ", " + fmtNs(c.w[best]) + " later" +
      "<br>last end: " + fmtNs(c.e[best]) + " after the first arrival";
  };

  Timeline.prototype.bind = function () {
    var self = this, c = this.canvas, drag = null;
    c.addEventListener("wheel", function (ev) {
      ev.preventDefault();
      var r = c.getBoundingClientRect(), frac = Math.max(0, (ev.clientX - r.left - LABEL_W) / (self.width - LABEL_W));
      self.zoom(Math.exp(ev.deltaY * 0.002), frac);
    }, { passive: false });
    c.addEventListener("mousedown", function (ev) { drag = { x: ev.clientX, view: self.view.slice() }; });
    window.addEventListener("mouseup", function () { drag = null; });
    c.addEventListener("mousemove", function (ev) {
      var r = c.getBoundingClientRect(), x = ev.clientX - r.left, y = ev.clientY - r.top;
      if (drag) {
        var dt = (ev.clientX - drag.x) * (drag.view[1] - drag.view[0]) / (self.width - LABEL_W);
        self.setView(drag.view[0] - dt, drag.view[1] - dt);
        return;
      }
      var html = self.hit(x, y);
      self.tip.style.display = html ? "block" : "none";
      if (html) { self.tip.innerHTML = html; self.tip.style.left = Math.min(x + 12, self.width - 320) + "px"; self.tip.style.top = (y + 14) + "px"; }
    });
    c.addEventListener("mouseleave", function () { self.tip.style.display = "none"; });
    c.addEventListener("dblclick", function () { self.setView(self.full[0], self.full[1]); });
    var tools = this.el.parentNode.querySelector(".tl-tools");
    if (tools && this.tl.view) {  // the view the page opened on (a run's collectives)
      var home = document.createElement("button");
      home.dataset.act = "home"; home.textContent = "collectives";
      tools.insertBefore(home, tools.querySelector(".tl-range"));
    }
    if (tools) tools.addEventListener("click", function (ev) {
      var act = ev.target.dataset && ev.target.dataset.act;
      if (act === "in") self.zoom(0.5); else if (act === "out") self.zoom(2); else if (act === "reset") self.setView(self.full[0], self.full[1]);
      else if (act === "home") self.setView(self.tl.view[0], self.tl.view[1]);
    });
    window.addEventListener("resize", function () { self.draw(); });
  };

  var started = performance.now();
  document.querySelectorAll(".nsa-timeline").forEach(function (el) {
    var i = Number(el.dataset.index), tl = blob.timelines[i];
    var report = blob.data.sides ? blob.data.sides[i] : blob.data;
    if (tl) window.nsaTimelines[i] = new Timeline(el, tl, report, i);
  });
  document.querySelectorAll("button.goto").forEach(function (btn) {
    btn.addEventListener("click", function () {
      var t = window.nsaTimelines[Number(btn.dataset.timeline)];
      if (!t) return;
      var s = Number(btn.dataset.s), d = Math.max(Number(btn.dataset.d), 1000);
      t.setView(s - d * 0.25, s + d * 1.25);
      t.el.scrollIntoView({ behavior: "smooth", block: "center" });
    });
  });
  window.nsaReady = { ms: performance.now() - started };
  document.body.dataset.ready = "1";
})();
