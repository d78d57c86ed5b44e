#!/usr/bin/env bash
# Installs Debian's chromium for the inbox's headless-browser test when it is
# missing. Quiet on success; exits non-zero with a reason when it cannot
# install, so that `make test` stops there instead of the test skipping.
set -euo pipefail

if command -v chromium >/dev/null 2>&1; then
	exit 0
fi

sudo=()
if [ "$(id -u)" -ne 0 ]; then
	if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
		sudo=(sudo -n)
	else
		echo "ensure-chromium: chromium is not installed and installing it needs root (or passwordless sudo): apt-get install -y chromium" >&2
		exit 1
	fi
fi
if ! command -v apt-get >/dev/null 2>&1; then
	echo "ensure-chromium: chromium is not installed and apt-get is not available; install chromium and put it on PATH" >&2
	exit 1
fi

log=$(mktemp)
trap 'rm -f "$log"' EXIT
export DEBIAN_FRONTEND=noninteractive
if ! { "${sudo[@]}" apt-get update -qq && "${sudo[@]}" apt-get install -y -qq --no-install-recommends chromium; } >"$log" 2>&1; then
	tail -n 20 "$log" >&2
	echo "ensure-chromium: apt-get could not install chromium (output above)" >&2
	exit 1
fi
if ! command -v chromium >/dev/null 2>&1; then
	echo "ensure-chromium: chromium was installed but is not on PATH" >&2
	exit 1
fi
