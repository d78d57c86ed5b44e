#!/usr/bin/env bash
# Sourced by the ensure-*.sh scripts: npm_ensure installs one pinned npm
# package set (scripts/<set>/package.json) into its own directory when it is
# missing or the pinned versions changed. Quiet and offline when they are
# there; exits non-zero with a reason when node or npm is missing or the
# install fails, so that `make test` stops there instead of the tests failing
# one by one.
#
# npm_ensure NAME WHAT SRC DST [TEST PATH]...
#   NAME  prefix of the error messages (ensure-mcp)
#   WHAT  what needs node, for the error message ("the MCP tests need Node.js 18+")
#   SRC   directory holding package.json and package-lock.json
#   DST   install directory; its .installed-from stamps the hash of SRC's files
#   TEST PATH  pairs such as "-f node_modules/ai/package.json" that must hold
#         in DST for an install to count as complete
npm_ensure() {
	local name=$1 what=$2 src=$3 dst=$4
	shift 4

	local tool
	for tool in node npm; do
		if ! command -v "$tool" >/dev/null 2>&1; then
			echo "$name: $tool is not installed; $what and npm (Debian: apt-get install -y nodejs npm)" >&2
			exit 1
		fi
	done

	mkdir -p "$dst"
	local stamp=$dst/.installed-from want
	want=$(cat "$src/package.json" "$src/package-lock.json" 2>/dev/null | sha256sum | cut -d' ' -f1)
	if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && npm_ensure_present "$dst" "$@"; then
		return 0
	fi

	cp "$src/package.json" "$dst/package.json"
	local log cmd
	log=$(mktemp)
	# shellcheck disable=SC2064 # the trap must remove this call's log
	trap "rm -f '$log'" EXIT
	if [ -f "$src/package-lock.json" ]; then
		cp "$src/package-lock.json" "$dst/package-lock.json"
		cmd=(npm ci)
	else
		cmd=(npm install)
	fi
	if ! (cd "$dst" && "${cmd[@]}" --no-audit --no-fund --loglevel=error) >"$log" 2>&1; then
		tail -n 20 "$log" >&2
		echo "$name: ${cmd[*]} in $dst failed (output above)" >&2
		exit 1
	fi
	echo "$want" >"$stamp"
}

# npm_ensure_present DST [TEST PATH]... holds when every TEST PATH holds in DST.
npm_ensure_present() {
	local dst=$1
	shift
	while [ $# -ge 2 ]; do
		test "$1" "$dst/$2" || return 1
		shift 2
	done
}
