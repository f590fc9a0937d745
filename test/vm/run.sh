#!/usr/bin/env bash
# run.sh runs Go test packages inside a qemu VM whose kernel has user_events
# (test/vm/kernel.sh builds it) and reports every test by name.
#
#   test/vm/run.sh [-kernel BZIMAGE] [-arch amd64|arm64] [-hostroot] PACKAGE... [-- TEST-BINARY-FLAGS...]
#   test/vm/run.sh ./userevents ./test/vm/e2e -- -test.run 'TestEnable'
#   test/vm/run.sh -kernel "$(test/vm/distro-kernel.sh 6.1-arm64)" ./internal/kernel
#
# Each package is built as a static test binary (CGO_ENABLED=0 go test -c),
# packed with busybox-static into an initramfs, and run as root in the VM with
# -test.v and SPANWATCH_IN_VM=1 (tests that need user_events fail there
# instead of skipping), and with the words of $SPANWATCH_VM_ENV_<package>
# (the import path under the module, / as _) in its environment, and the
# words of $SPANWATCH_VM_FLAGS_<package> after its flags. The VM is qemu-system-x86_64 -cpu max -smp 2 -m 1G under
# TCG (KVM is unreliable on the machines this runs on); ttyS0 is the kernel
# console (kept in a log), ttyS1 brings the tests' output and exit status
# back (kept in a work directory when the run fails, or with
# SPANWATCH_VM_KEEP=1).
#
# An arm64 kernel (-arch arm64, or an image whose header says ARM64) boots
# in qemu-system-aarch64 -machine virt -cpu cortex-a72, single-threaded
# TCG, with GOARCH=arm64 test binaries, Debian's busybox-static for arm64
# (deps.sh's foreign_busybox) and the C programs built by
# aarch64-linux-gnu-gcc. The virt machine has one UART (pl011, ttyAMA0),
# the kernel console; the tests' output comes back through a PCI serial
# port (pci-serial, ttyS0 in the VM), whose 8250 driver Debian's arm64
# cloud kernels build in (their virtio is a module in 6.1). The VM powers itself off when the tests are done; a host-side timeout
# ($SPANWATCH_VM_TIMEOUT seconds, default 1800) kills qemu otherwise.
#
#
# -hostroot (amd64, the user_events kernel of kernel.sh) runs the tests in
# the host's own root file system instead of the initramfs: qemu shares the
# host's / read-only over virtio-9p, the VM mounts it on /host with proc,
# sys, dev, tracefs, bpffs, cgroup2 and empty tmpfs on /tmp, /run and
# /dev/shm, and runs each test binary chrooted there, in its package's
# directory of this checkout (read-only), with HOME=/tmp/home. The tests
# then run the host's gcc, make, CPython, Node.js, npm and JVM in the VM:
# the SDK tests (sdk/...) show each language's spans over user_events.
# Nothing in the VM can write to the host. The VM has 2 GiB then (a JVM).
#
# The last line of output is "N passed, N failed". The exit status is non-zero
# when a test failed, a test binary crashed, or the VM did not report.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
top=$(cd "$here/../.." && pwd)
timeout_s=${SPANWATCH_VM_TIMEOUT:-1800}
smp=${SPANWATCH_VM_SMP:-2}

log() { printf 'run.sh: %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

kernel=""
arch=""
hostroot=""
pkgs=()
targs=()
while [ $# -gt 0 ]; do
	case "$1" in
	-kernel) kernel=$2; shift 2 ;;
	-arch) arch=$2; shift 2 ;;
	-hostroot) hostroot=1; shift ;;
	--) shift; targs=("$@"); break ;;
	-*) die "unknown flag $1" ;;
	*) pkgs+=("$1"); shift ;;
	esac
