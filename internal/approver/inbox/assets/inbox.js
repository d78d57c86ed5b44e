// The approval inbox: keeps the list in step with the server's event
// stream and sends decisions. No framework, no build step.
(function () {
  "use strict";
  var cards = document.getElementById("cards");
  var tmpl = document.getElementById("card-template");
  var empty = document.getElementById("empty");
  var count = document.getElementById("count");
  var live = document.getElementById("live");
  var flash = document.getElementById("flash");

  function byKey(key) {
    for (var i = 0; i < cards.children.length; i++) {
      if (cards.children[i].dataset.key === key) return cards.children[i];
    }
    return null;
  }

  function refreshCount() {
    var n = cards.querySelectorAll(".card").length;
    count.textContent = String(n);
    empty.hidden = n !== 0;
    document.title = (n ? "(" + n + ") " : "") + "Approval inbox · toolgate";
  }

  function fill(card, item) {
    card.dataset.key = item.key;
    card.id = "call-" + item.key;
    card.dataset.run = item.run_id;
    card.dataset.call = item.tool_call_id;
    card.dataset.deadline = item.deadline || "";
    card.dataset.received = item.received || "";
    card.querySelectorAll("[data-field]").forEach(function (el) {
      var v = item[el.dataset.field];
      el.textContent = v === undefined || v === null ? "" : String(v);
    });
    var link = card.querySelector("[data-link=conversation]");
    link.href = "/conversations/" + encodeURIComponent(item.conversation_id);
    card.querySelector("[data-role=args]").value = item.args_text || "";
    card.querySelector("[data-role=grant-caller-label]").hidden = !item.caller_id;
    hideEmpty(card);
  }

  // Paragraphs with nothing to say take no room.
  function hideEmpty(card) {
    card.querySelectorAll("p[data-field], details.meta").forEach(function (el) {
      var text = el.tagName === "DETAILS" ? el.querySelector("pre").textContent : el.textContent;
      el.hidden = text.trim() === "";
    });
  }

  function add(item) {
    if (byKey(item.key)) return;
    var card = tmpl.content.firstElementChild.cloneNode(true);
    fill(card, item);
    card.classList.add("new");
    cards.appendChild(card);
    tick();
    refreshCount();
  }

  function remove(key, reason) {
    var card = byKey(key);
    if (!card) {
      // A decision sent from here whose outcome came late.
      if (reason && reason.indexOf("not applied") === 0) say(reason.charAt(0).toUpperCase() + reason.slice(1) + ".", true);
      return;
    }
    card.remove();
    refreshCount();
    if (reason && reason.indexOf(" here") < 0) {
      say(card.querySelector("[data-field=tool_name]").textContent + " (" + card.dataset.call + ") left the inbox: " + reason.replace("settled:", "settled, "));
    }
  }

  function snapshot(items) {
    var keep = {};
    items.forEach(function (it) { keep[it.key] = true; });
    Array.prototype.slice.call(cards.querySelectorAll(".card")).forEach(function (c) {
      if (!keep[c.dataset.key]) c.remove();
    });
    items.forEach(add);
    refreshCount();
  }

  function say(text, bad) {
    flash.textContent = text;
    flash.className = bad ? "flash bad" : "flash";
    flash.hidden = false;
  }

  function span(ms) {
    var s = Math.max(0, Math.floor(ms / 1000));
    if (s < 60) return s + "s";
    var m = Math.floor(s / 60);
    if (m < 60) return m + "m " + (s % 60) + "s";
    var h = Math.floor(m / 60);
    if (h < 48) return h + "h " + (m % 60) + "m";
    return Math.floor(h / 24) + "d " + (h % 24) + "h";
  }

  function tick() {
    var now = Date.now();
    cards.querySelectorAll(".card").forEach(function (card) {
      var rec = Date.parse(card.dataset.received);
      card.querySelector("[data-role=age]").textContent = isNaN(rec) ? "" : "waiting " + span(now - rec);
      var dl = Date.parse(card.dataset.deadline);
      var cd = card.querySelector("[data-role=countdown]");
      if (isNaN(dl)) {
        cd.textContent = " · no deadline";
      } else if (dl <= now) {
        cd.textContent = " · expired";
        card.classList.add("expired");
      } else {
        cd.textContent = " · expires in " + span(dl - now);
        card.classList.toggle("soon", dl - now < 60000);
      }
    });
  }

  function showErrors(card, problems) {
    var ul = card.querySelector("[data-role=errors]");
    ul.innerHTML = "";
    problems.forEach(function (p) {
      var li = document.createElement("li");
      li.textContent = p;
      ul.appendChild(li);
    });
    ul.hidden = problems.length === 0;
  }

  function busy(card, on) {
    card.querySelectorAll("button").forEach(function (b) { b.disabled = on; });
    card.classList.toggle("busy", on);
  }

  function decide(card, body) {
    body.run_id = card.dataset.run;
    body.tool_call_id = card.dataset.call;
    busy(card, true);
    showErrors(card, []);
    return fetch("/api/decide", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      credentials: "same-origin",
      body: JSON.stringify(body)
    }).then(function (resp) {
      return resp.json().catch(function () { return {}; }).then(function (data) {
        busy(card, false);
        if (resp.ok) {
          var tool = card.querySelector("[data-field=tool_name]").textContent;
          say((data.approved ? "Approved " : "Denied ") + tool + " (" + card.dataset.call + ")" +
            (data.override_args ? " with edited args" : "") + (data.signed ? ", signed" : "") +
            (data.pending ? "; sent, not applied yet: the card comes back if the orchestrator does not apply it." : "."));
          card.remove();
          refreshCount();
          return;
        }
        showErrors(card, data.problems && data.problems.length ? data.problems : [data.error || ("HTTP " + resp.status)]);
      });
    }).catch(function (err) {
      busy(card, false);
      showErrors(card, ["Could not reach the inbox: " + err]);
    });
  }

  // Approve the card's call and give a grant for the later ones.
  function grant(card) {
    var body = {
      run_id: card.dataset.run,
      tool_call_id: card.dataset.call,
      conversation: card.querySelector("[data-role=grant-conversation]").checked,
      args: card.querySelector("[data-role=grant-args]").checked,
      caller: card.querySelector("[data-role=grant-caller]").checked,
      "for": card.querySelector("[data-role=grant-for]").value
    };
    busy(card, true);
    showErrors(card, []);
    return fetch("/api/grants", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      credentials: "same-origin",
      body: JSON.stringify(body)
    }).then(function (resp) {
      return resp.json().catch(function () { return {}; }).then(function (data) {
        busy(card, false);
        if (data.grant) loadGrants();
        if (resp.ok) {
          var tool = card.querySelector("[data-field=tool_name]").textContent;
          say("Approved " + tool + " (" + card.dataset.call + ") and always allowed it " + scopeText(data.grant) +
            (data.decision && data.decision.signed ? ", signed." : "."));
          card.remove();
          refreshCount();
          return;
        }
        showErrors(card, [data.error || ("HTTP " + resp.status)]);
      });
    }).catch(function (err) {
      busy(card, false);
      showErrors(card, ["Could not reach the inbox: " + err]);
    });
  }

  function scopeText(g) {
    var parts = [];
    if (g.conversation_id) parts.push("in conversation " + g.conversation_id);
    if (g.args_digest) parts.push("with these args");
    if (g.caller) parts.push("for caller " + g.caller);
    if (!parts.length) parts.push("for every call");
    return parts.join(", ") + (g.expires_at ? " until " + new Date(g.expires_at).toLocaleString() : " until revoked");
  }

  var grants = document.getElementById("grants");
  var grantsEmpty = document.getElementById("grants-empty");

  // Each load is numbered: the answer of an older one, read before a
  // grant was given or revoked, must not overwrite a newer one's.
  var grantsLoads = 0;
  var grantsShown = null;

  function loadGrants() {
    var seq = ++grantsLoads;
    return fetch("/api/grants", { credentials: "same-origin" }).then(function (resp) {
      return resp.json().then(function (data) {
        if (seq !== grantsLoads) return;
        if (!resp.ok) throw new Error(data.error || ("HTTP " + resp.status));
        // Unchanged: the rows (and a button being clicked) stay.
        var text = JSON.stringify(data.grants || []);
        if (text === grantsShown) return;
        grantsShown = text;
        var body = grants.querySelector("tbody");
        body.innerHTML = "";
        (data.grants || []).forEach(function (g) {
          var tr = document.createElement("tr");
          tr.dataset.grant = g.id;
          if (g.expired || g.ignored) tr.className = "expired";
          var scope = scopeText(g);
          [g.tool, (g.approved ? "approve" : "deny") + (g.ignored ? " (not applied: " + g.ignored + ")" : ""), scope.replace(/ until .*$/, ""),
            g.expires_at ? (g.expired ? "expired " : "") + new Date(g.expires_at).toLocaleString() : "revoked",
            g.granted_by].forEach(function (text) {
            var td = document.createElement("td");
            td.textContent = text;
            tr.appendChild(td);
          });
          var td = document.createElement("td");
          var btn = document.createElement("button");
          btn.type = "button";
          btn.dataset.action = "revoke";
          btn.textContent = "Revoke";
          td.appendChild(btn);
          tr.appendChild(td);
          body.appendChild(tr);
        });
        grants.hidden = !body.children.length;
        grantsEmpty.hidden = !grants.hidden;
      });
    }).catch(function (err) {
      say("Could not list the grants: " + err.message, true);
    });
  }

  grants.addEventListener("click", function (ev) {
    var btn = ev.target.closest("button[data-action=revoke]");
    if (!btn) return;
    var tr = btn.closest("tr");
    btn.disabled = true;
    fetch("/api/grants/" + encodeURIComponent(tr.dataset.grant), { method: "DELETE", credentials: "same-origin" })
      .then(function (resp) {
        if (resp.ok) {
          say("Revoked the grant for " + tr.firstChild.textContent + ": its calls are asked about again.");
          return loadGrants();
        }
        return resp.json().catch(function () { return {}; }).then(function (data) {
          btn.disabled = false;
          say("Not revoked: " + (data.error || ("HTTP " + resp.status)), true);
        });
      });
  });

  cards.addEventListener("click", function (ev) {
    var btn = ev.target.closest("button[data-action]");
    if (!btn) return;
    var card = btn.closest(".card");
    var editor = card.querySelector("[data-role=editor]");
    switch (btn.dataset.action) {
      case "approve":
        decide(card, { approve: true });
        break;
      case "grant":
        grant(card);
        break;
      case "deny":
        decide(card, { approve: false, message: card.querySelector("[data-role=message]").value });
        break;
      case "edit":
        editor.hidden = false;
        card.querySelector("[data-role=args]").focus();
        break;
      case "cancel-edit":
        editor.hidden = true;
        showErrors(card, []);
        break;
      case "approve-edited":
        var text = card.querySelector("[data-role=args]").value;
        try {
          var v = JSON.parse(text);
          if (v === null || typeof v !== "object" || Array.isArray(v)) {
            showErrors(card, ["Arguments must be a JSON object."]);
            return;
          }
        } catch (e) {
          showErrors(card, ["Not valid JSON: " + e.message]);
          return;
        }
        decide(card, { approve: true, args: text });
        break;
    }
  });

  function connect() {
    var es = new EventSource("/events");
    es.addEventListener("open", function () {
      live.dataset.state = "live";
      live.textContent = "live";
    });
    es.addEventListener("error", function () {
      live.dataset.state = "down";
      live.textContent = "reconnecting…";
    });
    es.addEventListener("snapshot", function (e) { snapshot(JSON.parse(e.data)); });
    es.addEventListener("add", function (e) { add(JSON.parse(e.data)); });
    es.addEventListener("remove", function (e) {
      var d = JSON.parse(e.data);
      remove(d.key, d.reason);
    });
  }

  cards.querySelectorAll(".card").forEach(hideEmpty);
  refreshCount();
  tick();
  setInterval(tick, 1000);
  loadGrants();
  // Grants given or revoked elsewhere (another inbox, the CLI, the API).
  setInterval(loadGrants, 15000);
  connect();
})();
