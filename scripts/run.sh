#!/usr/bin/env bash
# Starts the whole system on one machine — orchestrator with an embedded NATS
# server, a tool-worker with the built-in tools, an approver with the demo
# policy — then plays the seed's approval conversation and keeps serving until
# Ctrl-C. Logs go to .run/*.log. The chat page is at http://$HTTP/chat.
#
# APPROVER=none starts no approver: approvals wait for a person (the approval
# cards of the chat page, or the API), and the seed demo, which the approver
# decides, is not played.
set -euo pipefail
cd "$(dirname "$0")/.."

HTTP="${HTTP:-127.0.0.1:8080}"
NATS_LISTEN="${NATS_LISTEN:-127.0.0.1:4222}"
RUN_DIR="${RUN_DIR:-.run}"
APPROVER="${APPROVER:-policy}"
if [[ "$APPROVER" != policy && "$APPROVER" != none ]]; then
	echo "APPROVER=$APPROVER: want policy (the default: the demo policy's approver) or none (decide in the chat page)" >&2
	exit 1
fi

# A port already taken makes the orchestrator exit before it logs anything,
# or lets the demo talk to whatever holds the port: refuse up front, saying
# which port and how to choose another.
port_taken() {
	local host=${1%:*} port=${1##*:}
	if [[ -z "$host" || "$host" == "0.0.0.0" || "$host" == "[::]" ]]; then host=127.0.0.1; fi
	host=${host#[} host=${host%]}
	timeout 2 bash -c "exec 3<>/dev/tcp/$host/$port" 2>/dev/null
}
for var in HTTP NATS_LISTEN; do
	addr=${!var}
	if port_taken "$addr"; then
		port=${addr##*:}
		echo "port $port ($var=$addr) is already in use by another program; stop it, or run on another port: make run $var=${addr%:*}:$((port + 1))" >&2
		exit 1
	fi
done

mkdir -p "$RUN_DIR"
pids=()
cleanup() {
	stopping=1
	trap - EXIT INT TERM
	echo
	echo "▶ stopping…"
	for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
	wait 2>/dev/null || true
}
trap cleanup EXIT INT TERM

agent_args=()
if [[ -n "${AGENT:-}" ]]; then agent_args=(--agent "$AGENT"); fi
if [[ -n "${OPENAI_API_KEY:-}" ]]; then
	echo "▶ model: OpenAI-compatible (${OPENAI_MODEL:-gpt-4o-mini} at ${OPENAI_BASE_URL:-api.openai.com})"
else
	echo "▶ model: offline script (set OPENAI_API_KEY to use a real model)"
fi

bin/orchestrator --store "$RUN_DIR/data" --nats-listen "$NATS_LISTEN" --http "$HTTP" "${agent_args[@]}" \
	>"$RUN_DIR/orchestrator.log" 2>&1 &
orch=$!
pids+=("$orch")
fail() {
	if [[ -s "$RUN_DIR/orchestrator.log" ]]; then
		echo "$1; the orchestrator's log ($RUN_DIR/orchestrator.log):" >&2
		tail -n 30 "$RUN_DIR/orchestrator.log" >&2
	else
		echo "$1; the orchestrator logged nothing ($RUN_DIR/orchestrator.log is empty)" >&2
	fi
	exit 1
}
# Workers and approvers attach to the streams the orchestrator sets up. The
# server answering must be this orchestrator (by its pid), not another one
# left running on the port; health fails at once when this one exits.
bin/toolgate --addr "http://$HTTP" --wait 60s health --pid "$orch" || fail "orchestrator did not start"
bin/tool-worker --nats "nats://$NATS_LISTEN" --builtin --sandbox "$RUN_DIR/sandbox" \
	>"$RUN_DIR/tool-worker.log" 2>&1 &
pids+=($!)
if [[ "$APPROVER" == policy ]]; then
	bin/approver --nats "nats://$NATS_LISTEN" --policy examples/policy.yaml --id demo-approver \
		>"$RUN_DIR/approver.log" 2>&1 &
	pids+=($!)
fi

echo "▶ orchestrator http://$HTTP  nats://$NATS_LISTEN  (logs in $RUN_DIR/)"
if [[ "$APPROVER" == policy ]]; then
	bin/toolgate --addr "http://$HTTP" demo &
	demo=$!
	# Whichever ends first: the demo, or a process it needs.
	status=0
	wait -n -p ended "$demo" "${pids[@]}" || status=$?
	if [[ "${ended:-}" != "$demo" ]]; then
		kill "$demo" 2>/dev/null || true
		fail "a process of the demo exited (pid ${ended:-?}) before the demo ended"
	fi
	((status == 0)) || fail "the demo failed"
	echo
	echo "▶ sandbox after the demo:"
	(cd "$RUN_DIR/sandbox" 2>/dev/null && for f in $(ls -A); do printf "  %s: %s\n" "$f" "$(cat "$f")"; done) || true
else
	echo "▶ no approver (APPROVER=none): approvals wait for you in the chat page"
fi
echo
echo "▶ chat in the browser: http://$HTTP/chat"
if [[ "$APPROVER" == policy ]]; then
	echo "  (the demo approver decides delete_file and the .env update at once; APPROVER=none make run leaves them to you)"
fi
echo "▶ still serving: try"
echo "    curl -s -XPOST http://$HTTP/v1/runs -H 'Content-Type: application/json' -d '{\"prompt\":\"Delete \`a.txt\` and write hi to b.txt\"}'"
echo "    curl -s http://$HTTP/v1/pending"
if [[ -z "${OPENAI_API_KEY:-}" && -z "${AGENT:-}" ]]; then
	echo "  (the offline script model plays its script whatever the prompt says; set OPENAI_API_KEY for a model that reads it)"
fi
echo "  Ctrl-C stops everything."
wait -n -p ended "${pids[@]}" || true
[[ -n "${stopping:-}" ]] || fail "pid ${ended:-?} exited (logs in $RUN_DIR/)"
