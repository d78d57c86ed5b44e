#!/usr/bin/env bash
# Installs the AG-UI client the chat adapter tests run (scripts/agui/package.json) into
# .cache/npm-agui when it is missing or the pinned versions changed. Quiet and
# offline when they are there; exits non-zero with a reason when node or npm
# is missing or the install fails, so that `make test` stops there instead of
# the tests failing one by one.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
src=$root/scripts/agui
dst=${TOOLGATE_AGUI_NPM_DIR:-$root/.cache/npm-agui}

for tool in node npm; do
	if ! command -v "$tool" >/dev/null 2>&1; then
		echo "ensure-agui: $tool is not installed; the AG-UI tests need Node.js 18+ and npm (Debian: apt-get install -y nodejs npm)" >&2
		exit 1
	fi
done

mkdir -p "$dst"
stamp=$dst/.installed-from
want=$(cat "$src/package.json" "$src/package-lock.json" 2>/dev/null | sha256sum | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] &&
	[ -f "$dst/node_modules/@ag-ui/client/package.json" ] && [ -f "$dst/node_modules/@ag-ui/core/package.json" ]; then
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
	echo "ensure-agui: ${cmd[*]} in $dst failed (output above)" >&2
	exit 1
fi
echo "$want" >"$stamp"
