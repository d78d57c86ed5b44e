#!/usr/bin/env bash
# Makes sure python3 (3.8 or later) is on PATH for the Python examples'
# tests, installing Debian's python3 when it is missing. Quiet on success;
# exits non-zero with a reason when it cannot install, so that `make test`
# stops there instead of the tests failing.
set -euo pipefail

recent() { python3 -c 'import sys; sys.exit(sys.version_info < (3, 8))' 2>/dev/null; }
if command -v python3 >/dev/null 2>&1 && recent; then
	exit 0
fi

sudo=()
if [ "$(id -u)" -ne 0 ]; then
	if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
		sudo=(sudo -n)
	else
		echo "ensure-python: python3 (3.8+) is not installed and installing it needs root (or passwordless sudo): apt-get install -y python3" >&2
		exit 1
	fi
fi
if ! command -v apt-get >/dev/null 2>&1; then
	echo "ensure-python: python3 (3.8+) is not installed and apt-get is not available; install Python 3 and put python3 on PATH" >&2
	exit 1
fi

log=$(mktemp)
trap 'rm -f "$log"' EXIT
export DEBIAN_FRONTEND=noninteractive
if ! { "${sudo[@]}" apt-get update -qq && "${sudo[@]}" apt-get install -y -qq --no-install-recommends python3; } >"$log" 2>&1; then
	tail -n 20 "$log" >&2
	echo "ensure-python: apt-get could not install python3 (output above)" >&2
	exit 1
fi
if ! command -v python3 >/dev/null 2>&1 || ! recent; then
	echo "ensure-python: python3 was installed but a python3 of 3.8 or later is not first on PATH" >&2
	exit 1
fi
