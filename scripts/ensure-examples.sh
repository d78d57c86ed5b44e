#!/usr/bin/env bash
# Installs what the examples in other languages need for their tests
# (internal/e2e/polyglot_test.go): Python 3 for examples/python (standard
# library only; see ensure-python.sh) and the npm packages of examples/node
# into .cache/npm-examples (or $TOOLGATE_EXAMPLES_NPM_DIR); see
# npm-ensure.sh. The tests run the Node examples with NODE_PATH there; a
# user runs `npm ci` in examples/node instead.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/ensure-python.sh"
. "$root/scripts/npm-ensure.sh"
npm_ensure ensure-examples "the Node examples need Node.js 18+" \
	"$root/examples/node" "${TOOLGATE_EXAMPLES_NPM_DIR:-$root/.cache/npm-examples}" \
	-f node_modules/@nats-io/jetstream/package.json -f node_modules/@nats-io/transport-node/package.json \
	-f node_modules/@msgpack/msgpack/package.json
