#!/usr/bin/env bash
# Installs the AI SDK the chat adapter tests run (scripts/aisdk/package.json) into
# .cache/npm-aisdk when it is missing or the pinned versions changed. Quiet and
# offline when they are there; exits non-zero with a reason when node or npm
# is missing or the install fails, so that `make test` stops there instead of
# the tests failing one by one.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
src=$root/scripts/aisdk
dst=${TOOLGATE_AISDK_NPM_DIR:-$root/.cache/npm-aisdk}

for tool in node npm; do
	if ! command -v "$tool" >/dev/null 2>&1; then
		echo "ensure-aisdk: $tool is not installed; the AI SDK tests need Node.js 20+ and npm (Debian: apt-get install -y nodejs npm)" >&2
		exit 1
	fi
done

mkdir -p "$dst"
stamp=$dst/.installed-from
want=$(cat "$src/package.json" "$src/package-lock.json" 2>/dev/null | sha256sum | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] &&
	[ -f "$dst/node_modules/ai/package.json" ]; then
	exit 0
fi

cp "$src/package.json" "$dst/package.json"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
if [ -f "$src/package-lock.json" ]; then
	cp "$src/package-lock.json" "$dst/package-lock.json"
	cmd=(npm ci)
else
	cmd=(npm install)
fi
if ! (cd "$dst" && "${cmd[@]}" --no-audit --no-fund --loglevel=error) >"$log" 2>&1; then
	tail -n 20 "$log" >&2
	echo "ensure-aisdk: ${cmd[*]} in $dst failed (output above)" >&2
	exit 1
fi
echo "$want" >"$stamp"
