#!/usr/bin/env node
// A native toolgate worker on nats.js: it serves the tools lookup_order and
// refund_order straight from JetStream, without the Go tool-worker.
//
//   NATS_URL=nats://127.0.0.1:4222 NATS_USER=worker-1 NATS_PASSWORD=... node worker.js [--id ID]
//
// What it does for each tool (docs/protocol.md, "Tool-workers"):
// - binds to the durable consumer call_<tool> on TOOLGATE_CALLS, which the
//   orchestrator makes before the tool's first call: until then it waits
//   and looks again (a worker user may not make it);
// - pulls one call at a time, looks it up by its stream sequence first (a
//   call the orchestrator withdrew is gone: it is acked, not run), fails a
//   call past its deadline instead of running it;
// - sends in-progress acks every third of the consumer's ack wait while a
//   call runs;
// - publishes a CallReply to toolgate.reply.<run_id>.call with Nats-Msg-Id
//   <run_id>/<tool_call_id>/result, waits for JetStream's ack, then acks the
//   call;
// - dead-letters a call it cannot decode, and stops the calls of a
//   cancelled run (toolgate.cancel.<run_id>) without a reply.
"use strict";

const { headers } = require("@nats-io/transport-node");
const { jetstream, jetstreamManager, JetStreamApiError, JetStreamApiCodes } = require("@nats-io/jetstream");
const { connectAs, decodeBody, jsonHeaders, sleep } = require("./toolgate");

const STREAM = "TOOLGATE_CALLS";

// A failure the model can correct: it is told the message and may call
// again with other args.
class Retry extends Error {}

// The tools. Each gets the call's args and the call, and returns the value;
// effects are keyed by run_id:tool_call_id, the same on every redelivery.
const refunds = new Map();
const tools = {
  async lookup_order(args) {
    if (typeof args.order_id !== "string" || !/^A-\d+$/.test(args.order_id)) {
      throw new Retry(`order_id must look like A-1234, got ${JSON.stringify(args.order_id)}`);
    }
    const n = Number(args.order_id.slice(2));
    return { order_id: args.order_id, status: n % 2 ? "shipped" : "delivered", total: (n % 500) + 0.5, served_by: "node" };
  },
  async refund_order(args, call) {
    if (typeof args.amount !== "number" || args.amount <= 0) {
      throw new Retry("amount must be a positive number");
    }
    const key = `${call.run_id}:${call.tool_call_id}`;
    if (!refunds.has(key)) refunds.set(key, { refund_id: `rf-${refunds.size + 1}`, order_id: args.order_id, amount: args.amount });
    return { ...refunds.get(key), served_by: "node" };
  },
};

function parseArgs(argv) {
  const out = { id: `node-worker-${process.pid}` };
  for (let i = 0; i < argv.length; i++) {
    if (argv[i] === "--id") out.id = argv[++i];
    else throw new Error(`unknown argument ${argv[i]}`);
  }
  return out;
}

async function main() {
  const { id } = parseArgs(process.argv.slice(2));
  const nc = await connectAs("worker", id);
  const js = jetstream(nc);
  const jsm = await jetstreamManager(nc);
  const stop = new AbortController();
  for (const sig of ["SIGINT", "SIGTERM"]) process.once(sig, () => stop.abort());

  // Cancel notices are core NATS, not stored: they reach the calls running
  // now. Withdrawn calls (below) cover the ones not delivered yet.
  const cancelled = new Map();
  const cancels = nc.subscribe("toolgate.cancel.*", {
    callback: (err, m) => {
      if (err) return;
      const run = m.subject.split(".")[2];
      (cancelled.get(run) || []).forEach((c) => c.abort());
    },
  });

  const served = Object.keys(tools).map((tool) => serve({ nc, js, jsm, tool, id, cancelled, signal: stop.signal }));
  await Promise.race([Promise.all(served), new Promise((r) => stop.signal.addEventListener("abort", r, { once: true }))]);
  cancels.unsubscribe();
  await nc.drain();
}

// bind waits for the consumer call_<tool>: a 404 (JetStream code 10014) is
// not an error, no call of the tool was published yet.
async function bind(js, tool, signal) {
  let said = false;
  while (!signal.aborted) {
    try {
      return await js.consumers.get(STREAM, `call_${tool}`);
    } catch (err) {
      if (!(err instanceof JetStreamApiError && err.code === JetStreamApiCodes.ConsumerNotFound)) throw err;
      if (!said) console.log(`waiting for the consumer call_${tool} (made before the tool's first call)`);
      said = true;
      await sleep(1000, signal);
    }
  }
  return null;
}

