# apt_install NAME PACKAGE installs Debian's PACKAGE as root (or with
# passwordless sudo), quietly; on failure it says why, prefixed by NAME (the
# calling script's), and returns non-zero. Sourced by the ensure-* scripts,
# which check first whether what they need is there.
apt_install() {
	local name=$1 package=$2
	local sudo=()
	if [ "$(id -u)" -ne 0 ]; then
		if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
			sudo=(sudo -n)
		else
			echo "$name: $package is not installed and installing it needs root (or passwordless sudo): apt-get install -y $package" >&2
			return 1
		fi
	fi
	if ! command -v apt-get >/dev/null 2>&1; then
		echo "$name: $package is not installed and apt-get is not available; install $package and put it on PATH" >&2
		return 1
	fi
	export DEBIAN_FRONTEND=noninteractive
	local log
	log=$(mktemp)
	if ! { "${sudo[@]}" apt-get update -qq && "${sudo[@]}" apt-get install -y -qq --no-install-recommends "$package"; } >"$log" 2>&1; then
		tail -n 20 "$log" >&2
		rm -f "$log"
		echo "$name: apt-get could not install $package (output above)" >&2
		return 1
	fi
	rm -f "$log"
}
