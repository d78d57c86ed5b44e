#!/usr/bin/env bash
# Installs the npm MCP servers the tests run (scripts/mcp/package.json) into
# .cache/npm when they are missing or the pinned versions changed. Quiet and
# offline when they are there; exits non-zero with a reason when node or npm
# is missing or the install fails, so that `make test` stops there instead of
# the tests failing one by one.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
src=$root/scripts/mcp
dst=${TOOLGATE_NPM_DIR:-$root/.cache/npm}

for tool in node npm; do
	if ! command -v "$tool" >/dev/null 2>&1; then
		echo "ensure-mcp: $tool is not installed; the MCP tests need Node.js 18+ and npm (Debian: apt-get install -y nodejs npm)" >&2
		exit 1
	fi
done

mkdir -p "$dst"
stamp=$dst/.installed-from
want=$(cat "$src/package.json" "$src/package-lock.json" 2>/dev/null | sha256sum | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] &&
	[ -x "$dst/node_modules/.bin/mcp-server-everything" ] && [ -x "$dst/node_modules/.bin/mcp-server-filesystem" ]; then
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
	echo "ensure-mcp: ${cmd[*]} in $dst failed (output above)" >&2
	exit 1
fi
echo "$want" >"$stamp"