done
[ ${#pkgs[@]} -gt 0 ] || die "usage: run.sh [-kernel BZIMAGE] [-arch amd64|arm64] PACKAGE... [-- TEST-BINARY-FLAGS...]"
# shellcheck source=deps.sh
. "$here/deps.sh"
command -v go >/dev/null || die "go not found in PATH"

if [ -z "$kernel" ]; then
	kernel=$("$here/kernel.sh")
fi
[ -s "$kernel" ] || die "kernel image $kernel not found"
# An arm64 Image says "ARM\x64" at byte 56 of its header.
if [ -z "$arch" ]; then
	arch=amd64
	[ "$(od -An -tx1 -j56 -N4 "$kernel" | tr -d ' ')" = 41524d64 ] && arch=arm64
fi
case $arch in
amd64)
	ensure_packages qemu-system-x86 busybox-static cpio gzip || exit 1
	# busybox-static installs a static /bin/busybox (the busybox package a
	# dynamic one, which cannot run in the initramfs).
	busybox=/bin/busybox
	dpkg-query -S "$busybox" 2>/dev/null | grep -q '^busybox-static:' ||
		die "$busybox does not come from busybox-static (apt-get install busybox-static)"
	cc=gcc
	qemu=(qemu-system-x86_64 -cpu max)
	console_dev=ttyS0
	results_dev=/dev/ttyS1
	;;
arm64)
	ensure_packages qemu-system-arm gcc-aarch64-linux-gnu libc6-dev-arm64-cross cpio gzip || exit 1
	busybox=$(foreign_busybox arm64) || die "no busybox-static for arm64"
	cc=aarch64-linux-gnu-gcc
	qemu=(qemu-system-aarch64 -machine virt -cpu cortex-a72)
	console_dev=ttyAMA0
	results_dev=/dev/ttyS0
	;;
*) die "unknown arch $arch: want amd64 or arm64" ;;
esac
# The host's programs run in the VM: they must be of the VM's architecture.
[ -z "$hostroot" ] || [ "$arch" = "$(go env GOHOSTARCH)" ] || die "-hostroot runs the host's programs: the VM's architecture must be the host's ($arch is not)"

work=$(mktemp -d "${TMPDIR:-/tmp}/spanwatch-vm.XXXXXX")
keep=${SPANWATCH_VM_KEEP:-}
cleanup() { [ -n "$keep" ] || rm -rf "$work"; }
trap cleanup EXIT
root=$work/root
mkdir -p "$root"/{bin,dev,etc,proc,sys,tmp,tests}
cp "$busybox" "$root/bin/busybox"
# A host name file: tests read /etc/hostname as a file that is not ELF.
echo spanwatch-vm >"$root/etc/hostname"

