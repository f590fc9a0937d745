#!/usr/bin/env bash
# distro-kernel.sh fetches (or reuses) a stock Debian kernel for the VM
# matrix and prints the path of its vmlinuz on stdout; progress goes to
# stderr.
#
#   test/vm/distro-kernel.sh 5.10      Debian 11 (bullseye), cloud flavour
#   test/vm/distro-kernel.sh 6.1       Debian 12 (bookworm), cloud flavour
#   test/vm/distro-kernel.sh 6.12      Debian 12's 6.12 (bookworm-security or
#                                      bookworm-backports), cloud flavour
#   test/vm/distro-kernel.sh 6.12-rt   the same, PREEMPT_RT
#   test/vm/distro-kernel.sh 5.10-arm64  Debian 11 for arm64, cloud flavour
#   test/vm/distro-kernel.sh 6.1-arm64   Debian 12's 6.1 for arm64, cloud flavour
#   test/vm/distro-kernel.sh 6.12-arm64  Debian 12's 6.12 for arm64, cloud flavour
#
# The cloud kernels boot under qemu from vmlinuz and an initramfs without
# modules: virtio, the serial console, BPF, BTF, kprobes, uprobes and perf
# events are built in. On arm64 (qemu's virt machine) the pl011 UART and
# the 8250 driver of a PCI serial port are built in, virtio is a module in
# 6.1 (run.sh uses no virtio), and the .deb's vmlinuz is a plain Image,
# which qemu-system-aarch64 -kernel boots as it is. apt runs with a
# private state directory (deps.sh's private_apt_opts) and a sources list of its own (deb.debian.org, the suite the kernel comes
# from), so the machine's apt configuration and package lists are never
# touched; only the kernel's .deb is downloaded and vmlinuz extracted.
#
# The image is cached under $SPANWATCH_VM_CACHE (default
# /var/cache/spanwatch-vm) by package name and version: the package lists
# are fetched again at most once a day (SPANWATCH_VM_DISTRO_REFRESH=0 never
# refetches while a kernel is cached), so a warm run costs no network.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=deps.sh
. "$here/deps.sh"
cache=$(vm_cache)
mirror=${SPANWATCH_VM_MIRROR:-http://deb.debian.org/debian}
security=${SPANWATCH_VM_SECURITY_MIRROR:-http://deb.debian.org/debian-security}

log() { printf 'distro-kernel.sh: %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

[ $# -eq 1 ] || die "usage: distro-kernel.sh 5.10|6.1|6.12|6.12-rt|5.10-arm64|6.1-arm64|6.12-arm64"
want=$1
# The architecture of the kernel: a label's -arm64 suffix.
arch=amd64
case $want in *-arm64) arch=arm64 ;; esac
# suite lines for the sources list, and the pattern of the image package.
case $want in
5.10)
	suites="deb $mirror bullseye main
deb $security bullseye-security main"
	pattern='^linux-image-5\.10\.0-[0-9]+-cloud-amd64-unsigned$'
	;;
6.1)
	suites="deb $mirror bookworm main
deb $security bookworm-security main"
	pattern='^linux-image-6\.1\.0-[0-9]+-cloud-amd64-unsigned$'
	;;
6.12)
	suites="deb $security bookworm-security main
deb $mirror bookworm-backports main"
	pattern='^linux-image-6\.12\.[0-9]+\+(deb12|bpo)-cloud-amd64-unsigned$'
	;;
6.12-rt)
	suites="deb $security bookworm-security main
deb $mirror bookworm-backports main"
	pattern='^linux-image-6\.12\.[0-9]+\+(deb12|bpo)-rt-amd64-unsigned$'
	;;
5.10-arm64)
	suites="deb $mirror bullseye main
deb $security bullseye-security main"
	pattern='^linux-image-5\.10\.0-[0-9]+-cloud-arm64-unsigned$'
	;;
6.1-arm64)
	suites="deb $mirror bookworm main
deb $security bookworm-security main"
	pattern='^linux-image-6\.1\.0-[0-9]+-cloud-arm64-unsigned$'
	;;
