// qualitycheck report: case list, filters and the on-demand side-by-side diff.
// Model output is untrusted: it reaches the page only through textContent /
// createTextNode, never as markup. The diff of a case is computed when the
// case is opened, so a 10,000-pair report opens as fast as a small one.
(function () {
  "use strict";
  var PAGE = 100;
  var MAX_EDIT = 2000; // Myers steps (edits) before falling back to one changed block; keeps the trace ~16 MB at most
  var CASES = JSON.parse(document.getElementById("qc-cases").textContent);
  var STATUS = { p: "pass", f: "fail", e: "error", s: "skipped", "-": "not scored" };
  var $ = function (id) { return document.getElementById(id); };
  var fCat = $("f-category"), fCheck = $("f-check"), fFlag = $("f-flag"), fSearch = $("f-search");
  var tbody = document.querySelector("#case-table tbody"), more = $("more"), count = $("case-count"), detail = $("case-detail");
  var OMITTED = Number(count.dataset.omitted || 0); // cases the report counts but does not embed (large runs)
  var matches = [], shown = 0, selected = null, haystacks = new Array(CASES.length);

  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }

  function haystack(i) {
    if (haystacks[i] === undefined) {
      var c = CASES[i], parts = [c.i, c.k, c.r || "", c.p || ""];
      ["baseline", "candidate"].forEach(function (s) { (c.t && c.t[s] || []).forEach(function (x) { if (x) parts.push(x); }); });
      haystacks[i] = parts.join("\n").toLowerCase();
    }
    return haystacks[i];
  }

  // The checks behind a per-check status (verdict._status decided it; the page only shows it).
  var LISTS = { regression: "rc", tolerated: "tc", improved: "ic", flaky: "fc" };
  function listFor(c, flag) { return LISTS[flag] ? c[LISTS[flag]] : null; }

  function matchesCase(i, cat, check, flag, q) {
    var c = CASES[i];
    if (cat && c.k !== cat) return false;
    if (flag && c.f.indexOf(flag) < 0) return false;
    if (check) {
      if (!c.s[check]) return false;
      var lst = listFor(c, flag);
      if (lst && lst.indexOf(check) < 0) return false;
    }
    if (q && haystack(i).indexOf(q) < 0) return false;
    return true;
  }

  function applyFilters() {
    var cat = fCat.value, check = fCheck.value, flag = fFlag.value, q = fSearch.value.trim().toLowerCase();
    matches = [];
    for (var i = 0; i < CASES.length; i++) if (matchesCase(i, cat, check, flag, q)) matches.push(i);
    tbody.textContent = "";
    shown = 0;
    showMore();
    count.textContent = matches.length + " of " + CASES.length + " cases" + (OMITTED ? " embedded (" + OMITTED + " more not embedded)" : "");
  }

  function statusChips(letters) {
    var span = el("span");
    for (var j = 0; j < letters.length; j++) {
      var ch = letters.charAt(j), s = el("span", "st st-" + ch, ch === "-" ? "·" : ch);
      s.title = STATUS[ch] || ch;
      span.appendChild(s);
    }
    return span;
  }

  function checkCell(c) {
    var td = el("td", "small");
    Object.keys(c.s).sort().forEach(function (name) {
      var d = el("span");
      d.appendChild(el("span", "mono", name + " "));
      d.appendChild(statusChips(c.s[name].baseline || ""));
      d.appendChild(document.createTextNode("→"));
      d.appendChild(statusChips(c.s[name].candidate || ""));
      d.appendChild(document.createTextNode("  "));
      td.appendChild(d);
    });
    return td;
  }

  function flagBadges(flags) {
    var td = el("td");
    flags.forEach(function (f) { td.appendChild(el("span", "badge " + f, f)); });
    return td;
  }

  function showMore() {
    var end = Math.min(matches.length, shown + PAGE), frag = document.createDocumentFragment();
    for (; shown < end; shown++) {
      var idx = matches[shown], c = CASES[idx], tr = el("tr");
      tr.dataset.idx = String(idx);
      tr.tabIndex = 0;
      tr.appendChild(el("td", "id", c.i));
      tr.appendChild(el("td", null, c.k));
      tr.appendChild(flagBadges(c.f));
      tr.appendChild(checkCell(c));
      if (idx === selected) tr.className = "sel";
      frag.appendChild(tr);
    }
    tbody.appendChild(frag);
    more.hidden = shown >= matches.length;
    more.textContent = "Show more (" + (matches.length - shown) + " left)";
  }

  // ---------------------------------------------------------------- diff
  var TOKEN = /\s+|[\p{L}\p{N}_]+|[^\s\p{L}\p{N}_]/gu;
  function tokens(s) { return s.match(TOKEN) || []; }

  // Myers O(ND) on token arrays; returns [op, tokens[]] runs with op in "=", "-", "+".
  function diffTokens(a, b) {
    var pre = 0;
    while (pre < a.length && pre < b.length && a[pre] === b[pre]) pre++;
    var suf = 0;
    while (suf < a.length - pre && suf < b.length - pre && a[a.length - 1 - suf] === b[b.length - 1 - suf]) suf++;
    var A = a.slice(pre, a.length - suf), B = b.slice(pre, b.length - suf);
    var mid = myers(A, B);
    var ops = [];
    if (pre) ops.push(["=", a.slice(0, pre)]);
    mid.forEach(function (o) { ops.push(o); });
    if (suf) ops.push(["=", a.slice(a.length - suf)]);
    return ops;
  }

  function myers(a, b) {
    var n = a.length, m = b.length;
    if (!n && !m) return [];
    if (!n) return [["+", b]];
    if (!m) return [["-", a]];
    var max = Math.min(n + m, MAX_EDIT), off = max + 1, v = new Int32Array(2 * max + 3), trace = [], found = -1;
    for (var d = 0; d <= max && found < 0; d++) {
      for (var k = -d; k <= d; k += 2) {
        var x = (k === -d || (k !== d && v[off + k - 1] < v[off + k + 1])) ? v[off + k + 1] : v[off + k - 1] + 1, y = x - k;
        while (x < n && y < m && a[x] === b[y]) { x++; y++; }
        v[off + k] = x;
        if (x >= n && y >= m) { found = d; break; }
      }
      trace.push(v.slice(off - d, off + d + 1));
    }
    if (found < 0) return [["-", a], ["+", b]]; // too different to align: one replaced block
    var runs = [], x2 = n, y2 = m;
    function push(op, tok) {
      var last = runs[runs.length - 1];
      if (last && last[0] === op) last[1].push(tok); else runs.push([op, [tok]]);
    }
    for (var dd = found; dd > 0; dd--) {
      var prev = trace[dd - 1], kk = x2 - y2;
      var get = function (q) { return prev[q + dd - 1]; };
      var down = kk === -dd || (kk !== dd && get(kk - 1) < get(kk + 1));
      var pk = down ? kk + 1 : kk - 1, px = get(pk), py = px - pk;
      var sx = down ? px : px + 1;
      while (x2 > sx) { x2--; y2--; push("=", a[x2]); }
      if (down) push("+", b[py]); else push("-", a[px]);
      x2 = px; y2 = py;
    }
    while (x2 > 0) { x2--; push("=", a[x2]); }
    runs.reverse();
    runs.forEach(function (r) { r[1].reverse(); });
    return runs;
  }

  function renderPane(pre, ops, side) {
    var keep = side === "baseline" ? "-" : "+", tag = side === "baseline" ? "del" : "ins", marked = false, chars = 0, first = null;
    ops.forEach(function (o) {
      var text = o[1].join("");
      if (o[0] === "=") { pre.appendChild(document.createTextNode(text)); chars += text.length; return; }
      if (!marked) {
        var mk = el("span", "first-div");
        mk.title = "first divergence at character " + chars;
        pre.appendChild(mk);
        marked = true; first = chars;
      }
      if (o[0] === keep) pre.appendChild(el(tag, "chg", text));
    });
    return first;
  }

  // ---------------------------------------------------------------- likelihood under the baseline model
  // Each answer's mean log-probability per token and its least likely tokens (report/_data.py sample_view);
  // a greedy pair's first differing token (divergence_view). Model text is still only ever textContent.
  var KINDS = JSON.parse(detail.dataset.kinds || "{}"); // divergence kind → [label, meaning] (report/_html.py DIVERGENCE_WORDS)
  var RARE = Math.log(0.01), LOW = Math.log(0.1);

  function pct(p) {
    if (p === null || p === undefined) return "–";
    if (p >= 0.1) return Math.round(p * 100) + "%";
    if (p >= 0.001) return (p * 100).toFixed(1) + "%";
    return Number((p * 100).toPrecision(2)) + "%";
  }
  function nats(x) { return (x >= 0 ? "+" : "") + x.toFixed(2); }
  function tok(t) { return t === null || t === undefined ? "(its answer ended)" : JSON.stringify(t); }

  // The answer with its least likely tokens wrapped in <mark>; offsets are code points (Python's), so the
  // text is sliced as an array of code points. Returns the tokens that could not be placed in the text.
  function markedText(pre, text, marks) {
    var chars = Array.from(text), at = 0, loose = [];
    marks.forEach(function (m) {
      if (typeof m[3] !== "number") { loose.push([m[0], m[1], m[3]]); return; }
      if (m[3] < at || m[4] > chars.length) { loose.push([m[0], m[1], chars.slice(m[3], m[4]).join("")]); return; }
      pre.appendChild(document.createTextNode(chars.slice(at, m[3]).join("")));
      var p = pct(Math.exp(m[1]));
      var mk = el("mark", "ll " + (m[1] < RARE ? "ll-rare" : m[1] < LOW ? "ll-low" : "ll-some"), chars.slice(m[3], m[4]).join(""));
      mk.title = "token " + m[0] + ": the baseline model gives it " + p + (m[2] ? " (rank " + m[2] + ")" : " (below the top tokens it listed)");
      mk.dataset.p = p;
      pre.appendChild(mk);
      at = m[4];
    });
    pre.appendChild(document.createTextNode(chars.slice(at).join("")));
    return loose;
  }

  function likelihoodSection(c) {
    var l = c.l, items = [];
    if (!l) return null;
    ["baseline", "candidate"].forEach(function (side) {
      (l[side] || []).forEach(function (v, rep) {
        if (v === true) v = (l.baseline || [])[rep]; // the same answer as the baseline's (report/_data.py SAME_AS_BASELINE)
        if (v !== null && v !== undefined) items.push({ side: side, rep: rep, v: v, text: ((c.t || {})[side] || [])[rep] });
      });
    });
    if (!items.length) return null;
    items.sort(function (a, b) { // scored answers, least likely first; then those not scored
      var sa = Array.isArray(a.v), sb = Array.isArray(b.v);
      if (sa !== sb) return sa ? -1 : 1;
      if (sa && a.v[0] !== b.v[0]) return a.v[0] - b.v[0];
      return a.side === b.side ? a.rep - b.rep : (a.side < b.side ? -1 : 1);
    });
    var box = el("div", "samples");
    box.id = "case-likelihood";
    box.appendChild(el("h4", null, "Answers under the baseline model, least likely first"));
    box.appendChild(el("p", "small muted", "Ordered by mean log-probability per token under the baseline model (0 nats: certain; lower: less likely). " +
      "Marked: each answer's least likely tokens, with the probability the baseline model gives them."));
    items.forEach(function (it) {
      var row = el("div", "sample sample-" + it.side), head = el("div", "small");
      head.appendChild(el("span", "badge side-" + it.side, it.side));
      head.appendChild(document.createTextNode(" sample " + it.rep + " · "));
      if (Array.isArray(it.v)) {
        head.appendChild(el("b", "mean", nats(it.v[0])));
        head.appendChild(document.createTextNode(" nats per token (" + pct(Math.exp(it.v[0])) + " per token, geometric mean) over " + it.v[1] + " tokens"));
      } else {
        head.appendChild(el("span", "warn-note", it.v));
      }
      row.appendChild(head);
      var pre = el("pre", "sample-text"), loose = [];
      if (typeof it.text === "string") {
        if (Array.isArray(it.v)) loose = markedText(pre, it.text, it.v[2]); else pre.textContent = it.text;
      }
      row.appendChild(pre);
      if (loose.length) {
        row.appendChild(el("div", "small muted loose", "Not found in the text as decoded: " + loose.map(function (m) {
          return "token " + m[0] + " " + (typeof m[2] === "string" ? JSON.stringify(m[2]) : "(no text)") + " " + pct(Math.exp(m[1]));
        }).join("; ")));
      }
      box.appendChild(row);
    });
    return box;
  }

  function divergenceNote(d) {
    var box = el("div", "divergence-note small"), kind = KINDS[d.k] || [d.k, ""];
    box.appendChild(el("span", "badge " + (d.k === "decisive" ? "fail" : d.k === "near_tie" ? "pass" : "inconclusive"), kind[0]));
    var says = "At token " + d.at + " the candidate wrote " + tok(d.ct);
    if (d.ct !== null && d.ct !== undefined) says += ": the baseline gives the candidate's token " + pct(d.cp) + (d.cr ? " (rank " + d.cr + ")" : "");
    says += "; the baseline wrote " + tok(d.bt) + (d.bp !== null && d.bp !== undefined ? " (" + pct(d.bp) + ")" : "") + ". " +
      kind[1].charAt(0).toUpperCase() + kind[1].slice(1) + ".";
    if (d.m !== null && d.m !== undefined) says += " Margin " + d.m.toFixed(2) + " nats";
    if (d.rm !== null && d.rm !== undefined) says += "; the baseline model's own top two were " + d.rm.toFixed(2) + " nats apart";
    box.appendChild(document.createTextNode(" " + says + (d.m !== null && d.m !== undefined ? "." : "")));
    return box;
  }

  // ---------------------------------------------------------------- detail
  function kv(parent, key, value) {
    var row = el("div", "small");
    row.appendChild(el("span", "muted", key + ": "));
    row.appendChild(el("span", "mono", typeof value === "string" ? value : JSON.stringify(value)));
    parent.appendChild(row);
  }

  function pane(side, text, error, meta) {
    var box = el("div", "pane pane-" + side), h = el("h4", null, side);
    if (meta) {
      var bits = [];
      if (meta.tokens !== null && meta.tokens !== undefined) bits.push(meta.tokens + " tokens");
      if (meta.finish) bits.push("finish " + meta.finish);
      if (meta.e2e_s !== null && meta.e2e_s !== undefined) bits.push(meta.e2e_s.toFixed(2) + " s");
      if (bits.length) h.appendChild(el("span", "muted small", " · " + bits.join(" · ")));
    }
    box.appendChild(h);
    var pre = el("pre");
    if (error) pre.appendChild(el("div", "err", error));
    box.appendChild(pre);
    return { box: box, pre: pre, text: text };
  }

  function showDiff(host, c, rep) {
    host.textContent = "";
    var tb = (c.t.baseline || [])[rep], tc = (c.t.candidate || [])[rep];
    var eb = ((c.e || {}).baseline || [])[rep], ec = ((c.e || {}).candidate || [])[rep];
    var mb = ((c.m || {}).baseline || [])[rep], mc = ((c.m || {}).candidate || [])[rep];
    var x = (c.x || [])[rep];
    var pb = pane("baseline", tb, eb, mb), pc = pane("candidate", tc, ec, mc), info = el("div", "small");
    if (typeof tb === "string" && typeof tc === "string") {
      if (tb === tc) {
        pb.pre.appendChild(document.createTextNode(tb));
        pc.pre.appendChild(document.createTextNode(tc));
        info.textContent = "Identical answers.";
      } else {
        var ops = diffTokens(tokens(tb), tokens(tc));
        var at = renderPane(pb.pre, ops, "baseline");
        renderPane(pc.pre, ops, "candidate");
        var changed = 0, total = 0;
        ops.forEach(function (o) { var n = o[1].length; total += n; if (o[0] !== "=") changed += n; });
        var fc = 0;
        while (fc < tb.length && fc < tc.length && tb.charAt(fc) === tc.charAt(fc)) fc++;
        info.textContent = "First divergence at character " + fc + " (marked at the start of its token, " + at + "); " + changed + " of " + total + " tokens differ.";
      }
    } else {
      if (typeof tb === "string") pb.pre.appendChild(document.createTextNode(tb));
      if (typeof tc === "string") pc.pre.appendChild(document.createTextNode(tc));
      info.textContent = "No diff: at least one side has no answer.";
    }
    if (x && x.divergence_token !== undefined) info.textContent += " First differing token: " + x.divergence_token + ".";
    if (x && x.similarity !== undefined) info.textContent += " Similarity " + Number(x.similarity).toFixed(3) + (x.similarity_exact === false ? " (bound)" : "") + ".";
    host.appendChild(info);
    (c.v || []).forEach(function (d) { if (d.r === rep) host.appendChild(divergenceNote(d)); });
    var grid = el("div", "panes");
    grid.appendChild(pb.box); grid.appendChild(pc.box);
    host.appendChild(grid);
    if (x) {
      var cmp = el("details");
      cmp.appendChild(el("summary", null, "Comparison record"));
      Object.keys(x).sort().forEach(function (k) { kv(cmp, k, x[k]); });
      host.appendChild(cmp);
    }
    var mark = grid.querySelector(".pane-candidate .first-div");
    if (mark && mark.scrollIntoView) mark.scrollIntoView({ block: "nearest" });
  }

  // Score details (schema errors, failing assertion, SQL result diff, judge reasoning) as nested
  // key/value text: strings keep their line breaks instead of showing JSON escapes.
  function renderValue(v, depth) {
    if (v === null || v === undefined) return el("span", "muted", "null");
    if (typeof v === "string") return el("span", "txt", v);
    if (typeof v !== "object") return el("span", "mono", String(v));
    var isArr = Array.isArray(v);
    if (depth > 6 || (isArr && v.every(function (x) { return x === null || typeof x !== "object"; }) && JSON.stringify(v).length < 200) ||
        (isArr && v.length && v.every(Array.isArray))) {
      var pre = el("span", "mono txt", isArr && v.every(Array.isArray) ? v.map(function (r) { return JSON.stringify(r); }).join("\n") : JSON.stringify(v));
      return pre;
    }
    var box = el("div", "kv");
    (isArr ? v.map(function (x, i) { return [String(i), x]; }) : Object.keys(v).map(function (k) { return [k, v[k]]; }))
      .forEach(function (pair) {
        var row = el("div");
        row.appendChild(el("span", "muted", (isArr ? "#" : "") + pair[0] + ": "));
        var inner = renderValue(pair[1], depth + 1);
        if (inner.tagName === "DIV") row.appendChild(el("br"));
        row.appendChild(inner);
        box.appendChild(row);
      });
    return box;
  }

  function checksTable(c) {
    var wrap = el("div"), seen = {};
    // the scored checks, and those the decision made of the case without a score (decisive_divergence)
    var names = Object.keys(c.s).concat(c.rc || [], c.tc || [], c.ic || [], c.fc || []).filter(function (n) {
      return seen[n] ? false : (seen[n] = true);
    }).sort();
    if (!names.length) { wrap.appendChild(el("p", "muted small", "No scores stored for this case.")); return wrap; }
    var t = el("table", "checks"), head = el("tr");
    var control = names.some(function (n) { return c.s[n] && c.s[n].control !== undefined; });
    (control ? ["Check", "Baseline", "Candidate", "Control (A/A)", "Outcome"] : ["Check", "Baseline", "Candidate", "Outcome"])
      .forEach(function (h) { head.appendChild(el("th", null, h)); });
    t.appendChild(head);
    names.forEach(function (name) {
      var tr = el("tr"), st = c.s[name];
      tr.appendChild(el("td", "mono", name));
      if (!st) {
        tr.appendChild(el("td", "muted small", "no score: decided from the case's evidence (see above)"));
        tr.lastChild.colSpan = control ? 3 : 2;
      } else {
        var tdb = el("td"); tdb.appendChild(statusChips(st.baseline || "")); tr.appendChild(tdb);
        var tdc = el("td"); tdc.appendChild(statusChips(st.candidate || "")); tr.appendChild(tdc);
        if (control) { var tdk = el("td"); tdk.appendChild(statusChips(st.control || "")); tr.appendChild(tdk); }
      }
      var out = el("td");
      if ((c.rc || []).indexOf(name) >= 0) out.appendChild(el("span", "badge regression", "regression"));
      if ((c.tc || []).indexOf(name) >= 0) out.appendChild(el("span", "badge tolerated", "tolerated regression"));
      if ((c.ic || []).indexOf(name) >= 0) out.appendChild(el("span", "badge improved", "improved"));
      if ((c.fc || []).indexOf(name) >= 0) out.appendChild(el("span", "badge flaky", "flaky"));
      tr.appendChild(out);
      t.appendChild(tr);
    });
    wrap.appendChild(t);
    var det = c.d || {};
    Object.keys(det).sort().forEach(function (name) {
      Object.keys(det[name]).forEach(function (side) {
        (det[name][side] || []).forEach(function (d, rep) {
          if (!d) return;
          var h = el("div", "small");
          h.appendChild(el("b", "mono", name));
          h.appendChild(document.createTextNode(" · " + side + (det[name][side].length > 1 ? " · repeat " + rep : "")));
          wrap.appendChild(h);
          var box = el("div", "detail-json");
          box.appendChild(renderValue(d, 0));
          wrap.appendChild(box);
        });
      });
    });
    return wrap;
  }

  function openCase(idx) {
    var c = CASES[idx];
    selected = idx;
    Array.prototype.forEach.call(tbody.querySelectorAll("tr.sel"), function (r) { r.className = ""; });
    var row = tbody.querySelector('tr[data-idx="' + idx + '"]');
    if (row) row.className = "sel";
    detail.textContent = "";
    detail.hidden = false;
    var head = el("div", "cat-head");
    head.appendChild(el("h3", "mono", c.i));
    head.appendChild(el("span", "muted", c.k + (c.r ? " · route " + c.r : "")));
    c.f.forEach(function (f) { head.appendChild(el("span", "badge " + f, f)); });
    var close = el("button", null, "Close");
    close.type = "button";
    close.addEventListener("click", function () {
      detail.hidden = true; detail.textContent = ""; selected = null;
      if (history.replaceState) history.replaceState(null, "", location.pathname + location.search); // a link to it opens it again
      Array.prototype.forEach.call(tbody.querySelectorAll("tr.sel"), function (r) { r.className = ""; });
    });
    head.appendChild(close);
    detail.appendChild(head);
    var reps = Math.max((c.t.baseline || []).length, (c.t.candidate || []).length, 1), host = el("div", "diff");
    if (reps > 1) {
      var sel = el("select");
      sel.setAttribute("aria-label", "repeat");
      for (var r = 0; r < reps; r++) { var o = el("option", null, "repeat " + r); o.value = String(r); sel.appendChild(o); }
      sel.addEventListener("change", function () { showDiff(host, c, Number(sel.value)); });
      detail.appendChild(sel);
    }
    detail.appendChild(host);
    showDiff(host, c, 0);
    var lk = likelihoodSection(c);
    if (lk) detail.appendChild(lk);
    detail.appendChild(el("h4", null, "Checks"));
    detail.appendChild(checksTable(c));
    var pd = el("details"), ps = el("summary", null, "Prompt");
    pd.appendChild(ps);
    pd.appendChild(el("pre", "detail-json", c.p || ""));
    detail.appendChild(pd);
    detail.scrollIntoView({ block: "start" });
    if (history.replaceState) history.replaceState(null, "", "#case=" + encodeURIComponent(c.i));
  }

  // A link to report.html#case=<id> (pasted into a ticket) opens that case.
  function openFromHash() {
    var m = /^#case=(.+)$/.exec(location.hash);
    if (!m) return;
    var id = decodeURIComponent(m[1]);
    for (var i = 0; i < CASES.length; i++) if (CASES[i].i === id) { openCase(i); return; }
    if (OMITTED) {
      detail.textContent = "";
      detail.hidden = false;
      detail.appendChild(el("p", "warn-note", "Case " + id + " is not embedded in this report: see the note above the case list for where it is."));
    }
  }

  tbody.addEventListener("click", function (ev) {
    var tr = ev.target.closest("tr");
    if (tr && tr.dataset.idx) openCase(Number(tr.dataset.idx));
  });
  tbody.addEventListener("keydown", function (ev) {
    var tr = ev.target.closest("tr");
    if (tr && tr.dataset.idx && (ev.key === "Enter" || ev.key === " ")) { ev.preventDefault(); openCase(Number(tr.dataset.idx)); }
  });
  more.addEventListener("click", showMore);
  [fCat, fCheck, fFlag].forEach(function (s) { s.addEventListener("change", applyFilters); });
  var timer = null;
  fSearch.addEventListener("input", function () { clearTimeout(timer); timer = setTimeout(applyFilters, 120); });
  window.addEventListener("hashchange", openFromHash); // the category cards link to their cases (#case=<id>)
  applyFilters();
  openFromHash();
})();
