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

# private_apt_opts DIR ARCH sets apt_opts: apt-get and apt-cache options
# for a private apt under DIR (its own sources list DIR/etc/sources.list,
# lists, cache and an empty dpkg status, with the archive keys the machine
# already trusts) that sees the packages of ARCH alone. The machine's apt
# configuration and package lists are never touched.
private_apt_opts() {
	local dir=$1 arch=$2
	mkdir -p "$dir"/{lists/partial,archives/partial,etc/sources.list.d,etc/preferences.d,etc/apt.conf.d}
	[ -e "$dir/status" ] || : >"$dir/status"
	apt_opts=(
		-o "Dir::Etc::sourcelist=$dir/etc/sources.list"
		-o "Dir::Etc::sourceparts=$dir/etc/sources.list.d"
		-o "Dir::Etc::preferences=$dir/etc/preferences"
		-o "Dir::Etc::preferencesparts=$dir/etc/preferences.d"
		-o "Dir::State::lists=$dir/lists"
		-o "Dir::State::status=$dir/status"
		-o "Dir::Cache=$dir"
		-o "Dir::Cache::archives=$dir/archives"
		-o "Dir::Cache::pkgcache=$dir/pkgcache.bin"
		-o "Dir::Cache::srcpkgcache=$dir/srcpkgcache.bin"
		-o "APT::Architecture=$arch"
		-o "APT::Architectures::=$arch"
		-o "Acquire::Languages=none"
		-o "Debug::NoLocking=1"
		-o "APT::Sandbox::User=root"
	)
}

# vm_cache prints the directory the VM's downloads are cached in:
# $SPANWATCH_VM_CACHE, default /var/cache/spanwatch-vm as root.
vm_cache() {
	if [ "$(id -u)" -eq 0 ]; then
		echo "${SPANWATCH_VM_CACHE:-/var/cache/spanwatch-vm}"
	else
		echo "${SPANWATCH_VM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/spanwatch-vm}"
	fi
}

# foreign_busybox ARCH prints the path of a static busybox for ARCH (the
# VM of another architecture cannot run the machine's): Debian's
# busybox-static for ARCH, downloaded with a private apt and extracted
# once into the VM cache (the package lists are fetched again at most once
# a week; a failed refresh keeps the cached binary).
foreign_busybox() {
	local arch=$1 cache dir current deb version
	cache=$(vm_cache)
	dir=$cache/apt-busybox-$arch
	current=$cache/busybox-$arch.current
	mkdir -p "$cache"
	(
		flock 9
		if [ -s "$current" ] && [ -x "$(cat "$current")" ] &&
			[ $(($(date +%s) - $(stat -c %Y "$current"))) -lt 604800 ]; then
			exit 0
		fi
		private_apt_opts "$dir" "$arch"
		echo "deb ${SPANWATCH_VM_MIRROR:-http://deb.debian.org/debian} bookworm main" >"$dir/etc/sources.list"
		if ! apt-get "${apt_opts[@]}" -q update >"$dir/update.log" 2>&1; then
			cat "$dir/update.log" >&2
			[ -s "$current" ] && [ -x "$(cat "$current")" ] && exit 0
			printf '%s: apt-get update for busybox-static:%s failed\n' "${0##*/}" "$arch" >&2
			exit 1
		fi
		version=$(apt-cache "${apt_opts[@]}" policy busybox-static | awk '/Candidate:/ {print $2}')
		if [ ! -x "$cache/busybox-$arch-$version/busybox" ]; then
			rm -f "$dir"/archives/*.deb
			(cd "$dir/archives" && apt-get "${apt_opts[@]}" -q download "busybox-static=$version" >"$dir/download.log" 2>&1) || {
				cat "$dir/download.log" >&2
				exit 1
			}
			deb=$(ls "$dir"/archives/*.deb)
			mkdir -p "$cache/busybox-$arch-$version"
			dpkg-deb --fsys-tarfile "$deb" | tar -x -O ./bin/busybox >"$cache/busybox-$arch-$version/busybox.tmp"
			chmod +x "$cache/busybox-$arch-$version/busybox.tmp"
			mv "$cache/busybox-$arch-$version/busybox.tmp" "$cache/busybox-$arch-$version/busybox"
			rm -f "$deb"
		fi
		echo "$cache/busybox-$arch-$version/busybox" >"$current"
	) 9>"$cache/.busybox-$arch.lock" || return 1
	cat "$current"
}