6.12-arm64)
	suites="deb $security bookworm-security main
deb $mirror bookworm-backports main"
	pattern='^linux-image-6\.12\.[0-9]+\+(deb12|bpo)-cloud-arm64-unsigned$'
	;;
*) die "unknown kernel $want: want 5.10, 6.1, 6.12, 6.12-rt, 5.10-arm64, 6.1-arm64 or 6.12-arm64" ;;
esac
command -v apt-get >/dev/null || die "apt-get not found: the distribution kernels come from Debian's archive"
command -v dpkg-deb >/dev/null || die "dpkg-deb not found"

mkdir -p "$cache"
exec 9>"$cache/.distro-$want.lock"
flock 9

apt_dir=$cache/apt-$want
current=$cache/distro-$want.current # the cached image's path, once fetched
refresh=${SPANWATCH_VM_DISTRO_REFRESH:-86400}
if [ -s "$current" ] && [ -s "$(cat "$current")" ]; then
	age=$(($(date +%s) - $(stat -c %Y "$current")))
	if [ "$refresh" -eq 0 ] || [ "$age" -lt "$refresh" ]; then
		log "cached $want kernel $(cat "$current")"
		cat "$current"
		exit 0
	fi
fi

# A private apt (deps.sh) for the kernel's architecture.
private_apt_opts "$apt_dir" "$arch"
printf '%s\n' "$suites" >"$apt_dir/etc/sources.list"
: >"$apt_dir/status"
log "fetching the package lists of: $(printf '%s' "$suites" | awk '{print $3}' | tr '\n' ' ')"
if ! apt-get "${apt_opts[@]}" -q update >"$apt_dir/update.log" 2>&1; then
	cat "$apt_dir/update.log" >&2
	if [ -s "$current" ] && [ -s "$(cat "$current")" ]; then
		log "apt-get update failed; using the cached kernel $(cat "$current")"
		cat "$current"
		exit 0
	fi
	die "apt-get update failed (is $mirror reachable?)"
fi
# The newest ABI of the flavour that downloads: package names sort by
# version once the numbers are compared as versions, and a mirror may no
# longer serve the newest file the lists name (then the next one).
mapfile -t pkgs < <(apt-cache "${apt_opts[@]}" pkgnames linux-image- | grep -E "$pattern" | sort -rV)
[ ${#pkgs[@]} -gt 0 ] || die "no package matching $pattern in the archive"
start=$(date +%s)
deb=""
for pkg in "${pkgs[@]}"; do
	version=$(apt-cache "${apt_opts[@]}" policy "$pkg" | awk '/Candidate:/ {print $2}')
	[ -n "$version" ] && [ "$version" != "(none)" ] || continue
	dir=$cache/debian-$pkg-$version
	image=$dir/vmlinuz
	if [ -s "$image" ]; then
		log "cached $pkg $version"
		echo "$image" >"$current"
		echo "$image"
		exit 0
	fi
	log "downloading $pkg $version"
	rm -f "$apt_dir"/archives/*.deb
	if (cd "$apt_dir/archives" && apt-get "${apt_opts[@]}" -q download "$pkg=$version" >"$apt_dir/download.log" 2>&1); then
		deb=$(ls "$apt_dir"/archives/*.deb)
		break
	fi
	log "$pkg $version does not download: $(grep -m1 -E '^E:' "$apt_dir/download.log" || tail -n 1 "$apt_dir/download.log")"
done
[ -n "$deb" ] || die "no $want kernel package downloads from $mirror"
mkdir -p "$dir"
# Only the image and its config: the modules are not needed.
tmp=$(mktemp -d "$dir/extract.XXXXXX")
dpkg-deb --fsys-tarfile "$deb" | tar -x -C "$tmp" --wildcards './boot/vmlinuz-*' './boot/config-*'
mv "$tmp"/boot/config-* "$dir/config"
mv "$tmp"/boot/vmlinuz-* "$image.tmp"
rm -rf "$tmp" "$deb"
mv "$image.tmp" "$image"
echo "$image" >"$current"
log "$pkg $version ready in $(($(date +%s) - start))s"
echo "$image"
