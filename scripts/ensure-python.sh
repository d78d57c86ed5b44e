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

. "$(dirname "$0")/apt-ensure.sh"
apt_install ensure-python python3
if ! command -v python3 >/dev/null 2>&1 || ! recent; then
	echo "ensure-python: python3 was installed but a python3 of 3.8 or later is not first on PATH" >&2
	exit 1
fi
