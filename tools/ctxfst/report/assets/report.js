// ctxfst report: draws a graph whose positions were computed at build time, on one 2D
// canvas (no WebGL, no library, no network). Every text from the knowledge base reaches
// the page through textContent, never as markup.
(function () {
  "use strict";
  var errors = [];
  window.addEventListener("error", function (e) { errors.push(String(e.message)); });
  var data = JSON.parse(document.getElementById("ctxfst-data").textContent);

  // The world-model types keep their colours in every report; other types take one from
  // the palette by their name, so a type looks the same across knowledge bases.
  var KNOWN_TYPES = {skill: "#087f5b", state: "#7048e8", action: "#e8590c", goal: "#c92a2a",
                     agent: "#d6336c", evidence: "#2f9e44", tool: "#1971c2", concept: "#9c36b5",
                     entity: "#495057", chunk: "#868e96"};
  var PALETTE = ["#1864ab", "#5f3dc4", "#0b7285", "#a61e4d", "#5c940d", "#e67700", "#364fc7",
                 "#862e9c", "#2b8a3e", "#d9480f", "#0c8599", "#c2255c", "#74b816", "#f08c00",
                 "#3b5bdb", "#ae3ec9", "#099268", "#f76707", "#4263eb", "#e64980"];
  function nameHash(text) {
    var h = 2166136261;
    for (var n = 0; n < text.length; n++) { h ^= text.charCodeAt(n); h = Math.imul(h, 16777619); }
    return h >>> 0;
  }
  var RELATION_STYLE = {
    SIMILAR: {colour: "rgba(120,130,150,0.35)", dash: []},
    REQUIRES: {colour: "#c92a2a", dash: []},
    LEADS_TO: {colour: "#1c7ed6", dash: []},
    EVIDENCE: {colour: "#2b8a3e", dash: [6, 4]},
    IMPLIES: {colour: "#9c36b5", dash: []},
    COMPLETED: {colour: "#0b7285", dash: [2, 3]},
    BLOCKED_BY: {colour: "#e67700", dash: [8, 3]},
    NEEDS: {colour: "#c92a2a", dash: []},
    ADDS: {colour: "#1c7ed6", dash: []},
    MENTIONS: {colour: "rgba(120,130,150,0.6)", dash: [3, 3]}
  };
  var OTHER_STYLE = {colour: "#868e96", dash: [4, 4]};

  function el(tag, text, cls) {
    var node = document.createElement(tag);
    if (text !== undefined && text !== null) node.textContent = String(text);
    if (cls) node.className = cls;
    return node;
  }
  function clear(node) { while (node.firstChild) node.removeChild(node.firstChild); }

  var N = data.nodes.id.length, E = data.edges.s.length;
  var xs = data.nodes.x, ys = data.nodes.y;
  var typeOn = data.types.map(function () { return true; });
  var relationOn = data.relations.map(function () { return true; });
  var radius = new Float64Array(N);
  for (var i = 0; i < N; i++) {
    var m = (data.nodes.mentions || [])[i] || 0;
    radius[i] = 4 + Math.min(8, Math.log(1 + m) * 2);
  }
  var neighbours = [];
  for (i = 0; i < N; i++) neighbours.push([]);
  for (var e = 0; e < E; e++) {
    neighbours[data.edges.s[e]].push(e);
    neighbours[data.edges.t[e]].push(e);
  }
  var undirected = {};
  (data.undirected || []).forEach(function (r) { undirected[r] = true; });
  var typeColours = data.types.map(function (name) {
    return KNOWN_TYPES[name] || PALETTE[nameHash(name) % PALETTE.length];
  });
  function typeColour(t) { return typeColours[t]; }
  function relationStyle(r) { return RELATION_STYLE[data.relations[r]] || OTHER_STYLE; }

  // ---- tabs
  var tabs = document.querySelectorAll("nav button");
  function showTab(name) {
    tabs.forEach(function (b) { b.classList.toggle("on", b.dataset.tab === name); });
    document.querySelectorAll("section.tab").forEach(function (s) {
      s.classList.toggle("on", s.id === name + "-tab");
    });
    if (name === "graph") resize();
  }
  tabs.forEach(function (b) { b.addEventListener("click", function () { showTab(b.dataset.tab); }); });

  // ---- the canvas
  var canvas = document.getElementById("graph");
  var ctx = canvas.getContext("2d");
  var tooltip = document.getElementById("tooltip");
  var view = {x: 0, y: 0, k: 1};  // screen = (world - view) * k + centre
  var width = 0, height = 0, ratio = 1;
  var selected = -1, hits = [];
  var drawn = {nodes: 0, edges: 0, labels: 0, frames: 0};

  // The whole graph in view, with room for the labels on the right when there are few
  // enough nodes to label (with many, labels show only when zoomed in).
  function fit() {
    var lo = [Infinity, Infinity], hi = [-Infinity, -Infinity], i;
    for (i = 0; i < N; i++) {
      lo[0] = Math.min(lo[0], xs[i]); hi[0] = Math.max(hi[0], xs[i]);
      lo[1] = Math.min(lo[1], ys[i]); hi[1] = Math.max(hi[1], ys[i]);
    }
    if (!N) { lo = [0, 0]; hi = [1, 1]; }
    var pad = 24, labelled = N <= 500, widths = [];
    ctx.font = "12px system-ui, sans-serif";
    for (i = 0; i < N; i++) widths.push(labelled ? ctx.measureText(data.nodes.name[i]).width + radius[i] + 6 : radius[i]);
    var k = (height - 2 * pad) / Math.max(hi[1] - lo[1], 1e-9);
    for (i = 0; i < N; i++) {
      var dx = xs[i] - lo[0];
      if (dx > 0) k = Math.min(k, Math.max(1e-4, (width - 2 * pad - widths[i]) / dx));
    }
    if (!isFinite(k) || k <= 0) k = 1;
    k = Math.min(k, 2);
    var extent = 0;
    for (i = 0; i < N; i++) extent = Math.max(extent, (xs[i] - lo[0]) * k + widths[i]);
    var left = pad + Math.max(0, (width - 2 * pad - extent) / 2);
    view.k = k;
    view.x = lo[0] + (width / 2 - left) / k;
    view.y = (lo[1] + hi[1]) / 2;
  }
  function resize() {
    var box = canvas.getBoundingClientRect();
    if (!box.width || !box.height) return;
    ratio = window.devicePixelRatio || 1;
    width = box.width; height = box.height;
    canvas.width = Math.round(width * ratio); canvas.height = Math.round(height * ratio);
    schedule();
  }
  function sx(i) { return (xs[i] - view.x) * view.k + width / 2; }
  function sy(i) { return (ys[i] - view.y) * view.k + height / 2; }
  function visible(i) { return typeOn[data.nodes.type[i]]; }
  function edgeVisible(e) {
    return relationOn[data.edges.r[e]] && visible(data.edges.s[e]) && visible(data.edges.t[e]);
  }
  var pending = false;
  function schedule() {
    if (!pending) { pending = true; requestAnimationFrame(function () { pending = false; draw(); }); }
  }
  function onScreen(x, y, margin) {
    return x > -margin && y > -margin && x < width + margin && y < height + margin;
  }

  function draw() {
    ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
    ctx.clearRect(0, 0, width, height);
    var near = {};
    if (selected >= 0) {
      near[selected] = true;
      neighbours[selected].forEach(function (e) { near[data.edges.s[e]] = near[data.edges.t[e]] = true; });
    }
    var countEdges = 0, countNodes = 0, countLabels = 0;
    // Edges: one path a relation (one stroke each, not one per edge).
    for (var r = 0; r < data.relations.length; r++) {
      if (!relationOn[r]) continue;
      var style = relationStyle(r);
      ctx.beginPath();
      for (var e = 0; e < E; e++) {
        if (data.edges.r[e] !== r || !edgeVisible(e)) continue;
        var a = data.edges.s[e], b = data.edges.t[e];
        var ax = sx(a), ay = sy(a), bx = sx(b), by = sy(b);
        if (Math.max(ax, bx) < 0 || Math.min(ax, bx) > width || Math.max(ay, by) < 0 || Math.min(ay, by) > height) continue;
        ctx.moveTo(ax, ay); ctx.lineTo(bx, by);
        if (!undirected[data.relations[r]] && view.k * 40 > 12) arrowHead(ax, ay, bx, by, radius[b]);
        countEdges++;
      }
      ctx.strokeStyle = style.colour; ctx.setLineDash(style.dash);
      ctx.lineWidth = selected >= 0 ? 0.8 : 1.2;
      ctx.stroke();
    }
    ctx.setLineDash([]);
    if (selected >= 0) {  // the chosen node's edges on top, darker
      ctx.lineWidth = 2.2;
      neighbours[selected].forEach(function (e) {
        if (!edgeVisible(e)) return;
        ctx.beginPath();
        ctx.moveTo(sx(data.edges.s[e]), sy(data.edges.s[e]));
        ctx.lineTo(sx(data.edges.t[e]), sy(data.edges.t[e]));
        var style = relationStyle(data.edges.r[e]);
        ctx.strokeStyle = style.colour.replace(/0\.35\)/, "0.9)"); ctx.setLineDash(style.dash);
        ctx.stroke();
      });
      ctx.setLineDash([]);
    }
    // Nodes: one path a type.
    for (var t = 0; t < data.types.length; t++) {
      if (!typeOn[t]) continue;
      ctx.beginPath();
      for (var i = 0; i < N; i++) {
        if (data.nodes.type[i] !== t) continue;
        var x = sx(i), y = sy(i), rad = radius[i];
        if (!onScreen(x, y, rad)) continue;
        ctx.moveTo(x + rad, y); ctx.arc(x, y, rad, 0, 2 * Math.PI);
        countNodes++;
      }
      ctx.fillStyle = typeColour(t); ctx.globalAlpha = selected >= 0 ? 0.55 : 0.9;
      ctx.fill();
    }
    ctx.globalAlpha = 1;
    var marked = Object.keys(near).map(Number).concat(hits);
    marked.forEach(function (i) {
      if (!visible(i)) return;
      ctx.beginPath(); ctx.arc(sx(i), sy(i), radius[i] + 2, 0, 2 * Math.PI);
      ctx.fillStyle = typeColour(data.nodes.type[i]); ctx.fill();
      ctx.lineWidth = i === selected ? 3 : 1.5; ctx.strokeStyle = "#1d2330"; ctx.stroke();
    });
    // Labels: the chosen and found nodes always; the rest when zoomed in far enough.
    ctx.font = "12px system-ui, sans-serif"; ctx.fillStyle = "#1d2330";
    ctx.textBaseline = "middle";
    var budget = 400, spacing = view.k * 40;
    marked.forEach(function (i) { if (visible(i)) { label(i); countLabels++; } });
    if (spacing > 60 || N <= 60) {
      for (i = 0; i < N && budget > 0; i++) {
        if (!visible(i) || near[i]) continue;
        var lx = sx(i), ly = sy(i);
        if (!onScreen(lx, ly, 0)) continue;
        label(i); countLabels++; budget--;
      }
    }
    drawn.nodes = countNodes; drawn.edges = countEdges; drawn.labels = countLabels;
    drawn.frames++;
    if (drawn.frames === 1) report.openMs = Math.round(performance.now());  // (since navigation)
    report.drawnNodes = countNodes; report.drawnEdges = countEdges;
  }
  function label(i) { ctx.fillText(data.nodes.name[i], sx(i) + radius[i] + 3, sy(i)); }
  function arrowHead(ax, ay, bx, by, rad) {
    var dx = bx - ax, dy = by - ay, len = Math.sqrt(dx * dx + dy * dy);
    if (len < 20) return;
    var ux = dx / len, uy = dy / len, tipX = bx - ux * (rad + 1), tipY = by - uy * (rad + 1);
    ctx.moveTo(tipX - ux * 7 - uy * 4, tipY - uy * 7 + ux * 4);
    ctx.lineTo(tipX, tipY);
    ctx.lineTo(tipX - ux * 7 + uy * 4, tipY - uy * 7 - ux * 4);
    ctx.moveTo(bx, by);
  }

  // ---- finding what is under the pointer
  function nodeAt(px, py) {
    var best = -1, bestD = Infinity;
    for (var i = 0; i < N; i++) {
      if (!visible(i)) continue;
      var dx = sx(i) - px, dy = sy(i) - py, d = dx * dx + dy * dy, rad = radius[i] + 3;
      if (d <= rad * rad && d < bestD) { best = i; bestD = d; }
    }
    return best;
  }
  function edgeAt(px, py) {
    var best = -1, bestD = 16;  // within 4 px
    for (var e = 0; e < E; e++) {
      if (!edgeVisible(e)) continue;
      var a = data.edges.s[e], b = data.edges.t[e];
      var ax = sx(a), ay = sy(a), bx = sx(b), by = sy(b);
      if (px < Math.min(ax, bx) - 4 || px > Math.max(ax, bx) + 4 || py < Math.min(ay, by) - 4 || py > Math.max(ay, by) + 4) continue;
      var dx = bx - ax, dy = by - ay, len = dx * dx + dy * dy;
      var t = len ? Math.max(0, Math.min(1, ((px - ax) * dx + (py - ay) * dy) / len)) : 0;
      var qx = ax + t * dx - px, qy = ay + t * dy - py, d = qx * qx + qy * qy;
      if (d < bestD) { best = e; bestD = d; }
    }
    return best;
  }
  function edgeText(e) {
    var w = data.edges.w[e], rel = data.relations[data.edges.r[e]];
    return data.nodes.name[data.edges.s[e]] + (undirected[rel] ? " \u2014 " : " \u2192 ")
      + data.nodes.name[data.edges.t[e]] + "\n" + rel + (w === null || w === undefined ? "" : " " + w);
  }
  function showTooltip(text, px, py) {
    tooltip.textContent = text; tooltip.style.display = "block";
    tooltip.style.left = (px + 14) + "px"; tooltip.style.top = (py + 10) + "px";
  }

  var drag = null;
  canvas.addEventListener("mousedown", function (ev) {
    drag = {x: ev.offsetX, y: ev.offsetY, vx: view.x, vy: view.y, moved: false};
  });
  window.addEventListener("mouseup", function (ev) {
    if (drag && !drag.moved && ev.target === canvas) {
      var i = nodeAt(ev.offsetX, ev.offsetY);
      select(i >= 0 ? i : -1, false);
    }
    drag = null;
  });
  canvas.addEventListener("mousemove", function (ev) {
    if (drag) {
      var dx = ev.offsetX - drag.x, dy = ev.offsetY - drag.y;
      if (Math.abs(dx) + Math.abs(dy) > 3) drag.moved = true;
      view.x = drag.vx - dx / view.k; view.y = drag.vy - dy / view.k;
      tooltip.style.display = "none"; schedule(); return;
    }
    var i = nodeAt(ev.offsetX, ev.offsetY);
    if (i >= 0) {
      showTooltip(data.nodes.name[i] + "\n" + data.nodes.id[i] + " (" + data.types[data.nodes.type[i]] + ")", ev.offsetX, ev.offsetY);
      return;
    }
    var e = edgeAt(ev.offsetX, ev.offsetY);
    if (e >= 0) showTooltip(edgeText(e), ev.offsetX, ev.offsetY);
    else tooltip.style.display = "none";
  });
  canvas.addEventListener("mouseleave", function () { tooltip.style.display = "none"; });
  canvas.addEventListener("wheel", function (ev) {
    ev.preventDefault();
    var factor = Math.exp(-ev.deltaY * 0.0015);
    var wx = (ev.offsetX - width / 2) / view.k + view.x, wy = (ev.offsetY - height / 2) / view.k + view.y;
    view.k = Math.max(1e-4, Math.min(200, view.k * factor));
    view.x = wx - (ev.offsetX - width / 2) / view.k; view.y = wy - (ev.offsetY - height / 2) / view.k;
    schedule();
  }, {passive: false});
  window.addEventListener("resize", resize);

  // ---- the side panel
  var panel = document.getElementById("profile");
  function sourceLink(chunk) {
    var path = data.sources[data.chunks.src[chunk]], line = data.chunks.line[chunk];
    var link = el("a", path + ":" + line, "mono");
    // relative ("./", "../") or file://, never another scheme: a folder named
    // "javascript:x" stays a folder
    var base = /^(\.\.?\/|file:\/\/)/.test(data.source_root) ? data.source_root : "./";
    link.href = encodeURI(base + path) + "#L" + line;
    return link;
  }
  function list(title, items, make) {
    if (!items || !items.length) return;
    panel.appendChild(el("h3", title));
    var ul = el("ul");
    items.forEach(function (item) { var li = el("li"); make(li, item); ul.appendChild(li); });
    panel.appendChild(ul);
  }
  function select(i, centre) {
    selected = i;
    clear(panel);
    if (i < 0) {
      panel.appendChild(el("p", "Click a node, or search, to see its profile.", "muted"));
      schedule(); return;
    }
    if (centre) { view.x = xs[i]; view.y = ys[i]; view.k = Math.max(view.k, 1.5); }
    panel.appendChild(el("h2", data.nodes.name[i]));
    panel.appendChild(el("div", data.nodes.id[i] + " \u00b7 " + data.types[data.nodes.type[i]], "mono muted"));
    var d = (data.details || [])[i] || {};
    if (data.nodes.mentions) panel.appendChild(el("div", "mentions: " + data.nodes.mentions[i], "muted"));
    list("Aliases", (data.nodes.aliases || [])[i], function (li, a) { li.textContent = a; });
    list("Contexts", d.contexts, function (li, c) { li.textContent = c; });
    list("Excerpts", d.excerpts, function (li, c) { li.textContent = c; });
    list("Needs", d.preconditions, function (li, c) { li.textContent = c; });
    list("Leads to", d.postconditions, function (li, c) { li.textContent = c; });
    list("Facts", d.facts, function (li, f) {
      li.appendChild(el("span", f[0] + " = ", "mono")); li.appendChild(el("span", f[1]));
      if (f[2]) li.appendChild(el("span", " (" + f[2] + ")", "muted"));
    });
    list("Chunks" + (d.chunk_count > (d.chunks || []).length ? " (" + d.chunks.length + " of " + d.chunk_count + ")" : ""),
      d.chunks, function (li, c) {
        li.appendChild(el("div", data.chunks.id[c], "mono"));
        li.appendChild(sourceLink(c));
        if (data.chunks.context[c]) li.appendChild(el("div", data.chunks.context[c], "muted"));
      });
    if (d.notes) list("Notes", d.notes, function (li, c) { li.textContent = c; });
    list("Edges", neighbours[i].slice(0, 60), function (li, e) {
      var other = data.edges.s[e] === i ? data.edges.t[e] : data.edges.s[e];
      var w = data.edges.w[e];
      li.appendChild(el("span", data.relations[data.edges.r[e]] + (w === null || w === undefined ? " " : " " + w + " "), "mono"));
      var pick = el("span", data.nodes.name[other], "pick");
      pick.addEventListener("click", function () { select(other, true); });
      li.appendChild(pick);
    });
    schedule();
  }

  // ---- search by name, alias or id
  var lowered = data.nodes.name.map(function (n, i) {
    return [n.toLowerCase(), data.nodes.id[i].toLowerCase()].concat(
      ((data.nodes.aliases || [])[i] || []).map(function (a) { return String(a).toLowerCase(); }));
  });
  function search(text) {
    var q = String(text || "").trim().toLowerCase();
    if (!q) return [];
    var scored = [];
    for (var i = 0; i < N; i++) {
      var best = 9;
      lowered[i].forEach(function (s) {
        if (s === q) best = Math.min(best, 0);
        else if (s.indexOf(q) === 0) best = Math.min(best, 1);
        else if (s.indexOf(q) > 0) best = Math.min(best, 2);
      });
      if (best < 9) scored.push([best, data.nodes.name[i].length, i]);
    }
    scored.sort(function (a, b) { return a[0] - b[0] || a[1] - b[1] || a[2] - b[2]; });
    return scored.map(function (s) { return s[2]; });
  }
  var box = document.getElementById("search"), matches = document.getElementById("matches");
  function runSearch(text) {
    var found = search(text);
    hits = found.slice(0, 50);
    clear(matches);
    found.slice(0, 20).forEach(function (i) {
      var li = el("li", data.nodes.name[i] + "  ");
      li.appendChild(el("span", data.types[data.nodes.type[i]], "muted"));
      li.addEventListener("click", function () { select(i, true); });
      matches.appendChild(li);
    });
    if (text && !found.length) matches.appendChild(el("li", "no entity matches", "muted"));
    schedule();
    return found;
  }
  box.addEventListener("input", function () { runSearch(box.value); });
  box.addEventListener("keydown", function (ev) {
    if (ev.key === "Enter") { var found = runSearch(box.value); if (found.length) select(found[0], true); }
  });

  // ---- legend with toggles
  function legend(target, names, swatch, state) {
    names.forEach(function (name, n) {
      var labelEl = el("label"), box = el("input");
      box.type = "checkbox"; box.checked = true;
      box.addEventListener("change", function () { state[n] = box.checked; schedule(); });
      labelEl.appendChild(box); labelEl.appendChild(swatch(n)); labelEl.appendChild(el("span", name));
      target.appendChild(labelEl);
    });
  }
  legend(document.getElementById("types"), data.types, function (t) {
    var s = el("span", null, "swatch"); s.style.background = typeColour(t); return s;
  }, typeOn);
  legend(document.getElementById("relations"), data.relations, function (r) {
    var s = el("span", null, "line-swatch"), style = relationStyle(r);
    s.style.borderTopColor = style.colour; if (style.dash.length) s.style.borderTopStyle = "dashed"; return s;
  }, relationOn);

  // ---- tables (world model, build, findings)
  function table(target, headers, rows) {
    var t = el("table"), head = el("tr");
    headers.forEach(function (h) { head.appendChild(el("th", h)); });
    t.appendChild(head);
    rows.forEach(function (row) {
      var tr = el("tr");
      row.forEach(function (cell) {
        var td = el("td");
        if (cell instanceof Node) td.appendChild(cell);
        else if (typeof cell === "number") { td.textContent = cell.toLocaleString("en"); td.className = "num"; }
        else td.textContent = cell === null || cell === undefined ? "" : String(cell);
        tr.appendChild(td);
      });
      t.appendChild(tr);
    });
    target.appendChild(t);
  }
  var idIndex = {};
  data.nodes.id.forEach(function (id, i) { idIndex[id] = i; });
  function graphLink(id, text) {
    if (!(id in idIndex)) return el("span", text || id);
    var pick = el("span", text || id, "pick");
    pick.addEventListener("click", function () { showTab("graph"); select(idIndex[id], true); });
    return pick;
  }
  function flagged(flags) {
    var span = el("span");
    flags.forEach(function (f, n) {
      span.appendChild(el("span", (n ? "; " : "") + f, f.indexOf("unreachable") >= 0 || f.indexOf("does not hold") >= 0 ? "flag" : "muted"));
    });
    return span;
  }
  var world = document.getElementById("world-tab");
  if (world && data.world) {
    var w = data.world;
    world.appendChild(el("p", "Reachability as `ctxfst plan` sees it, starting from " +
      (w.start_from === "inputs" ? "every state no skill produces (no world state yet)" : "the world state " + w.start_from) +
      ": " + w.unreachable_states + " unreachable state(s), " + w.unreachable_skills + " skill(s) that can never run."));
    world.appendChild(el("h2", "States"));
    table(world, ["state", "produced by", "needed by", "flags"], w.states.map(function (s) {
      return [graphLink(s.id, s.name + " (" + s.id + ")"), s.produced_by.join(", "), s.needed_by.join(", "), flagged(s.flags)];
    }));
    world.appendChild(el("h2", "Skills"));
    table(world, ["skill", "cost", "needs", "adds", "can run"], w.skills.map(function (s) {
      return [graphLink(s.node, s.name), s.cost, s.needs.join(", "), s.adds.join(", "),
              s.reachable ? el("span", "yes") : el("span", "never: needs " + s.missing.join(", "), "flag")];
    }));
  }
  var build = document.getElementById("build-tab");
  if (build && data.build) {
    var b = data.build;
    build.appendChild(el("p", "toolchain " + b.toolchain + " \u00b7 model " + b.model + " \u00b7 " + b.inputs + " input file(s)"));
    build.appendChild(el("h2", "Stages (run_results.json)"));
    var longest = Math.max.apply(null, b.stages.map(function (s) { return s.seconds || 0; }).concat([0.001]));
    table(build, ["stage", "status", "seconds", "", "counts"], b.stages.map(function (s) {
      var bar = el("span", null, "bar"); bar.style.width = Math.round(120 * (s.seconds || 0) / longest) + "px";
      return [s.stage, s.status, s.seconds, bar, Object.keys(s.counts).map(function (k) { return k + " " + s.counts[k]; }).join(", ")];
    }));
    build.appendChild(el("h2", "Artifacts (manifest.json)"));
    table(build, ["artifact", "stage", "bytes", "rows"], b.artifacts.map(function (a) {
      return [a.path, a.stage, a.bytes, a.rows];
    }));
  }
  var findings = document.getElementById("findings-tab");
  if (findings) {
    var f = data.findings;
    if (!f) findings.appendChild(el("p", "Lint was not run for this report (--no-lint).", "muted"));
    else {
      findings.appendChild(el("p", f.total + " finding(s) in " + f.files + " file(s)" + (f.items.length < f.total ? "; the first " + f.items.length + " are listed" : "")));
      table(findings, ["code", "count"], Object.keys(f.counts).map(function (c) { return [c, f.counts[c]]; }));
      table(findings, ["code", "severity", "where", "message"], f.items.map(function (d) {
        return [d.code, d.severity, d.path + ":" + d.line + ":" + d.column, d.message];
      }));
    }
  }

  // ---- what a test (or a person's console) can read back
  var report = window.ctxfstReport = {
    ready: false, kind: data.kind, nodes: N, edges: E, drawnNodes: 0, drawnEdges: 0,
    openMs: null, errors: errors,
    search: function (text) { return runSearch(text).map(function (i) { return data.nodes.id[i]; }); },
    select: function (id) { if (id in idIndex) { showTab("graph"); select(idIndex[id], true); } return selected; },
    selected: function () { return selected >= 0 ? data.nodes.id[selected] : null; },
    profileText: function () { return panel.textContent; },
    redraw: function () { var t = performance.now(); draw(); return performance.now() - t; }
  };
  resize(); fit(); select(-1, false); draw();
  // A link may name a search (#q=...) or an entity (#node=...).
  var hash = decodeURIComponent(location.hash.replace(/^#/, ""));
  if (hash.indexOf("q=") === 0) { box.value = hash.slice(2); runSearch(box.value); }
  if (hash.indexOf("node=") === 0) report.select(hash.slice(5));
  report.ready = true;
})();