async function serve({ nc, js, jsm, tool, id, cancelled, signal }) {
  const consumer = await bind(js, tool, signal);
  if (!consumer) return;
  const info = await consumer.info(true);
  const ackWaitMs = info.config.ack_wait / 1e6;
  console.log(`serving ${tool} (consumer call_${tool}, ack wait ${ackWaitMs} ms)`);
  while (!signal.aborted) {
    let m;
    try {
      // One at a time, with a pull request waiting: the orchestrator reads
      // a waiting pull as "this tool has a worker".
      m = await consumer.next({ expires: 10_000 });
    } catch (err) {
      if (signal.aborted || nc.isClosed()) return;
      console.error(`${tool}: pull: ${err.message}`);
      await sleep(1000, signal);
      continue;
    }
    if (!m) continue;
    try {
      await handle({ js, jsm, tool, id, cancelled, m, ackWaitMs });
    } catch (err) {
      // The reply could not be stored (NATS unreachable, say): the call
      // comes back after a while, to this worker or another.
      console.error(`${tool}: ${err.message}; handing the call back`);
      m.nak(5000);
    }
  }
}

async function handle({ js, jsm, tool, id, cancelled, m, ackWaitMs }) {
  let call;
  try {
    call = decodeBody(m);
    if (!call.run_id || !call.tool_call_id) throw new Error("run_id and tool_call_id are required");
  } catch (err) {
    return deadLetter(js, m, "decode", `call does not decode: ${err.message}`);
  }
  if (call.tool_name !== tool) {
    return deadLetter(js, m, "invalid", `tool_name ${call.tool_name} is not the subject's ${tool}`);
  }
  const deadline = call.deadline ? new Date(call.deadline) : null;
  if (deadline && deadline <= new Date()) {
    await reply(js, call, id, { outcome: "failed", message: "timed out" });
    return m.ack();
  }
  // Withdrawn while it waited (its conversation was cancelled, its
  // deadline passed): the stream no longer has it. A leader that has not
  // stored the call yet (a new one, in a cluster) answers "not found" too,
  // so that answer counts only from a leader whose last sequence has
  // reached the call's, twice. Any other answer, an error included, means
  // run it.
  try {
    const gone = async () => (await jsm.streams.getMessage(STREAM, { seq: m.seq })) === null;
    if (await gone()) {
      const info = await jsm.streams.info(STREAM);
      if (info.state.last_seq >= m.seq && (await gone())) {
        console.log(`withdrawn ${call.tool_call_id}: not run`);
        return m.ack();
      }
    }
  } catch (err) {
    console.error(`look up ${call.tool_call_id}: ${err.message}; running it`);
  }

  const abort = new AbortController();
  const mine = cancelled.get(call.run_id) || [];
  cancelled.set(call.run_id, mine.concat(abort));
  const beat = setInterval(() => m.working(), Math.max(ackWaitMs / 3, 100));
  try {
    const value = await Promise.race([
      tools[tool](call.args || {}, call, abort.signal),
      new Promise((_, reject) => abort.signal.addEventListener("abort", () => reject(abort.signal), { once: true })),
    ]);
    await reply(js, call, id, { outcome: "return", value });
    console.log(`answered ${tool} ${call.tool_call_id}`);
  } catch (err) {
    if (err === abort.signal) {
      console.log(`cancelled ${call.tool_call_id}: no reply`);
    } else if (err instanceof Retry) {
      await reply(js, call, id, { outcome: "retry", message: err.message });
    } else {
      await reply(js, call, id, { outcome: "failed", message: String(err.message || err) });
    }
  } finally {
    clearInterval(beat);
    const left = (cancelled.get(call.run_id) || []).filter((c) => c !== abort);
    if (left.length) cancelled.set(call.run_id, left);
    else cancelled.delete(call.run_id);
  }
  m.ack();
}

// reply publishes a CallReply as JSON; its id has no worker in it, so when
// two workers ran a redelivered call the stream keeps the first reply.
async function reply(js, call, workerID, fields) {
  const body = { run_id: call.run_id, tool_call_id: call.tool_call_id, worker_id: workerID, ...fields };
  await js.publish(`toolgate.reply.${call.run_id}.call`, JSON.stringify(body), {
    msgID: `${call.run_id}/${call.tool_call_id}/result`,
    headers: jsonHeaders(call.run_id, call.tool_call_id),
  });
}

// deadLetter copies a call that cannot be handled to toolgate.dlq.<kind>
// and terminates it: nak'd, it would only come back.
async function deadLetter(js, m, kind, reason) {
  // The copy keeps the call's headers but JetStream's own (Nats-*).
  const h = headers();
  for (const k of m.headers ? m.headers.keys() : []) {
    if (!k.toLowerCase().startsWith("nats-")) m.headers.values(k).forEach((v) => h.append(k, v));
  }
  h.set("Toolgate-DLQ-Reason", reason.slice(0, 512));
  h.set("Toolgate-DLQ-Subject", m.subject);
  h.set("Toolgate-DLQ-Stream", STREAM);
  h.set("Toolgate-DLQ-Seq", String(m.seq));
  h.set("Toolgate-DLQ-Consumer", m.info.consumer);
  await js.publish(`toolgate.dlq.${kind}`, m.data, { msgID: `dlq/${STREAM}/${m.seq}`, headers: h });
  console.error(`dead-lettered call ${m.seq}: ${reason}`);
  m.term(reason);
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
