// latchkey admin page: refreshes the tables from api/state and, when the
// handler allows writes, force-releases a key after a confirmation.
// Every value from the server is set with textContent: keys and metadata
// are never parsed as markup.
(function () {
  "use strict";

  var body = document.body;
  var refresh = Math.max(Number(body.dataset.refresh) || 2000, 250);
  var writes = body.dataset.writes === "true";
  var tokenMeta = document.querySelector('meta[name="latchkey-token"]');
  var token = tokenMeta ? tokenMeta.content : "";
  var paused = false;
  var timer = null;
  var $ = function (id) { return document.getElementById(id); };

  function text(tag, value, cls, label) {
    var el = document.createElement(tag);
    el.textContent = value == null ? "" : String(value);
    if (cls) el.className = cls;
    if (label) el.dataset.label = label;
    return el;
  }

  function ttl(ms) {
    if (ms < 0) return "none";
    if (ms < 60000) return (ms / 1000).toFixed(1) + "s";
    var s = Math.round(ms / 1000);
    var h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60);
    return (h ? h + "h" : "") + m + "m" + (s % 60) + "s";
  }

  function dur(ms) {
    return ms < 1000 ? ms + "ms" : (ms / 1000).toFixed(1) + "s";
  }

  // waiters is a primitive's queued waiters, and how long the first has waited.
  function waiters(p) {
    return p.waiters > 0 ? p.waiters + " (" + dur(p.oldest_wait_ms) + ")" : "0";
  }

  function stamp(iso) {
    if (!iso || iso.indexOf("0001-") === 0) return "-";
    return iso.replace("T", " ").replace(/\.\d+/, "").replace(/(\+00:00|Z)$/, "Z");
  }

  function releaseButton(key) {
    var b = text("button", "Release", "release");
    b.type = "button";
    b.dataset.key = key;
    var td = document.createElement("td");
    td.appendChild(b);
    return td;
  }

  function fill(tbody, rows, cols, empty) {
    var frag = document.createDocumentFragment();
    rows.forEach(function (r) { frag.appendChild(r); });
    if (rows.length === 0 && empty) {
      var tr = document.createElement("tr");
      tr.className = "empty";
      var td = text("td", empty);
      td.colSpan = cols;
      tr.appendChild(td);
      frag.appendChild(tr);
    }
    tbody.replaceChildren(frag);
  }

  function holdRow(p, h, withKind) {
    var tr = document.createElement("tr");
    tr.appendChild(text("td", p.key, "key", "Key"));
    if (withKind) tr.appendChild(text("td", h.kind, "", "Kind"));
    var holder = text("td", h.holder, "mono", "Holder");
    holder.title = h.token;
    tr.appendChild(holder);
    tr.appendChild(text("td", h.fence, "num", "Fence"));
    tr.appendChild(text("td", ttl(h.ttl_ms), "num", "TTL"));
    tr.appendChild(text("td", waiters(p), "num", "Waiters"));
    tr.appendChild(text("td", h.metadata || "", "", "Metadata"));
    if (writes) tr.appendChild(releaseButton(p.key));
    return tr;
  }

  function render(s) {
    var locks = [], prims = [], waiting = [], nLocks = 0;
    s.locks.forEach(function (p) {
      if (p.type === "lock") nLocks++;
      p.holds.forEach(function (h) {
        (p.type === "lock" ? locks : prims).push(holdRow(p, h, p.type !== "lock"));
      });
      if (p.waiters > 0) {
        var tr = document.createElement("tr");
        tr.appendChild(text("td", p.key, "key", "Key"));
        tr.appendChild(text("td", p.type, "", "Type"));
        tr.appendChild(text("td", p.waiters, "num", "Waiters"));
        tr.appendChild(text("td", dur(p.oldest_wait_ms), "num", "Oldest wait"));
        tr.appendChild(text("td", p.holds.length, "num", "Holders"));
        waiting.push(tr);
      }
    });
    fill($("locks-body"), locks, 7, "Nothing held.");
    fill($("prims-body"), prims, 8, "");
    fill($("waiters-body"), waiting, 5, "Nobody waits.");

    fill($("cron-body"), s.cron.map(function (r) {
      var tr = document.createElement("tr");
      tr.appendChild(text("td", r.job, "key", "Job"));
      tr.appendChild(text("td", r.node, "", "Node"));
      tr.appendChild(text("td", stamp(r.planned), "", "Planned"));
      tr.appendChild(text("td", stamp(r.start), "", "Started"));
      tr.appendChild(text("td", r.running ? "running" : dur(r.duration_ms), "num", "Took"));
      tr.appendChild(text("td", r.error ? r.error : (r.running ? "running" : "ok"), r.error ? "bad" : "", "Result"));
      return tr;
    }), 6, "No cronlock job has a recorded run.");

    fill($("losses-body"), s.losses.map(function (l) {
      var tr = document.createElement("tr");
      tr.appendChild(text("td", stamp(l.at), "", "When"));
      tr.appendChild(text("td", l.key, "key", "Key"));
      tr.appendChild(text("td", l.kind, "", "Kind"));
      tr.appendChild(text("td", l.fence, "num", "Fence"));
      tr.appendChild(text("td", l.source, "", "What"));
      tr.appendChild(text("td", l.cause, "", "Cause"));
      return tr;
    }), 6, "No recent losses.");

    $("n-locks").textContent = nLocks;
    $("n-prims").textContent = s.locks.length;
    $("n-waiting").textContent = waiting.length;
    $("n-losses").textContent = s.losses.length;
    var trunc = $("truncated");
    trunc.hidden = !s.truncated;
    trunc.textContent = s.truncated ? "Only the first " + s.locks.length + " are shown: narrow the match." : "";
    var errs = Object.keys(s.errors || {}).map(function (k) { return k + ": " + s.errors[k]; });
    $("errors").hidden = errs.length === 0;
    $("errors").textContent = errs.join("; ");
    $("updated").textContent = "as of " + stamp(s.now).slice(11);
  }

  function setLive(state) {
    $("live").className = "dot " + state;
  }

  function poll() {
    clearTimeout(timer);
    var match = $("match").value;
    fetch("api/state?match=" + encodeURIComponent(match), { credentials: "same-origin", cache: "no-store" })
      .then(function (res) {
        if (!res.ok) throw new Error("HTTP " + res.status);
        return res.json();
      })
      .then(function (s) { render(s); setLive("ok"); })
      .catch(function (e) { setLive("down"); $("updated").textContent = "refresh failed: " + e.message; })
      .then(function () { if (!paused) timer = setTimeout(poll, refresh); });
  }

  function say(msg, bad) {
    var m = $("message");
    m.textContent = msg;
    m.className = "message" + (bad ? " bad" : "");
    m.hidden = false;
  }

  function release(key) {
    fetch("api/key?key=" + encodeURIComponent(key), { credentials: "same-origin", cache: "no-store" })
      .then(function (res) { return res.json(); })
      .then(function (k) {
        var holds = [];
        if (k.lock) holds.push(k.lock);
        holds = holds.concat(k.permits || [], k.rw || []);
        if (holds.length === 0) { say(key + " is no longer held.", false); poll(); return; }
        var lines = holds.map(function (h) {
          return "  " + h.kind + " " + h.token + " fence " + h.fence + (h.metadata ? " (" + h.metadata + ")" : "");
        });
        var ok = window.confirm("Force release " + key + "?\n\n" + lines.join("\n") +
          "\n\nThese holds are deleted and the fence is raised: storage that checks fences rejects their late writes. " +
          "Each holder is told (Lost) at its next renewal.");
        if (!ok) { say("Not released: " + key, false); return; }
        return fetch("api/evict", {
          method: "POST",
          credentials: "same-origin",
          headers: { "Content-Type": "application/x-www-form-urlencoded", "X-Latchkey-Token": token },
          body: (function () {
            // Only the holds confirmed: one that took the key since is left be.
            var form = new URLSearchParams({ key: key, confirm: key });
            holds.forEach(function (h) { form.append("token", h.token); });
            return form.toString();
          })()
        }).then(function (res) {
          return res.json().then(function (v) {
            if (!res.ok) throw new Error(v.error || "HTTP " + res.status);
            var msg = "Released " + key + ": " + v.evicted.length + " hold(s) evicted";
            if (v.fence) msg += "; the fence is now " + v.fence;
            say(msg + ". The holders are told at their next renewal.", false);
          });
        });
      })
      .catch(function (e) { say("Release of " + key + " failed: " + e.message, true); })
      .then(poll);
  }

  document.addEventListener("click", function (ev) {
    var b = ev.target.closest && ev.target.closest("button.release");
    if (b && writes) release(b.dataset.key);
  });

  var pause = $("pause");
  pause.hidden = false;
  pause.addEventListener("click", function () {
    paused = !paused;
    pause.textContent = paused ? "Resume" : "Pause";
    setLive(paused ? "paused" : "ok");
    if (!paused) poll(); else clearTimeout(timer);
  });

  var debounce = null;
  $("match").addEventListener("input", function () {
    clearTimeout(debounce);
    debounce = setTimeout(poll, 300);
  });
  $("match").form.addEventListener("submit", function (ev) { ev.preventDefault(); poll(); });

  document.addEventListener("visibilitychange", function () {
    if (!document.hidden && !paused) poll();
  });

  setLive("ok");
  timer = setTimeout(poll, refresh);
})();
