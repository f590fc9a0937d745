# deps.sh is sourced by kernel.sh and run.sh: ensure_packages installs the
# Debian packages it is given that are missing (as root), or says which to
# install.

ensure_packages() {
	local p missing=()
	for p in "$@"; do
		if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
			missing+=("$p")
		fi
	done
	[ ${#missing[@]} -eq 0 ] && return 0
	if [ "$(id -u)" -ne 0 ]; then
		printf '%s: missing packages: %s; run: sudo apt-get install -y %s\n' "${0##*/}" "${missing[*]}" "${missing[*]}" >&2
		return 1
	fi
	printf '%s: installing %s\n' "${0##*/}" "${missing[*]}" >&2
	export DEBIAN_FRONTEND=noninteractive
	apt-get install -y -q --no-install-recommends "${missing[@]}" >&2 ||
		{ apt-get update -q >&2 && apt-get install -y -q --no-install-recommends "${missing[@]}" >&2; } || {
		printf '%s: apt-get install %s failed\n' "${0##*/}" "${missing[*]}" >&2
		return 1
	}
}
