#!/usr/bin/env bash
# Installs the npm MCP servers the tests run (scripts/mcp/package.json) into
# .cache/npm (or $TOOLGATE_NPM_DIR); see npm-ensure.sh.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
. "$root/scripts/npm-ensure.sh"
npm_ensure ensure-mcp "the MCP tests need Node.js 18+" \
	"$root/scripts/mcp" "${TOOLGATE_NPM_DIR:-$root/.cache/npm}" \
	-x node_modules/.bin/mcp-server-everything -x node_modules/.bin/mcp-server-filesystem
