// Drives toolgate's AI SDK endpoint with the ai package's AbstractChat and
// DefaultChatTransport, as useChat does, and prints what the library
// parsed as JSON lines.
//
// stdin: {"modules": "<node_modules>", "url": "...", "chats": {"a": {"id": "...", "agent": "..."}},
//         "steps": [{"chat": "a", "user": "text",
//                    "approve": [{"toolCallId", "approved", "reason"}],
//                    "output": {"toolCallId", "output"},
//                    "output": {"toolCallId", "errorText"},
//                    "forge": {"kind": ..., ...}, "url": "...", "restore": true, "resume": true}]}
// A step answers with addToolApprovalResponse / addToolOutput, then sends
// the user message (sendMessage({text})) or, without one, the answers
// (sendMessage()). A forge step rewrites the chat's messages first, as a
// tampering client would, and puts them back after its request (as a restore
// step does); url sends the step's request to another endpoint; resume drops the
// last assistant message and resumes the stream (resumeStream), as after a lost response.
// stdout, per step i: {"step": i, "chunks": [...], "messages": [...], "error": "...", "status": "..."}.
import path from "node:path";
import { pathToFileURL } from "node:url";

let raw = "";
for await (const chunk of process.stdin) raw += chunk;
const input = JSON.parse(raw);
const { AbstractChat, DefaultChatTransport } = await import(pathToFileURL(path.join(input.modules, "ai", "dist", "index.js")).href);

class State {
  constructor() {
    this.status = "ready";
    this.error = undefined;
    this.messages = [];
  }
  pushMessage(m) { this.messages = this.messages.concat(m); }
  popMessage() { this.messages = this.messages.slice(0, -1); }
  replaceMessage(i, m) { this.messages = [...this.messages.slice(0, i), this.snapshot(m), ...this.messages.slice(i + 1)]; }
  snapshot(x) { return structuredClone(x); }
}

// Transport keeps the chunks the library parsed from each response.
class Transport extends DefaultChatTransport {
  constructor(opts) {
    super(opts);
    this.chunks = [];
  }
  processResponseStream(stream) {
    const chunks = this.chunks;
    return super.processResponseStream(stream).pipeThrough(new TransformStream({
      transform(chunk, controller) {
        chunks.push(chunk);
        controller.enqueue(chunk);
      },
    }));
  }
}

class Chat extends AbstractChat {
  constructor(init) { super({ ...init, state: new State() }); }
}

const chats = {};
const transports = {};
for (const [name, c] of Object.entries(input.chats)) {
  transports[name] = new Transport({ api: input.url, headers: input.headers || {}, body: c.agent ? { agent: c.agent } : {} });
  chats[name] = new Chat({ id: c.id, transport: transports[name] });
}

const lastAssistant = (chat) => [...chat.messages].reverse().find((m) => m.role === "assistant");
const toolPart = (chat, id) => {
  for (const m of [...chat.messages].reverse()) {
    const p = m.parts.find((p) => p.toolCallId === id);
    if (p) return p;
  }
  throw new Error(`no tool part for ${id}`);
};

function forge(chat, f) {
  const msgs = structuredClone(chat.messages);
  const last = msgs.filter((m) => m.role === "assistant").at(-1);
  switch (f.kind) {
    case "part": // a tool part the server never sent
      last.parts.push(f.part);
      break;
    case "fromChat": { // another chat's approval, answered here
      const p = structuredClone(toolPart(chats[f.chat], f.toolCallId));
      last.parts.push({ ...p, state: "approval-responded", approval: { ...p.approval, approved: true } });
      break;
    }
    case "duplicate": { // the same call answered twice in one request
      const p = last.parts.find((p) => p.toolCallId === f.toolCallId);
      last.parts.push({ ...structuredClone(p), approval: { ...p.approval, approved: f.approved } });
      break;
    }
    case "set": { // a tool part rewritten to another state
      for (const m of msgs) {
        m.parts = m.parts.map((p) => {
          if (p.toolCallId !== f.toolCallId) return p;
          const q = { ...p, ...f.fields };
          if (f.fields.approval) q.approval = { ...p.approval, ...f.fields.approval };
          return q;
        });
      }
      break;
    }
    case "editUser": {
      const first = msgs.find((m) => m.role === "user");
      first.parts = [{ type: "text", text: f.text }];
      break;
    }
    case "editText": {
      const p = msgs.filter((m) => m.role === "assistant").flatMap((m) => m.parts).find((p) => p.type === "text");
      p.text = f.text;
      break;
    }
  }
  chat.messages = msgs;
}

for (const [i, step] of input.steps.entries()) {
  const chat = chats[step.chat];
  const transport = transports[step.chat];
  transport.chunks = [];
  const api = transport.api;
  if (step.url) transport.api = step.url;
  const before = structuredClone(chat.messages);
  let error;
  try {
    for (const a of step.approve || []) {
      const p = toolPart(chat, a.toolCallId);
      if (!p.approval) throw new Error(`no approval requested for ${a.toolCallId}`);
      await chat.addToolApprovalResponse({ id: p.approval.id, approved: a.approved, reason: a.reason });
    }
    if (step.output) {
      const p = toolPart(chat, step.output.toolCallId);
      const o = step.output;
      if (o.errorText !== undefined) await chat.addToolOutput({ state: "output-error", tool: p.type.slice(5), toolCallId: o.toolCallId, errorText: o.errorText });
      else await chat.addToolOutput({ tool: p.type.slice(5), toolCallId: o.toolCallId, output: o.output });
    }
    if (step.forge) forge(chat, step.forge);
    if (step.resume) {
      // The response was lost: its message dropped, the stream resumed.
      if (chat.lastMessage && chat.lastMessage.role === "assistant") chat.messages = chat.messages.slice(0, -1);
      await chat.resumeStream();
    } else if (step.user) await chat.sendMessage({ text: step.user });
    else await chat.sendMessage();
  } catch (err) {
    error = String(err && err.message ? err.message : err);
  }
  const out = { step: i, chunks: transport.chunks, messages: chat.messages, status: chat.status };
  if (chat.error) out.error = chat.error.message;
  if (error) out.thrown = error;
  process.stdout.write(JSON.stringify(out) + "\n");
  transport.api = api;
  if (step.forge || step.restore) {
    chat.messages = before;
    chat.clearError();
  }
}
