#!/usr/bin/env bash
# Installs Debian's chromium for the inbox's headless-browser test when it is
# missing. Quiet on success; exits non-zero with a reason when it cannot
# install, so that `make test` stops there instead of the test skipping.
set -euo pipefail

if command -v chromium >/dev/null 2>&1; then
	exit 0
fi

. "$(dirname "$0")/apt-ensure.sh"
apt_install ensure-chromium chromium
if ! command -v chromium >/dev/null 2>&1; then
	echo "ensure-chromium: chromium was installed but is not on PATH" >&2
	exit 1
fi
