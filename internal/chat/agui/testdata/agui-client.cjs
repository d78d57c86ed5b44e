// Drives toolgate's AG-UI endpoint with @ag-ui/client's HttpAgent, as a chat
// frontend would, and prints what the library parsed as JSON lines.
//
// stdin: {"url": "...", "threads": {"a": {"threadId": "...", "agent": "..."}},
//         "steps": [{"thread": "a", "edit": "text", "user": "text", "tool": {"toolCallId", "content"},
//                    "tools": [{name, description, parameters}] (the tools the frontend declares),
//                    "restore": true (the thread's messages put back as they were before the step),
//                    "resume": [{"toolCallId" | "interruptId" | "seen": toolCallId |
//                                "interruptOf": {"thread", "toolCallId"},
//                                "status", "payload"}]}]}
// stdout, per step i: {"step": i, "event": ev} for every event the agent
// applied, then {"step": i, "end": {"pendingInterrupts", "messages", "result"}}
// or {"step": i, "error": "..."}.
const { HttpAgent } = require("@ag-ui/client");
const { randomUUID } = require("node:crypto");

// seen maps a tool call id to the id of the last interrupt parsed for it.
const seen = {};

function interruptFor(agents, entry, own) {
  if (entry.interruptId) return entry.interruptId;
  if (entry.seen) return seen[entry.seen];
  const ref = entry.interruptOf || { thread: own, toolCallId: entry.toolCallId };
  const found = agents[ref.thread].pendingInterrupts.find((i) => i.toolCallId === ref.toolCallId);
  if (!found) throw new Error(`no pending interrupt for ${ref.toolCallId} on thread ${ref.thread}`);
  return found.id;
}

async function main() {
  let raw = "";
  for await (const chunk of process.stdin) raw += chunk;
  const input = JSON.parse(raw);
  const agents = {};
  for (const [name, t] of Object.entries(input.threads)) {
    agents[name] = new HttpAgent({ url: input.url, threadId: t.threadId, headers: input.headers || {} });
    agents[name].forwardedAgent = t.agent;
  }
  for (const [i, step] of input.steps.entries()) {
    const agent = agents[step.thread];
    const out = (o) => process.stdout.write(JSON.stringify({ step: i, ...o }) + "\n");
    const before = structuredClone(agent.messages);
    try {
      if (step.edit) {
        // Rewrites the thread's first user message, as a tampering client would.
        const first = agent.messages.find((m) => m.role === "user");
        agent.setMessages(agent.messages.map((m) => (m === first ? { ...m, content: step.edit } : m)));
      }
      if (step.user) agent.addMessage({ id: randomUUID(), role: "user", content: step.user });
      if (step.tool) agent.addMessage({ id: randomUUID(), role: "tool", toolCallId: step.tool.toolCallId, content: step.tool.content });
      const params = { forwardedProps: agent.forwardedAgent ? { agent: agent.forwardedAgent } : {} };
      if (step.tools) params.tools = step.tools;
      if (step.resume) {
        params.resume = step.resume.map((e) => {
          const entry = { interruptId: interruptFor(agents, e, step.thread), status: e.status };
          if (e.payload !== undefined) entry.payload = e.payload;
          return entry;
        });
      }
      const onEvent = ({ event }) => {
        out({ event });
        for (const it of (event.outcome && event.outcome.interrupts) || []) seen[it.toolCallId] = it.id;
      };
      const res = await agent.runAgent(params, { onEvent });
      out({ end: { pendingInterrupts: agent.pendingInterrupts, messages: agent.messages, result: res.result } });
    } catch (err) {
      out({ error: String(err && err.message ? err.message : err) });
    }
    if (step.restore) agent.setMessages(before);
  }
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