# Build each package's test binary; run them in the VM from a directory
# holding the package's testdata, as go test would.
start=$(date +%s)
names=()
dirs=()
mapfile -t listed < <(cd "$top" && go list -f '{{.ImportPath}} {{.Dir}}' "${pkgs[@]}")
[ ${#listed[@]} -gt 0 ] || die "no packages match ${pkgs[*]}"
for line in "${listed[@]}"; do
	import=${line%% *}
	dir=${line#* }
	pkg=$import
	name=${import#github.com/spanwatch/spanwatch/}
	name=${name//\//_}
	mkdir -p "$root/tests/$name"
	(cd "$top" && CGO_ENABLED=0 GOARCH=$arch go test -c -o "$root/tests/$name/$name.test" "$pkg") ||
		die "build test binary for $pkg failed"
	if [ ! -f "$root/tests/$name/$name.test" ]; then
		log "$pkg has no tests; skipped"
		rm -rf "${root:?}/tests/$name"
		continue
	fi
	[ -d "$dir/testdata" ] && cp -r "$dir/testdata" "$root/tests/$name/"
	# The environment of one package's tests: SPANWATCH_VM_ENV_<name>
	# (its import path under the module, / as _), e.g.
	# SPANWATCH_VM_ENV_collector=SPANWATCH_EMIT=marker.
	envvar=SPANWATCH_VM_ENV_$name
	[ -n "${!envvar:-}" ] && printf '%s\n' "${!envvar}" >"$root/tests/$name/env"
	# Flags for one package's test binary, after the run's own:
	# SPANWATCH_VM_FLAGS_<name>, e.g. SPANWATCH_VM_FLAGS_collector='-test.run ^TestCore'
	# (words split on blanks).
	flagvar=SPANWATCH_VM_FLAGS_$name
	[ -n "${!flagvar:-}" ] && printf '%s\n' "${!flagvar}" >"$root/tests/$name/flags"
	# Files a package's tests read beside their sources (JSON Schemas;
	# ./bpf's committed objects of both architectures, whose BTF
	# TestObjectsPtRegs reads).
	find "$dir" -maxdepth 1 \( -name '*.json' -o -name '*.o' \) -exec cp {} "$root/tests/$name/" \;
	names+=("$name")
	dirs+=("$dir")
done
[ ${#names[@]} -gt 0 ] || die "no test binaries to run"
# The C headers that tests compare their Go mirrors with (./bpf's own,
# ../bpf/span_event.h from ./emit).
mkdir -p "$root/tests/bpf"
cp "$top"/bpf/*.h "$root/tests/bpf/"
log "built ${#names[@]} test binaries in $(($(date +%s) - start))s"

# The spanwatch binary, for the end-to-end tests of the agent
# (test/vm/agent): static, as a release builds it.
for import in "${listed[@]}"; do
	case ${import%% *} in */test/vm/agent)
		(cd "$top" && CGO_ENABLED=0 GOARCH=$arch go build -o "$root/bin/spanwatch" ./cmd/spanwatch) || die "build spanwatch failed"
		;;
	esac
done

# The C programs the tests run (internal/bpftest.CProgram): the VM has no
# compiler, so every program of the list is built here, as distributions
# build them (dynamically linked), with the C library and the dynamic
# loader beside them in the VM. For arm64, aarch64-linux-gnu-gcc builds
# them against Debian's arm64 cross C library, with the machine's
# sys/sdt.h (the same header serves every architecture); a program
# written in x86-64 assembly does not build there, and the tests that run
# it fail in the VM saying it was not built.
cprog=$root/cprograms
mkdir -p "$cprog"
cflags=()
if [ "$arch" = arm64 ]; then
	for sdt in /usr/include/x86_64-linux-gnu/sys /usr/include/sys; do
		[ -e "$sdt/sdt.h" ] || continue
		mkdir -p "$work/include/sys"
		cp "$sdt"/sdt*.h "$work/include/sys/"
		cflags=(-I "$work/include")
		break
	done
fi
if [ -n "$hostroot" ]; then
	: # the host's own programs and libraries are there
elif command -v "$cc" >/dev/null; then
	while read -r pname pargs; do
		case $pname in '' | '#'*) continue ;; esac
		read -ra words <<<"$pargs" # split on blanks, nothing expanded
		args=()
		for a in "${words[@]}"; do
			a=${a//\{out\}/$cprog/$pname}
			args+=("${a//\{dir\}/$cprog}")
		done
		if [ "$arch" = amd64 ]; then
			(cd "$top" && gcc "${args[@]}") || die "build C program $pname failed"
		elif ! (cd "$top" && "$cc" "${cflags[@]}" "${args[@]}") 2>"$work/cc.log"; then
			log "C program $pname does not build for $arch: $(grep -m1 -E 'error|Error' "$work/cc.log")"
		fi
	done <"$top/test/vm/cprograms.txt"
	if [ "$arch" = amd64 ]; then
		for lib in $(ldd "$cprog"/* 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// && $1 !~ /:$/ {print $1}' | sort -u); do
			case $lib in "$cprog"/*) continue ;; esac
			mkdir -p "$root$(dirname "$lib")"
			cp -L "$lib" "$root$lib"
		done
		# The loader's canonical path on x86-64.
		if [ -e /lib64/ld-linux-x86-64.so.2 ]; then
			mkdir -p "$root/lib64"
			cp -L /lib64/ld-linux-x86-64.so.2 "$root/lib64/"
		fi
	else
		# The cross C library's loader and the libraries the programs
		# name (ldd cannot run them), in /lib, where the loader looks.
		crosslib=/usr/aarch64-linux-gnu/lib
		mkdir -p "$root/lib"
		cp -L "$crosslib/ld-linux-aarch64.so.1" "$root/lib/"
		for lib in $(aarch64-linux-gnu-readelf -d "$cprog"/* 2>/dev/null | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | sort -u); do
			[ -e "$cprog/$lib" ] && continue
			[ -e "$crosslib/$lib" ] && cp -L "$crosslib/$lib" "$root/lib/"
		done
	fi
else
	log "no $cc: the tests that run C programs will fail in the VM"
fi

# The Go programs the tests run (test/vm/goprograms.txt), for the VM's
# architecture: the VM has no go command either.
if [ -z "$hostroot" ]; then
	mkdir -p "$root/goprograms"
	while read -r gname gpkg; do
		case $gname in '' | '#'*) continue ;; esac
		(cd "$top" && CGO_ENABLED=0 GOARCH=$arch go build -o "$root/goprograms/$gname" "$gpkg") ||
			die "build Go program $gname failed"
	done <"$top/test/vm/goprograms.txt"
fi

# The test binaries' flags, quoted for the init script.
flags=""
for a in "${targs[@]}"; do
	flags+=" '${a//\'/\'\\\'\'}'"
done

if [ -n "$hostroot" ]; then
	# Each package's directory, in the order of names.
	runs=""
	for i in "${!names[@]}"; do
		runs+="${names[$i]}:${dirs[$i]} "
	done
	cat >"$root/init" <<EOF
#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/bin
mount -t devtmpfs dev /dev
exec </dev/console >/dev/console 2>&1
mount -t proc proc /proc
out=$results_dev
stty -F \$out raw -echo 2>/dev/null
fail() {
	echo "SPANWATCH-VM: BOOTED \$(uname -r) cpus=\$(nproc)" >\$out
	echo "run.sh in the VM: \$*" | tee \$out
	echo "SPANWATCH-VM: DONE" >\$out
	sync; echo o >/proc/sysrq-trigger; sleep 10; exit 1
}
mkdir -p /host
mount -t 9p -o trans=virtio,version=9p2000.L,ro,cache=loose hostroot /host || fail "mounting the host's root over 9p failed (a kernel without CONFIG_9P_FS and CONFIG_NET_9P_VIRTIO?)"
h=/host
mount -t proc proc \$h/proc &&
	mount -t sysfs sys \$h/sys &&
	mount -t devtmpfs dev \$h/dev &&
	mkdir -p \$h/dev/shm && mount -t tmpfs shm \$h/dev/shm &&
	mount -t tmpfs tmp \$h/tmp &&
	mount -t tmpfs run \$h/run &&
	mount -t tracefs nodev \$h/sys/kernel/tracing &&
	mount -t bpf bpf \$h/sys/fs/bpf &&
	mount -t cgroup2 cgroup2 \$h/sys/fs/cgroup &&
	mkdir -p \$h/run/spanwatch-vm \$h/tmp/home &&
	mount -o bind /tests \$h/run/spanwatch-vm || fail "mounting the file systems under the host's root failed"
echo "SPANWATCH-VM: BOOTED \$(uname -r) cpus=\$(nproc) hostroot" >\$out
for run in $runs; do
	name=\${run%%:*}
	dir=\${run#*:}
	echo "SPANWATCH-VM: BEGIN \$name" >\$out
	chroot \$h /usr/bin/env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/tmp/home \\
		SPANWATCH_IN_VM=1 \$(cat /tests/\$name/env 2>/dev/null) \\
		/bin/sh -c 'cd "\$0" && exec "\$@"' "\$dir" /run/spanwatch-vm/\$name/\$name.test -test.v -test.timeout=20m$flags \$(cat /tests/\$name/flags 2>/dev/null) >\$out 2>&1
	echo "SPANWATCH-VM: END \$name rc=\$?" >\$out
done
echo "SPANWATCH-VM: DONE" >\$out
sync
echo o >/proc/sysrq-trigger
sleep 10
EOF
else
	cat >"$root/init" <<EOF
#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/bin HOME=/tmp SPANWATCH_IN_VM=1 SPANWATCH_VM_CPROGRAMS=/cprograms SPANWATCH_VM_GOPROGRAMS=/goprograms SPANWATCH_BIN=/bin/spanwatch
mount -t devtmpfs dev /dev
exec </dev/console >/dev/console 2>&1
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t tmpfs tmp /tmp
mount -t tracefs nodev /sys/kernel/tracing
mount -t bpf bpf /sys/fs/bpf
mount -t cgroup2 cgroup2 /sys/fs/cgroup
out=$results_dev
stty -F \$out raw -echo 2>/dev/null
echo "SPANWATCH-VM: BOOTED \$(uname -r) cpus=\$(nproc)" >\$out
for name in ${names[*]}; do
	echo "SPANWATCH-VM: BEGIN \$name" >\$out
	cd /tests/\$name
	env \$(cat /tests/\$name/env 2>/dev/null) ./\$name.test -test.v -test.timeout=20m$flags \$(cat /tests/\$name/flags 2>/dev/null) >\$out 2>&1
	echo "SPANWATCH-VM: END \$name rc=\$?" >\$out
done
echo "SPANWATCH-VM: DONE" >\$out
sync
echo o >/proc/sysrq-trigger
sleep 10
EOF
fi
chmod +x "$root/init"
(cd "$root" && find . | cpio -o -H newc --quiet | gzip -1) >"$work/initramfs.gz"

console=$work/console.log
results=$work/results.log
: >"$results"
log "booting $kernel ($arch) with $smp vCPUs (TCG), timeout ${timeout_s}s"
# panic=-1 with -no-reboot ends qemu if init dies before powering off.
# amd64: the second serial port brings the results; arm64: a PCI one.
results_port=(-serial "file:$results")
mem=1G
share=()
if [ -n "$hostroot" ]; then
	mem=2G
	share=(-virtfs local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap)
fi
[ "$arch" = arm64 ] && results_port=(-chardev "file,id=results,path=$results" -device pci-serial,chardev=results)
timeout --kill-after=10 "$timeout_s" "${qemu[@]}" \
	-accel tcg,thread=single -smp "$smp" -m "$mem" "${share[@]}" \
	-nodefaults -no-user-config -display none -no-reboot \
	-kernel "$kernel" -initrd "$work/initramfs.gz" \
	-append "console=$console_dev panic=-1 loglevel=4" \
	-serial "file:$console" "${results_port[@]}" &
qpid=$!
# Show the tests' output as it comes, unless asked to be quiet.
if [ "${SPANWATCH_VM_QUIET:-0}" = 0 ]; then
	tail -n +1 -f --pid="$qpid" "$results" | sed -u 's/\r$//' >&2 &
fi
set +e
wait "$qpid"
qemu_rc=$?
set -e
wait # for tail, which ends once qemu has
elapsed=$(($(date +%s) - start))
if [ $qemu_rc -eq 124 ] || [ $qemu_rc -eq 137 ]; then
	log "qemu timed out after ${timeout_s}s and was killed"
fi

# Summarize: one line per top-level test, "PASS pkg Test (1.2s)".
set +e
tr -d '\r' <"$results" | awk -v qemu_rc="$qemu_rc" '
	/^SPANWATCH-VM: BOOTED/ { booted = 1; print "vm: " substr($0, 22) }
	/^SPANWATCH-VM: BEGIN / { pkg = $3; delete running; ended = 0; next }
	/^SPANWATCH-VM: END / {
		follow = 0
		rc = substr($4, 4) + 0
		ended = 1
		failed_here = 0
		for (t in running) {
			print "FAIL  " pkg " " t " (no result: the test binary crashed or timed out)"
			printf "%s", out
			failed++; failed_here++
		}
		if (rc != 0 && pkg_failed[pkg] + failed_here == 0) {
			print "FAIL  " pkg " (test binary exited with status " rc ")"
			failed++
		}
		delete running
		pkg = ""
		next
	}
	/^SPANWATCH-VM: DONE/ { done = 1; next }
	pkg != "" && /^=== RUN   [^\/]+$/ { running[$3] = 1; out = ""; follow = 0; next }
	# What a failed test prints after its result line (a panic) goes with it.
	follow > 0 && follow <= 60 && pkg != "" && !/^SPANWATCH-VM: / { print "      " $0; follow++ }
	pkg != "" && /^--- (PASS|FAIL|SKIP): [^\/]+ / {
		res = substr($2, 1, 4); t = $3
		delete running[t]
		dur = $4
		if (res == "PASS") { passed++; print "PASS  " pkg " " t " " dur }
		if (res == "FAIL") { failed++; pkg_failed[pkg]++; print "FAIL  " pkg " " t " " dur; printf "%s", out; follow = 1 }
		if (res == "SKIP") { skipped++; print "SKIP  " pkg " " t " " dur }
		out = ""
		next
	}
	pkg != "" { out = out "      " $0 "\n" }
	END {
		if (pkg != "") {
			for (t in running) { print "FAIL  " pkg " " t " (no result: the VM stopped during it)"; failed++ }
			print "FAIL  " pkg " (the VM stopped before the test binary ended)"; failed++
		}
		if (!booted) { print "FAIL  the VM did not boot or did not report (see the console log)"; failed++ }
		else if (!done) { print "FAIL  the VM did not finish the run (qemu exit status " qemu_rc ")"; failed++ }
		if (passed + failed + skipped == 0) { print "FAIL  no test reported a result"; failed++ }
		printf "%d skipped\n", skipped
		printf "%d passed, %d failed\n", passed, failed
		exit failed > 0 ? 1 : 0
	}' >"$work/summary"
summary_rc=${PIPESTATUS[1]}
set -e
# The whole output, for test/vm/matrix.sh.
[ -n "${SPANWATCH_VM_RESULTS:-}" ] && tr -d '\r' <"$results" >"$SPANWATCH_VM_RESULTS"
if [ $summary_rc -ne 0 ]; then
	log "kernel console (last 30 lines of $console):"
	tail -n 30 "$console" | tr -d '\r' >&2
	keep=1 # for a look at the whole console and results
fi
[ -n "$keep" ] && log "kept $work (initramfs, console.log, results.log)"
log "VM run took ${elapsed}s"
cat "$work/summary"
exit $summary_rc
