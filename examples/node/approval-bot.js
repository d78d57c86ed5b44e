#!/usr/bin/env node
// An approval bot on nats.js: it decides refund_order calls by amount
// (approved up to --max-refund, denied above with a message the model
// reads) and leaves every other tool to other approvers.
//
//   NATS_URL=nats://127.0.0.1:4222 NATS_USER=refund-bot NATS_PASSWORD=... node approval-bot.js [--id ID] [--max-refund N]
//
// What it does (docs/protocol.md, "Approval bots"):
// - keeps its own durable consumer on TOOLGATE_APPROVALS, named after its
//   id (with the generated NATS users, name it after the bot's user: an
//   approver user may not make another's durables), starting 15 minutes
//   back, not at the stream's 7 days;
// - watches TOOLGATE_EVENTS with an ordered consumer to learn which calls
//   were settled elsewhere (and so to skip them);
// - asks the orchestrator whether a request is still pending before it
//   decides it (toolgate.status.approvals);
// - publishes a Decision as JSON to toolgate.reply.<run_id>.approval with
//   Nats-Msg-Id <run_id>/<tool_call_id>/decision.<approver_id>.<hash>, and
//   prints the outcome the orchestrator gives it (toolgate.outcome.<run_id>).
// The decisions are unsigned: an orchestrator that trusts approver keys
// refuses them (sign the canonical JSON with ed25519 there, see
// "Decisions" in docs/protocol.md).
"use strict";

const { jetstream, jetstreamManager, AckPolicy, DeliverPolicy, JetStreamApiError, JetStreamApiCodes } = require("@nats-io/jetstream");
const { connectAs, decodeBody, jsonHeaders, rfc3339, decisionMsgID } = require("./toolgate");

function parseArgs(argv) {
  const out = { id: process.env.NATS_USER || "refund-bot", maxRefund: 100 };
  for (let i = 0; i < argv.length; i++) {
    if (argv[i] === "--id") out.id = argv[++i];
    else if (argv[i] === "--max-refund") out.maxRefund = Number(argv[++i]);
    else throw new Error(`unknown argument ${argv[i]}`);
  }
  return out;
}

// decide is the bot's policy: a decision, or null to leave the request
// to other approvers.
function decide(req, { maxRefund }) {
  if (req.tool_name !== "refund_order") return null;
  const amount = req.args && req.args.amount;
  if (typeof amount === "number" && amount <= maxRefund) return { approved: true };
  return { approved: false, message: `refunds above ${maxRefund} need a person; ask the customer to call support` };
}

async function main() {
  const opts = parseArgs(process.argv.slice(2));
  const nc = await connectAs("approver", opts.id);
  const js = jetstream(nc);
  const jsm = await jetstreamManager(nc);
  for (const sig of ["SIGINT", "SIGTERM"]) process.once(sig, () => nc.drain());

  // What was settled elsewhere, by "<run_id>/<tool_call_id>", and runs
  // that are over.
  const settled = new Set();
  const overRuns = new Set();
  const isSettled = (run, call) => settled.has(`${run}/${call}`) || overRuns.has(run);

  // Events, from now on. The filter may be given as a string or as a list:
  // nats.js sends a list with the consumer's name in the body instead of
  // the subject ($JS.API.CONSUMER.CREATE.TOOLGATE_EVENTS), which the
  // approver role allows on the events stream (docs/security.md). A
  // consumer it may not create must stop the bot, not leave it deaf: the
  // await below throws then.
  const events = await js.consumers.get("TOOLGATE_EVENTS", {
    filter_subjects: ["toolgate.event.>"],
    deliver_policy: DeliverPolicy.New,
  });
  watchEvents(await events.consume(), { settled, overRuns });

  nc.subscribe("toolgate.outcome.*", {
    callback: (err, m) => {
      if (err) return;
      const o = JSON.parse(Buffer.from(m.data).toString("utf8"));
      if (o.approver_id === opts.id) console.log(`outcome ${o.tool_call_id} ${o.verdict}${o.reason ? ": " + o.reason : ""}`);
    },
  });

  // The bot's durable: made once, found again on a restart (its start
  // time cannot be changed afterwards, so it is not sent again).
  const durable = opts.id.replace(/[^A-Za-z0-9_-]/g, "-");
  try {
    await jsm.consumers.info("TOOLGATE_APPROVALS", durable);
  } catch (err) {
    if (!(err instanceof JetStreamApiError && err.code === JetStreamApiCodes.ConsumerNotFound)) throw err;
    await jsm.consumers.add("TOOLGATE_APPROVALS", {
      durable_name: durable,
      filter_subject: "toolgate.approval.>",
      deliver_policy: DeliverPolicy.StartTime,
      opt_start_time: new Date(Date.now() - 15 * 60 * 1000).toISOString(),
      ack_policy: AckPolicy.Explicit,
      ack_wait: 30e9,
      max_deliver: 5,
    });
  }
  const approvals = await js.consumers.get("TOOLGATE_APPROVALS", durable);
  console.log(`ready: deciding refund_order up to ${opts.maxRefund} as ${opts.id} (consumer ${durable})`);

  for await (const m of await approvals.consume({ max_messages: 16 })) {
    let req;
    try {
      req = decodeBody(m);
    } catch (err) {
      console.error(`request ${m.seq} does not decode: ${err.message}`);
      m.term();
      continue;
    }
    try {
      await handle(nc, js, req, opts, isSettled);
      m.ack();
    } catch (err) {
      console.error(`request ${req.tool_call_id}: ${err.message}`);
      m.nak(5000);
    }
  }
}

