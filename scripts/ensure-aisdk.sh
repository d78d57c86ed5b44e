#!/usr/bin/env bash
# Installs the AI SDK the chat adapter tests run (scripts/aisdk/package.json)
# into .cache/npm-aisdk (or $TOOLGATE_AISDK_NPM_DIR); see npm-ensure.sh.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
. "$root/scripts/npm-ensure.sh"
npm_ensure ensure-aisdk "the AI SDK tests need Node.js 20+" \
	"$root/scripts/aisdk" "${TOOLGATE_AISDK_NPM_DIR:-$root/.cache/npm-aisdk}" \
	-f node_modules/ai/package.json
