#!/usr/bin/env bash
# kernel.sh builds (or reuses) the bzImage that spanwatch's VM tests boot: Debian's
# linux-source-6.12, `make tinyconfig` plus the project's fragment
# (.ci/vm-kernel.config). It prints the bzImage's path on stdout; progress goes
# to stderr.
#
# The result is cached under $SPANWATCH_VM_CACHE (default
# /var/cache/spanwatch-vm, or ~/.cache/spanwatch-vm for users other than root)
# in a directory keyed by the source package version and a hash of the
# fragment, so a second run only hashes and returns.
#
# Missing Debian packages are installed with apt-get when running as root;
# otherwise the script says which to install. Needs about 2 GB of disk for the
# build tree; the first build takes 7-10 minutes on 2 cores.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
top=$(cd "$here/../.." && pwd)
fragment=${SPANWATCH_VM_CONFIG:-$top/.ci/vm-kernel.config}
if [ "$(id -u)" -eq 0 ]; then
	cache=${SPANWATCH_VM_CACHE:-/var/cache/spanwatch-vm}
else
	cache=${SPANWATCH_VM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/spanwatch-vm}
fi
srcpkg=linux-source-6.12
deps=($srcpkg build-essential flex bison bc libelf-dev libssl-dev cpio dwarves xz-utils)

log() { printf 'kernel.sh: %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

# shellcheck source=deps.sh
. "$here/deps.sh"
ensure_packages "${deps[@]}" || exit 1

[ -f "$fragment" ] || die "config fragment $fragment not found"
version=$(dpkg-query -W -f='${Version}' "$srcpkg")
tarball=/usr/src/$srcpkg.tar.xz
[ -f "$tarball" ] || die "$tarball not found (is $srcpkg installed?)"

# The key covers everything that changes the image: the source, the fragment,
# and the build recipe below (bump recipe when changing how the image is made).
recipe=1
key=$(printf '%s\n' "$srcpkg=$version" "recipe=$recipe" | cat - "$fragment" | sha256sum | cut -c1-16)
dir=$cache/$srcpkg-$version-$key
image=$dir/bzImage

if [ -s "$image" ]; then
	log "cached kernel $image"
	echo "$image"
	exit 0
fi

mkdir -p "$cache"
exec 9>"$cache/.lock"
flock 9
if [ -s "$image" ]; then # built by a concurrent run while we waited
	echo "$image"
	exit 0
fi

src=$cache/src-$version
if [ ! -f "$src/.extracted" ]; then
	log "extracting $tarball to $src"
	rm -rf "$src"
	mkdir -p "$src"
	tar -xJf "$tarball" -C "$src" --strip-components=1
	touch "$src/.extracted"
fi

build=$dir/build
rm -rf "$build"
mkdir -p "$build"
log "configuring in $build (tinyconfig + $fragment)"
{
	make -s -C "$src" O="$build" tinyconfig &&
		(cd "$build" && "$src/scripts/kconfig/merge_config.sh" -m -O "$build" .config "$fragment") &&
		make -s -C "$src" O="$build" olddefconfig
} >"$dir/config.log" 2>&1 || { cat "$dir/config.log" >&2; die "configuring the kernel failed"; }

# merge_config.sh only warns when a value does not survive; fail instead.
bad=0
while IFS= read -r line; do
	case "$line" in CONFIG_*=*) ;; *) continue ;; esac
	if ! grep -qxF "$line" "$build/.config"; then
		name=${line%%=*}
		got=$(grep -E "^($name=|# $name is not set)" "$build/.config" || echo "absent")
		log "config: want $line, got: $got"
		bad=1
	fi
done <"$fragment"
[ $bad -eq 0 ] || die "the kernel config does not have every line of $fragment (see above: a dependency is missing from the fragment)"

jobs=$(nproc)
log "building bzImage with $jobs jobs (the first build takes several minutes)"
start=$(date +%s)
if ! make -C "$src" O="$build" -j"$jobs" bzImage >"$dir/build.log" 2>&1; then
	tail -40 "$dir/build.log" >&2
	die "kernel build failed; full log: $dir/build.log"
fi
log "built in $(($(date +%s) - start))s"
cp "$build/arch/x86/boot/bzImage" "$image.tmp"
cp "$build/.config" "$dir/config"
mv "$image.tmp" "$image"
# The object tree is large and not needed once the image is cached.
rm -rf "$build"
echo "$image"