async function handle(nc, js, req, opts, isSettled) {
  if (new Date(req.deadline) <= new Date()) return;
  if (Array.isArray(req.approvers) && req.approvers.length && !req.approvers.includes(opts.id)) return;
  const decision = decide(req, opts);
  if (!decision || isSettled(req.run_id, req.tool_call_id)) return;
  if ((await pendingState(nc, req)) !== "pending") return;
  const d = {
    run_id: req.run_id,
    tool_call_id: req.tool_call_id,
    args_digest: req.args_digest,
    approved: decision.approved,
    message: decision.message,
    approver_id: opts.id,
    decided_at: rfc3339(new Date()),
  };
  await js.publish(`toolgate.reply.${req.run_id}.approval`, JSON.stringify(d), {
    msgID: decisionMsgID(d),
    headers: jsonHeaders(req.run_id, req.tool_call_id),
  });
  console.log(`decided ${req.tool_call_id} ${d.approved ? "approved" : "denied"}`);
}

// pendingState asks the orchestrator whether the call still waits for a
// decision; with no orchestrator answering it is unknown, and the bot
// decides anyway (a decision that cannot be applied is refused).
async function pendingState(nc, req) {
  try {
    const m = await nc.request("toolgate.status.approvals", JSON.stringify({ calls: [{ run_id: req.run_id, tool_call_id: req.tool_call_id }] }), { timeout: 5000 });
    const r = JSON.parse(Buffer.from(m.data).toString("utf8"));
    return r.error ? "pending" : r.calls[0].state;
  } catch (err) {
    return "pending";
  }
}

// watchEvents reads the events (one Event per message, or an EventBatch
// when the header Toolgate-Event-Batch is set) and notes what was settled.
async function watchEvents(messages, { settled, overRuns }) {
  for await (const m of messages) {
    let body;
    try {
      body = decodeBody(m);
    } catch (err) {
      continue;
    }
    const list = m.headers && m.headers.has("Toolgate-Event-Batch") ? body.events : [body];
    for (const ev of list) {
      const data = ev.data || {};
      switch (ev.type) {
        case "reply_applied":
        case "call_dispatched":
          settled.add(`${ev.run_id}/${ev.tool_call_id}`);
          if (ev.type === "reply_applied" && data.kind === "approval") {
            console.log(`event reply_applied ${ev.tool_call_id} approved=${data.approved} by ${data.approver_id}`);
          }
          break;
        case "calls_expired":
        case "conversation_cancelled":
          (data.tool_call_ids || []).forEach((c) => settled.add(`${ev.run_id}/${c}`));
          break;
        case "run_completed":
        case "run_failed":
          overRuns.add(ev.run_id);
          break;
      }
    }
  }
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
