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
    if (!card) return;
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
            (data.override_args ? " with edited args" : "") + (data.signed ? ", signed." : "."));
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

  cards.addEventListener("click", function (ev) {
    var btn = ev.target.closest("button[data-action]");
    if (!btn) return;
    var card = btn.closest(".card");
    var editor = card.querySelector("[data-role=editor]");
    switch (btn.dataset.action) {
      case "approve":
        decide(card, { approve: true });
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
  connect();
})();
