// The toolgate chat page: an AG-UI 1.0 client in plain JavaScript. Each
// turn is a POST of a RunAgentInput to /v1/agui whose answer, a stream of
// Server-Sent Events, is read from the fetch body (EventSource cannot POST).
// The history sent is what the server streamed, as an AG-UI client keeps
// it: the server holds it against its own log and refuses an edited one.
"use strict";

(() => {
  const endpoint = "/v1/agui";
  const tokenKey = "toolgate.chat.token";

  const $ = (id) => document.getElementById(id);
  const log = $("log"), prompt = $("prompt"), send = $("send"), stopButton = $("stop"), status = $("status");
  // Stop needs the conversation's id, a SHA-256 of the thread's: only a
  // secure context (https, localhost) has crypto.subtle.
  const canStop = !!(window.crypto && crypto.subtle);

  // The agent, when the orchestrator has several: /chat?agent=NAME.
  const agent = new URLSearchParams(location.search).get("agent") || "";

  const state = {
    threadId: "",
    messages: [], // the AG-UI history, as the server streamed it
    calls: new Map(), // tool call id -> {name, tc (the history's tool call), el, decision}
    busy: false,
    interrupts: [], // open interrupts of the last run
    decisions: new Map(), // interrupt id -> resume entry
  };

  const uid = () => (crypto.randomUUID ? crypto.randomUUID() : String(Date.now()) + Math.random().toString(16).slice(2));

  function newThread() {
    state.threadId = "chat-" + uid();
    state.messages = [];
    state.calls.clear();
    state.interrupts = [];
    state.decisions.clear();
    $("thread").textContent = state.threadId;
    log.replaceChildren($("empty") || emptyNote());
    $("empty").hidden = false;
    setBusy(false, "idle");
  }

  function emptyNote() {
    const p = el("p", "empty", "Ask something.");
    p.id = "empty";
    return p;
  }

  // --- DOM helpers -------------------------------------------------------

  function el(tag, cls, text) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  }

  function append(node) {
    const empty = $("empty");
    if (empty) empty.hidden = true;
    log.appendChild(node);
    node.scrollIntoView({ block: "end" });
    return node;
  }

  function pretty(json) {
    try {
      return JSON.stringify(JSON.parse(json === "" ? "{}" : json), null, 2);
    } catch {
      return json;
    }
  }

  function setBusy(busy, label) {
    state.busy = busy;
    status.dataset.state = label;
    status.textContent = label;
    const waiting = state.interrupts.length > 0;
    send.disabled = busy || waiting;
    stopButton.hidden = !canStop || !(label === "running" || waiting);
    stopButton.disabled = false;
    prompt.placeholder = waiting
      ? "Answer the approval above first"
      : "Message the agent (Enter sends, Shift+Enter for a new line)";
  }

  function notice(text, cls) {
    return append(el("div", "notice " + (cls || ""), text));
  }

  // --- Server-Sent Events over fetch --------------------------------------

  // events yields the JSON of each event's data in the text/event-stream
  // body; other fields are skipped, and comments (the server's keep-alives
  // while a run waits) counted on the status, which shows the stream lives.
  async function* events(body) {
    const reader = body.pipeThrough(new TextDecoderStream()).getReader();
    let buf = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buf += value.replace(/\r\n?/g, "\n");
      let end;
      while ((end = buf.indexOf("\n\n")) >= 0) {
        const block = buf.slice(0, end);
        buf = buf.slice(end + 2);
        const data = [];
        for (const line of block.split("\n")) {
          if (line.startsWith("data:")) data.push(line.slice(line.startsWith("data: ") ? 6 : 5));
          else if (line.startsWith(":")) status.dataset.keepalives = String(Number(status.dataset.keepalives || 0) + 1);
        }
        if (data.length) yield JSON.parse(data.join("\n"));
      }
    }
  }

  // --- The token ----------------------------------------------------------

  function askToken(wrong) {
    const dlg = $("token-dialog"), input = $("token"), err = $("token-error");
    err.hidden = !wrong;
    err.textContent = wrong ? "The API refused that token." : "";
    input.value = "";
    return new Promise((resolve, reject) => {
      const form = $("token-form");
      const done = (ev) => {
        ev.preventDefault();
        const t = input.value.trim();
        if (!t) return;
        form.removeEventListener("submit", done);
        dlg.oncancel = null;
        dlg.close();
        sessionStorage.setItem(tokenKey, t);
        resolve(t);
      };
      form.addEventListener("submit", done);
      // Escape: no token, no request; the turn ends with the error.
      dlg.oncancel = () => {
        form.removeEventListener("submit", done);
        dlg.oncancel = null;
        reject(new Error("the API needs a token"));
      };
      dlg.showModal();
      input.focus();
    });
  }

  function authHeaders() {
    const token = sessionStorage.getItem(tokenKey);
    return token ? { Authorization: "Bearer " + token } : {};
  }

  // conversationId is the conversation of the thread, as the AG-UI
  // endpoint derives it (agui.ConversationID).
  async function conversationId() {
    const data = new TextEncoder().encode("agui-thread\u0000" + state.threadId);
    const sum = new Uint8Array(await crypto.subtle.digest("SHA-256", data));
    return "c" + [...sum.slice(0, 12)].map((b) => b.toString(16).padStart(2, "0")).join("");
  }

  // stop cancels the conversation: a run streaming ends with the cancelled
  // outcome; approvals waiting are withdrawn.
  async function stop() {
    stopButton.disabled = true;
    const waiting = !state.busy;
    try {
      const resp = await fetch("/v1/conversations/" + (await conversationId()) + "/cancel", { method: "POST", headers: authHeaders() });
      if (!resp.ok) {
        let msg = "HTTP " + resp.status;
        try {
          msg += ": " + (await resp.json()).error;
        } catch {}
        throw new Error(msg);
      }
    } catch (e) {
      notice("Stop: " + e.message, "error");
      stopButton.disabled = false;
      return;
    }
    if (waiting) {
      for (const card of log.querySelectorAll("article.approval:not(.decided)")) {
        for (const b of card.querySelectorAll("button, input, textarea")) b.disabled = true;
        card.classList.add("decided");
      }
      state.interrupts = [];
      notice("The conversation was cancelled.", "muted cancelled");
      setBusy(false, "cancelled");
    }
  }

  async function post(body) {
    let asked = false;
    for (;;) {
      const token = sessionStorage.getItem(tokenKey);
      const headers = { "Content-Type": "application/json", Accept: "text/event-stream", ...authHeaders() };
      const resp = await fetch(endpoint, { method: "POST", headers, body: JSON.stringify(body) });
      if (resp.status !== 401) return resp;
      sessionStorage.removeItem(tokenKey);
      await askToken(asked || !!token);
      asked = true;
    }
  }

  // --- Runs -----------------------------------------------------------------

  // run sends one RunAgentInput: the history, what this turn adds (a user
  // message, tool messages) and the resume entries, then renders its events.
  async function run({ text, toolMessages = [], resume = [] }) {
    const added = [];
    if (text) added.push({ id: uid(), role: "user", content: text });
    added.push(...toolMessages);
    const input = {
      threadId: state.threadId,
      runId: uid(),
      state: {},
      messages: state.messages.concat(added),
      tools: frontendTools.map(({ name, description, parameters }) => ({ name, description, parameters })),
      context: [],
      forwardedProps: agent ? { agent } : {},
    };
    if (resume.length) input.resume = resume;
    if (text) userBubble(text);
    state.interrupts = [];
    state.decisions.clear();
    setBusy(true, "sending");
    let finished = null;
    try {
      const resp = await post(input);
      if (!resp.ok || !resp.body) {
        let msg = "HTTP " + resp.status;
        try {
          msg += ": " + (await resp.json()).error;
        } catch {}
        throw new Error(msg);
      }
      const view = { text: new Map() };
      for await (const ev of events(resp.body)) {
        if (ev.type === "RUN_STARTED") {
          state.messages.push(...added);
          setBusy(true, "running");
        }
        if (ev.type === "RUN_FINISHED" || ev.type === "RUN_ERROR") finished = ev;
        apply(ev, view);
      }
      if (!finished) throw new Error("the stream ended before the run finished");
    } catch (e) {
      notice("Error: " + e.message, "error");
      setBusy(false, "error");
      return;
    }
    await settle(finished);
  }

  // apply renders one event and keeps the history as an AG-UI client does.
  function apply(ev, view) {
    switch (ev.type) {
      case "TEXT_MESSAGE_START": {
        const m = { id: ev.messageId, role: "assistant", content: "" };
        if (!message(ev.messageId)) state.messages.push(m);
        const b = append(el("div", "msg msg-assistant"));
        const bubble = b.appendChild(el("div", "bubble streaming", ""));
        bubble.dataset.message = ev.messageId;
        bubble.dataset.deltas = "0";
        view.text.set(ev.messageId, bubble);
        break;
      }
      case "TEXT_MESSAGE_CONTENT": {
        const m = message(ev.messageId);
        if (m) m.content += ev.delta;
        const bubble = view.text.get(ev.messageId);
        if (bubble) {
          bubble.textContent += ev.delta;
          bubble.dataset.deltas = String(Number(bubble.dataset.deltas) + 1);
          bubble.scrollIntoView({ block: "end" });
        }
        break;
      }
      case "TEXT_MESSAGE_END": {
        const bubble = view.text.get(ev.messageId);
        if (bubble) bubble.classList.remove("streaming");
        break;
      }
      case "TOOL_CALL_START": {
        let m = ev.parentMessageId && message(ev.parentMessageId);
        if (!m) {
          m = { id: ev.parentMessageId || uid(), role: "assistant", content: "" };
          state.messages.push(m);
        }
        m.toolCalls = m.toolCalls || [];
        const tc = { id: ev.toolCallId, type: "function", function: { name: ev.toolCallName, arguments: "" } };
        m.toolCalls.push(tc);
        state.calls.set(ev.toolCallId, { name: ev.toolCallName, tc, el: toolCard(ev.toolCallId, ev.toolCallName) });
        break;
      }
      case "TOOL_CALL_ARGS": {
        const c = state.calls.get(ev.toolCallId);
        if (c) {
          c.tc.function.arguments += ev.delta;
          c.el.querySelector("[data-field=args]").textContent = c.tc.function.arguments;
        }
        break;
      }
      case "TOOL_CALL_END": {
        const c = state.calls.get(ev.toolCallId);
        if (c) c.el.querySelector("[data-field=args]").textContent = pretty(c.tc.function.arguments);
        break;
      }
      case "TOOL_CALL_RESULT": {
        state.messages.push({ id: ev.messageId, role: "tool", content: ev.content, toolCallId: ev.toolCallId });
        const c = state.calls.get(ev.toolCallId);
        // The page's own answer keeps its label; a denial says so.
        if (c && !c.el.classList.contains("frontend")) showResult(c.el, ev.content, c.decision === "denied" ? "denied" : "done");
        break;
      }
      case "RUN_ERROR":
        notice(ev.message + (ev.code ? " (" + ev.code + ")" : ""), "error run-error");
        break;
    }
  }

  function message(id) {
    return state.messages.find((m) => m.id === id);
  }

  // settle acts on how a run ended: approval cards for its interrupts, the
  // page's own tools for the calls left to the frontend.
  async function settle(ev) {
    if (ev.type === "RUN_ERROR") {
      setBusy(false, "error");
      return;
    }
    const out = ev.outcome || { type: "success" };
    if (out.type === "interrupt") {
      state.interrupts = out.interrupts || [];
      state.interrupts.forEach(approvalCard);
      setBusy(false, "waiting");
      return;
    }
    if (out.type === "cancelled") {
      notice("The conversation was cancelled.", "muted cancelled");
      setBusy(false, "cancelled");
      return;
    }
    const pending = out.pendingToolCallIds || [];
    if (pending.length === 0) {
      setBusy(false, "idle");
      prompt.focus();
      return;
    }
    setBusy(true, "answering");
    const answers = [];
    for (const id of pending) {
      const c = state.calls.get(id);
      answers.push({ id: uid(), role: "tool", toolCallId: id, content: await answerCall(id, c) });
    }
    await run({ toolMessages: answers });
  }

  // --- Frontend tools -------------------------------------------------------

  // The tools this page answers, declared in each RunAgentInput. A call of
  // one the agent config marks `executor: frontend` waits for the page.
  const frontendTools = [
    {
      name: "local_time",
      description: "The user's local date, time and time zone, from their browser.",
      parameters: { type: "object", properties: {}, additionalProperties: false },
      run: async () => {
        const now = new Date();
        return {
          local_time: now.toLocaleString(undefined, { dateStyle: "full", timeStyle: "long" }),
          iso: now.toISOString(),
          time_zone: Intl.DateTimeFormat().resolvedOptions().timeZone,
          utc_offset_minutes: -now.getTimezoneOffset(),
        };
      },
    },
    {
      name: "confirm",
      description: "Ask the user a yes/no question in a dialog; returns whether they confirmed.",
      parameters: {
        type: "object",
        properties: { message: { type: "string", description: "The question to ask." } },
        required: ["message"],
      },
      run: (args) => confirmDialog(String(args.message || args.question || "Continue?")).then((confirmed) => ({ confirmed })),
    },
  ];

  // answerCall runs the page's tool for a call and returns the tool
  // message's content: the value as JSON, or a failure the model reads.
  async function answerCall(id, c) {
    const tool = c && frontendTools.find((t) => t.name === c.name);
    let content;
    if (!tool) {
      content = JSON.stringify({ kind: "tool-failed", message: "this page has no tool " + (c ? c.name : id) });
    } else {
      let args = {};
      try {
        args = JSON.parse(c.tc.function.arguments || "{}");
      } catch {}
      try {
        content = JSON.stringify(await tool.run(args));
      } catch (e) {
        content = JSON.stringify({ kind: "tool-failed", message: String(e && e.message ? e.message : e) });
      }
    }
    if (c) {
      c.el.classList.add("frontend");
      showResult(c.el, content, "answered by this page");
    }
    return content;
  }

  function confirmDialog(text) {
    const dlg = $("confirm-dialog");
    $("confirm-message").textContent = text;
    return new Promise((resolve) => {
      const answer = (yes) => () => {
        $("confirm-yes").onclick = $("confirm-no").onclick = dlg.oncancel = null;
        dlg.close();
        resolve(yes);
      };
      $("confirm-yes").onclick = answer(true);
      $("confirm-no").onclick = answer(false);
      dlg.oncancel = answer(false);
      dlg.showModal();
    });
  }

  // --- Cards ----------------------------------------------------------------

  function userBubble(text) {
    const m = append(el("div", "msg msg-user"));
    m.appendChild(el("div", "bubble", text));
  }

  function toolCard(id, name) {
    const card = append(el("article", "tool"));
    card.dataset.call = id;
    const head = card.appendChild(el("header"));
    head.appendChild(el("span", "label", "tool call"));
    head.appendChild(el("code", "name", name));
    head.appendChild(el("span", "state", "called")).dataset.field = "state";
    card.appendChild(el("pre", "json", "")).dataset.field = "args";
    return card;
  }

  function showResult(card, content, label) {
    let r = card.querySelector("[data-field=result]");
    if (!r) {
      r = card.appendChild(el("pre", "json result"));
      r.dataset.field = "result";
    }
    r.textContent = pretty(content);
    r.classList.toggle("denied", label === "denied");
    card.querySelector("[data-field=state]").textContent = label;
  }

  function approvalCard(it) {
    const c = state.calls.get(it.toolCallId);
    const card = append(el("article", "approval"));
    card.dataset.call = it.toolCallId;
    card.dataset.interrupt = it.id;
    const head = card.appendChild(el("header"));
    head.appendChild(el("span", "label", "approval needed"));
    head.appendChild(el("code", "name", c ? c.name : it.toolCallId));
    if (it.expiresAt) {
      const when = new Date(it.expiresAt);
      head.appendChild(el("span", "expires", "until " + when.toLocaleTimeString()));
    }
    if (it.message) card.appendChild(el("p", "question", it.message));
    if (it.metadata && it.metadata.reason) card.appendChild(el("p", "reason", "Reason: " + it.metadata.reason)).dataset.field = "reason";
    const args = c ? pretty(c.tc.function.arguments) : "{}";

    const editor = card.appendChild(el("div", "editor"));
    editor.hidden = true;
    editor.appendChild(el("label", "", "Args to run it with (JSON, replaces the model's)"));
    const area = editor.appendChild(el("textarea"));
    area.dataset.role = "args";
    area.rows = Math.min(12, args.split("\n").length + 1);
    area.value = args;
    const editErr = editor.appendChild(el("p", "error", ""));
    editErr.hidden = true;

    const actions = card.appendChild(el("div", "actions"));
    const button = (label, action, cls) => {
      const b = actions.appendChild(el("button", cls, label));
      b.type = "button";
      b.dataset.action = action;
      return b;
    };
    const approve = button("Approve", "approve", "approve");
    const edit = button("Edit args", "edit", "");
    const approveEdited = button("Approve edited", "approve-edited", "approve");
    approveEdited.hidden = true;
    const denyGroup = actions.appendChild(el("span", "deny-group"));
    const reason = denyGroup.appendChild(el("input", "deny-message"));
    reason.placeholder = "Why not? (told to the model)";
    reason.dataset.role = "message";
    const deny = denyGroup.appendChild(el("button", "deny", "Deny"));
    deny.type = "button";
    deny.dataset.action = "deny";

    const decide = (payload, label) => {
      for (const b of card.querySelectorAll("button, input, textarea")) b.disabled = true;
      card.classList.add("decided");
      editor.hidden = true;
      if (payload.editedArgs) card.insertBefore(el("pre", "json", JSON.stringify(payload.editedArgs, null, 2)), actions).dataset.field = "edited";
      card.dataset.decision = label;
      actions.replaceChildren(el("span", "verdict", label));
      if (c) c.decision = payload.approved ? "approved" : "denied";
      state.decisions.set(it.id, { interruptId: it.id, status: "resolved", payload });
      if (state.interrupts.every((i) => state.decisions.has(i.id))) {
        const resume = state.interrupts.map((i) => state.decisions.get(i.id));
        state.interrupts = [];
        run({ resume });
      }
    };
    approve.onclick = () => decide({ approved: true }, "approved");
    edit.onclick = () => {
      editor.hidden = false;
      approveEdited.hidden = false;
      edit.hidden = true;
      area.focus();
    };
    approveEdited.onclick = () => {
      let edited;
      try {
        edited = JSON.parse(area.value);
      } catch (e) {
        editErr.textContent = "Not JSON: " + e.message;
        editErr.hidden = false;
        return;
      }
      if (edited === null || typeof edited !== "object" || Array.isArray(edited)) {
        editErr.textContent = "The args must be a JSON object.";
        editErr.hidden = false;
        return;
      }
      decide({ approved: true, editedArgs: edited }, "approved with edited args");
    };
    deny.onclick = () => {
      const msg = reason.value.trim();
      decide(msg ? { approved: false, message: msg } : { approved: false }, msg ? "denied: " + msg : "denied");
    };
  }

  // --- Start ------------------------------------------------------------------

  $("composer").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const text = prompt.value.trim();
    if (!text || send.disabled) return;
    prompt.value = "";
    run({ text });
  });
  prompt.addEventListener("keydown", (ev) => {
    if (ev.key === "Enter" && !ev.shiftKey && !ev.isComposing) {
      ev.preventDefault();
      $("composer").requestSubmit();
    }
  });
  stopButton.addEventListener("click", stop);
  $("new-chat").addEventListener("click", () => {
    if (!state.busy) newThread();
  });

  newThread();
  prompt.focus();
  document.body.dataset.ready = "true";
})();
