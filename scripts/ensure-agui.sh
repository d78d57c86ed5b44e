#!/usr/bin/env bash
# Installs the AG-UI client the chat adapter tests run (scripts/agui/package.json)
# into .cache/npm-agui (or $TOOLGATE_AGUI_NPM_DIR); see npm-ensure.sh.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
. "$root/scripts/npm-ensure.sh"
npm_ensure ensure-agui "the AG-UI tests need Node.js 18+" \
	"$root/scripts/agui" "${TOOLGATE_AGUI_NPM_DIR:-$root/.cache/npm-agui}" \
	-f node_modules/@ag-ui/client/package.json -f node_modules/@ag-ui/core/package.json
