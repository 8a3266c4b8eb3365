// qualitycheck review: blinded pairwise labelling. Answers are untrusted text: they reach
// the page only through textContent. Progress lives in this browser's localStorage, keyed
// by the page's opaque run id, so a reload (or a crash) loses nothing; export downloads it.
(function () {
  "use strict";
  var DATA = JSON.parse(document.getElementById("qc-review").textContent);
  var PAIRS = DATA.pairs, STORE = "qualitycheck-review:" + DATA.run;
  var $ = function (id) { return document.getElementById(id); };
  var state = load();
  var note = $("note"), reviewer = $("reviewer");

  function load() {
    var s = null;
    try { s = JSON.parse(localStorage.getItem(STORE) || "null"); } catch (e) { s = null; }
    if (!s || typeof s !== "object") s = {};
    return { reviewer: s.reviewer || "", labels: s.labels || {}, pos: Math.min(Math.max(0, s.pos | 0), Math.max(0, PAIRS.length - 1)) };
  }
  function save() {
    try { localStorage.setItem(STORE, JSON.stringify(state)); } catch (e) { /* storage full or disabled: labels stay on screen */ }
  }
  function done() { return PAIRS.filter(function (p) { return state.labels[p.id] && state.labels[p.id].choice; }).length; }

  function render() {
    if (!PAIRS.length) { $("empty").hidden = false; return; }
    $("pair").hidden = false;
    var p = PAIRS[state.pos], lab = state.labels[p.id] || {};
    $("position").textContent = "pair " + (state.pos + 1) + " of " + PAIRS.length;
    $("category").textContent = p.category;
    $("pair-state").textContent = lab.choice ? "labelled" : "not labelled yet";
    var conv = $("conversation");
    conv.textContent = "";
    p.messages.forEach(function (m) {
      var d = document.createElement("div"), r = document.createElement("span");
      d.className = "turn"; r.className = "role"; r.textContent = m.role + ":";
      d.appendChild(r); d.appendChild(document.createTextNode(m.content));
      conv.appendChild(d);
    });
    $("answer-a").textContent = p.a;
    $("answer-b").textContent = p.b;
    note.value = lab.note || "";
    document.querySelectorAll(".choices button").forEach(function (b) {
      b.setAttribute("aria-pressed", String(b.getAttribute("data-pick") === lab.choice));
    });
    $("progress").textContent = done() + " of " + PAIRS.length + " labelled";
  }

  function label(choice) {
    var p = PAIRS[state.pos];
    state.labels[p.id] = { choice: choice, note: note.value };
    save();
    var next = nextOpen();
    if (next !== null) state.pos = next;
    render();
  }
  function nextOpen() {
    for (var k = 1; k <= PAIRS.length; k++) {
      var i = (state.pos + k) % PAIRS.length;
      if (!(state.labels[PAIRS[i].id] || {}).choice) return i;
    }
    return null;
  }
  function move(d) {
    if (!PAIRS.length) return;
    state.pos = Math.min(PAIRS.length - 1, Math.max(0, state.pos + d));
    save(); render();
  }
  function keepNote() {
    var p = PAIRS[state.pos];
    if (!p) return;
    var lab = state.labels[p.id] || {};
    lab.note = note.value;
    state.labels[p.id] = lab;
    save();
  }
  function exportLabels() {
    if (!state.reviewer) {  // the import refuses labels without a reviewer: ask now, not after the download
      $("progress").textContent = "Enter your name before exporting.";
      reviewer.focus();
      return;
    }
    var labels = PAIRS.filter(function (p) { return (state.labels[p.id] || {}).choice; }).map(function (p) {
      var l = state.labels[p.id];
      return { pair: p.id, choice: l.choice, note: l.note || "" };
    });
    var body = { format: "qualitycheck-review-labels", version: 1, run: DATA.run, reviewer: state.reviewer,
                 exported_at: new Date().toISOString(), labels: labels };
    var url = URL.createObjectURL(new Blob([JSON.stringify(body, null, 2)], { type: "application/json" }));
    var a = document.createElement("a");
    a.href = url;
    a.download = "review-labels-" + (state.reviewer || "reviewer").replace(/[^A-Za-z0-9_.-]+/g, "_") + ".json";
    document.body.appendChild(a); a.click(); a.remove();
    setTimeout(function () { URL.revokeObjectURL(url); }, 1000);
  }

  reviewer.value = state.reviewer;
  reviewer.addEventListener("input", function () { state.reviewer = reviewer.value.trim(); save(); });
  note.addEventListener("input", keepNote);
  document.querySelectorAll(".choices button").forEach(function (b) {
    b.addEventListener("click", function () { label(b.getAttribute("data-pick")); });
  });
  $("prev").addEventListener("click", function () { move(-1); });
  $("next").addEventListener("click", function () { move(1); });
  $("export").addEventListener("click", exportLabels);
  var KEYS = { "1": "A", "2": "B", "3": "tie", "4": "both_wrong" };
  document.addEventListener("keydown", function (e) {
    var focused = document.activeElement;
    if (focused === note || focused === reviewer) { if (e.key === "Escape") focused.blur(); return; }
    if (e.ctrlKey || e.metaKey || e.altKey) return;
    if (KEYS[e.key]) { label(KEYS[e.key]); e.preventDefault(); }
    else if (e.key === "n" || e.key === "ArrowRight") { move(1); e.preventDefault(); }
    else if (e.key === "p" || e.key === "ArrowLeft") { move(-1); e.preventDefault(); }
    else if (e.key === "e") { note.focus(); e.preventDefault(); }
    else if (e.key === "x") { exportLabels(); e.preventDefault(); }
  });
  render();
})();
