// Drives one AG-UI thread with @ag-ui/client's HttpAgent and cuts its first
// run's connection mid-run, as a dropped network would: the client keeps
// the SSE id of the last event it applied (read beside the library's own
// parse, by a fetch wrapper: the library ignores ids), and reconnects by
// sending the run's input again with that id as Last-Event-ID. Then it
// sends a new prompt on the thread. Prints what the library parsed.
//
// stdin: {"url", "threadId", "prompt", "cutAfter": n (the run is cut at its
//         n-th event, which the client does not apply), "next": "prompt"}
// stdout: {"phase": "cut"|"reconnect"|"next", "event": ev} for every event
//         applied; {"phase", "end": {"messages", "result", "lastEventId"}}
//         or {"phase", "error": "..."}.
const { HttpAgent } = require("@ag-ui/client");
const { randomUUID } = require("node:crypto");

// ids holds the SSE id each data event of the current response carries (or
// inherits: an event without one keeps the last, as in EventSource), in
// order: the n-th event the library parses is ids[n-1].
let ids = [];
// lastEventId, when set, goes with the next request as Last-Event-ID.
let lastEventId;

function trackingFetch(url, init) {
  const headers = { ...init.headers };
  if (lastEventId) headers["Last-Event-ID"] = lastEventId;
  ids = [];
  return fetch(url, { ...init, headers }).then((res) => {
    if (!res.body) return res;
    const decoder = new TextDecoder();
    let buf = "";
    let current;
    const scan = new TransformStream({
      transform(chunk, controller) {
        buf += decoder.decode(chunk, { stream: true });
        let at;
        while ((at = buf.indexOf("\n\n")) >= 0) {
          const block = buf.slice(0, at);
          buf = buf.slice(at + 2);
          let data = false;
          for (const l of block.split("\n")) {
            if (l.startsWith("id:")) current = l.slice(3).trim();
            if (l.startsWith("data:")) data = true;
          }
          if (data) ids.push(current);
        }
        controller.enqueue(chunk);
      },
    });
    return new Response(res.body.pipeThrough(scan), { status: res.status, statusText: res.statusText, headers: res.headers });
  });
}

async function main() {
  let raw = "";
  for await (const chunk of process.stdin) raw += chunk;
  const input = JSON.parse(raw);
  const agent = new HttpAgent({ url: input.url, threadId: input.threadId, fetch: trackingFetch });
  const out = (o) => process.stdout.write(JSON.stringify(o) + "\n");
  const runId = randomUUID();

  const run = async (phase, params, cutAfter) => {
    let n = 0;
    let cut = false;
    const onEvent = ({ event }) => {
      n++;
      if (cut) return { stopPropagation: true };
      if (n === cutAfter) {
        // The connection drops before this event reaches the client: it
        // has the ones before, and their last id.
        cut = true;
        lastEventId = ids[n - 2];
        agent.abortRun();
        return { stopPropagation: true };
      }
      out({ phase, event });
      return undefined;
    };
    try {
      const res = await agent.runAgent({ ...params, abortController: new AbortController() }, { onEvent });
      out({ phase, end: { messages: agent.messages, result: res.result, lastEventId } });
    } catch (err) {
      out({ phase, error: String(err && err.message ? err.message : err) });
    }
  };

  agent.addMessage({ id: randomUUID(), role: "user", content: input.prompt });
  await run("cut", { runId }, input.cutAfter);
  // The same run's input again, with the id of the last event applied.
  await run("reconnect", { runId });
  lastEventId = undefined;
  agent.addMessage({ id: randomUUID(), role: "user", content: input.next });
  await run("next", {});
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
