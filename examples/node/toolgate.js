// What the worker and the bot share: connecting under a role, reading a
// message in either encoding, writing JSON, canonical JSON for decision ids.
// The contract is docs/protocol.md; the messages are in schemas/.
"use strict";

const crypto = require("node:crypto");
const { connect, headers } = require("@nats-io/transport-node");
const { decode } = require("@msgpack/msgpack");

// Each role receives its replies only under its own inbox prefix (the NATS
// users the orchestrator writes may subscribe to nothing else): a client
// that keeps nats.js's default _INBOX gets no answer to any request.
const INBOX = { worker: "_INBOX_worker", approver: "_INBOX_approver" };

// connectAs connects as a user of the given role, from the environment:
// NATS_URL (comma-separated), NATS_USER, NATS_PASSWORD.
async function connectAs(role, name) {
  const opts = {
    servers: (process.env.NATS_URL || "nats://127.0.0.1:4222").split(","),
    name,
    inboxPrefix: INBOX[role],
    maxReconnectAttempts: -1,
  };
  if (process.env.NATS_USER) {
    opts.user = process.env.NATS_USER;
    opts.pass = process.env.NATS_PASSWORD || "";
  }
  return connect(opts);
}

// Dynamic values (args, metadata, data, ...) are, in msgpack, bin holding
// JSON text, so that numbers keep the form they were written in. Times are
// the msgpack timestamp extension, which @msgpack/msgpack reads as a Date.
const JSON_FIELDS = new Set(["args", "metadata", "value", "override_args", "parameters", "data"]);

function fromMsgpack(v) {
  if (Array.isArray(v)) return v.map(fromMsgpack);
  if (v === null || typeof v !== "object" || v instanceof Date || v instanceof Uint8Array) return v;
  const out = {};
  for (const [k, x] of Object.entries(v)) {
    out[k] = JSON_FIELDS.has(k) && x instanceof Uint8Array ? JSON.parse(Buffer.from(x).toString("utf8")) : fromMsgpack(x);
  }
  return out;
}

// decodeBody reads a message's body by its Content-Type: JSON when it says
// application/json, msgpack otherwise (a missing header means msgpack).
function decodeBody(msg) {
  const ct = (msg.headers && msg.headers.get("Content-Type")) || "";
  if (ct.split(";")[0].trim() === "application/json") {
    return JSON.parse(Buffer.from(msg.data).toString("utf8"));
  }
  return fromMsgpack(decode(msg.data));
}

// jsonHeaders are the headers of a JSON body about one call. Toolgate-Run
// and Toolgate-Call let a dead letter of a reply be found under its call.
function jsonHeaders(runID, callID) {
  const h = headers();
  h.set("Content-Type", "application/json");
  h.set("Toolgate-Run", runID);
  h.set("Toolgate-Call", callID);
  return h;
}

// rfc3339 writes a time as Go does (fraction without trailing zeros), so
// that a decision's canonical form is the one the orchestrator computes.
function rfc3339(date) {
  return date.toISOString().replace(/\.(\d*?)0*Z$/, (_, f) => (f ? "." + f : "") + "Z");
}

// canonicalJSON is docs/protocol.md's "Canonical JSON" for values built in
// JavaScript: keys sorted by code point, no whitespace, U+2028/U+2029
// escaped. (Numbers are JavaScript's: a value parsed from JSON has lost
// its written form, which the orchestrator keeps; digest args from their
// original text, never from a parsed object.)
function canonicalJSON(v) {
  if (v === null || typeof v !== "object") {
    return JSON.stringify(v).replace(/\u2028/g, "\\u2028").replace(/\u2029/g, "\\u2029");
  }
  if (Array.isArray(v)) return "[" + v.map(canonicalJSON).join(",") + "]";
  const keys = Object.keys(v).filter((k) => v[k] !== undefined);
  keys.sort((a, b) => {
    const x = Array.from(a, (c) => c.codePointAt(0));
    const y = Array.from(b, (c) => c.codePointAt(0));
    for (let i = 0; i < Math.min(x.length, y.length); i++) if (x[i] !== y[i]) return x[i] - y[i];
    return x.length - y.length;
  });
  return "{" + keys.map((k) => canonicalJSON(k) + ":" + canonicalJSON(v[k])).join(",") + "}";
}

// decisionMsgID is a decision's Nats-Msg-Id: another decision (approved,
// message, time) gets another id, the same one sent again keeps it.
function decisionMsgID(d, signature) {
  const { signature: _, ...unsigned } = d;
  const h = crypto.createHash("sha256");
  h.update(canonicalJSON(unsigned));
  if (signature) h.update(signature);
  return `${d.run_id}/${d.tool_call_id}/decision.${d.approver_id}.${h.digest("hex").slice(0, 16)}`;
}

function sleep(ms, signal) {
  return new Promise((resolve) => {
    const t = setTimeout(resolve, ms);
    if (signal) signal.addEventListener("abort", () => (clearTimeout(t), resolve()), { once: true });
  });
}

module.exports = { connectAs, decodeBody, jsonHeaders, rfc3339, canonicalJSON, decisionMsgID, sleep };
