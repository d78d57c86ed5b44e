// Drives one chat with the ai package's AbstractChat and a DefaultChatTransport
// made with resumeStreamIsReplay: false, and drops its first response's
// connection mid-run, as a browser's network would (a TypeError "network
// error", after which the chat keeps the message's streaming state): the
// transport keeps the SSE id of the last chunk it passed on (a fetch
// wrapper reads the id lines, which the library ignores) and the chat
// resumes (resumeStream) with it as Last-Event-ID. Then it sends a new
// message. Prints what the library parsed.
//
// stdin: {"modules", "url", "id", "prompt", "cutAfter": n (the connection
//         drops after the n-th chunk, once the chat's message has the text
//         cutText), "cutText", "next": "prompt"}
// stdout: {"phase": "cut"|"resume"|"next", "chunks", "messages", "status", "error"}
import path from "node:path";
import { pathToFileURL } from "node:url";

let raw = "";
for await (const chunk of process.stdin) raw += chunk;
const input = JSON.parse(raw);
const { AbstractChat, DefaultChatTransport } = await import(pathToFileURL(path.join(input.modules, "ai", "dist", "index.js")).href);

// State tells waitFor of each change of the messages.
class State {
  constructor() {
    this.status = "ready";
    this.error = undefined;
    this.messages = [];
    this.waiters = [];
  }
  pushMessage(m) { this.messages = this.messages.concat(m); this.changed(); }
  popMessage() { this.messages = this.messages.slice(0, -1); this.changed(); }
  replaceMessage(i, m) { this.messages = [...this.messages.slice(0, i), this.snapshot(m), ...this.messages.slice(i + 1)]; this.changed(); }
  snapshot(x) { return structuredClone(x); }
  changed() { this.waiters = this.waiters.filter((w) => !w()); }
  // waitFor resolves once pred holds of the messages.
  waitFor(pred) {
    return new Promise((resolve) => {
      const w = () => (pred(this.messages) ? (resolve(), true) : false);
      if (!w()) this.waiters.push(w);
    });
  }
}

const state = new State();

class Chat extends AbstractChat {
  constructor(init) { super({ ...init, state }); }
}

const lastText = (msgs) => {
  const m = msgs.at(-1);
  return m && m.role === "assistant" ? m.parts.filter((p) => p.type === "text").map((p) => p.text).join("") : "";
};

// lastEventId is the id of the last chunk passed on to the library; cutAfter,
// while set, the number of chunks after which the connection drops.
let lastEventId;
let cutAfter = input.cutAfter;

// trackingFetch passes the response on event by event, keeping the last id.
function trackingFetch(url, init) {
  return fetch(url, init).then((res) => {
    if (!res.body || !res.ok) return res;
    const reader = res.body.getReader();
    const decoder = new TextDecoder();
    const encoder = new TextEncoder();
    let buf = "";
    let n = 0;
    const body = new ReadableStream({
      async pull(controller) {
        if (cutAfter !== undefined && n === cutAfter) {
          // Every chunk passed on has reached the chat: the drop loses none.
          cutAfter = undefined;
          await state.waitFor((msgs) => lastText(msgs) === input.cutText);
          await reader.cancel();
          controller.error(new TypeError("network error"));
          return;
        }
        for (;;) {
          const at = buf.indexOf("\n\n");
          if (at >= 0) {
            const block = buf.slice(0, at + 2);
            buf = buf.slice(at + 2);
            let data = false;
            for (const l of block.split("\n")) {
              if (l.startsWith("id:")) lastEventId = l.slice(3).trim();
              if (l.startsWith("data:")) data = true;
            }
            if (data) n++;
            controller.enqueue(encoder.encode(block));
            return;
          }
          const { value, done } = await reader.read();
          if (done) {
            if (buf) controller.enqueue(encoder.encode(buf));
            controller.close();
            return;
          }
          buf += decoder.decode(value, { stream: true });
        }
      },
      cancel(reason) { return reader.cancel(reason); },
    });
    return new Response(body, { status: res.status, statusText: res.statusText, headers: res.headers });
  });
}

const chunks = [];
class Transport extends DefaultChatTransport {
  processResponseStream(stream) {
    return super.processResponseStream(stream).pipeThrough(new TransformStream({
      transform(chunk, controller) {
        chunks.push(chunk);
        controller.enqueue(chunk);
      },
    }));
  }
}

const transport = new Transport({
  api: input.url,
  fetch: trackingFetch,
  resumeStreamIsReplay: false,
  prepareReconnectToStreamRequest: ({ headers }) => ({ headers: { ...headers, "Last-Event-ID": lastEventId } }),
});
const chat = new Chat({ id: input.id, transport });

const out = (phase, thrown) => {
  const o = { phase, chunks: chunks.splice(0), messages: chat.messages, status: chat.status };
  if (chat.error) o.error = chat.error.message;
  if (thrown) o.thrown = String(thrown && thrown.message ? thrown.message : thrown);
  process.stdout.write(JSON.stringify(o) + "\n");
};
const step = async (phase, f) => {
  try {
    await f();
    out(phase);
  } catch (err) {
    out(phase, err);
  }
};

await step("cut", () => chat.sendMessage({ text: input.prompt }));
await step("resume", () => chat.resumeStream());
await step("next", () => chat.sendMessage({ text: input.next }));
