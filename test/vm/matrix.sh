#!/usr/bin/env bash
# matrix.sh runs spanwatch's BPF tests and the agent end to end on every
# kernel of the matrix, and checks (or writes) docs/kernels.md from what
# they found:
#
#   5.10        Debian 11's stock kernel (compat BPF objects)
#   6.1         Debian 12's stock kernel
#   6.12        Debian 12's 6.12
#   6.12-rt     the same with PREEMPT_RT
#   userevents  6.12 from linux-source-6.12, tinyconfig + user_events
#               (kernel.sh), with the user_events tests
#   6.1-arm64   Debian 12's stock kernel for arm64 (qemu's virt machine)
#   6.12-arm64  Debian 12's 6.12 for arm64
#   host        the machine itself (its proof tests only: ./test.sh runs
#               every package here anyway)
#
#   test/vm/matrix.sh                       every kernel, the docs checked
#   test/vm/matrix.sh 5.10 6.1              some kernels (the docs are not checked)
#   test/vm/matrix.sh 6.1-arm64 6.12-arm64  the arm64 lanes
#   test/vm/matrix.sh --update-docs         every kernel, the docs written
#
# The docs are docs/kernels.md and the kernel tables in README.md and
# docs/sources.md.
#   test/vm/matrix.sh 6.1 -- -test.run X    flags for the test binaries
#
# Each kernel's output is kept in $SPANWATCH_VM_MATRIX (default
# /tmp/spanwatch-matrix) as KERNEL.log; the last line says each kernel's
# counts. Exits non-zero when a test failed, a VM did not report, or a
# feature's state and its test disagree (test/vm/matrixdoc).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
top=$(cd "$here/../.." && pwd)
cd "$top"
export PATH=$PATH:/usr/local/go/bin
out=${SPANWATCH_VM_MATRIX:-/tmp/spanwatch-matrix}
# The arm64 lanes (Debian's 6.1 and 6.12 for arm64, in qemu-system-aarch64's
# virt machine) come before host, so that docs/kernels.md has their
# columns. Together they add about 11 minutes to the matrix (2 lanes at
# once, each 7 to 12 minutes under TCG on a loaded 2-core host with the
# test set below).
arm64_lanes=(6.1-arm64 6.12-arm64)
# userevents-sdk runs the SDK tests on the user_events kernel in the host's
# own root file system (run.sh -hostroot): a C, a Python, a Node.js and a
# Java service, each with the host's compiler and runtime, sending their
# spans over user_events. It is no column of docs/kernels.md.
all=(5.10 6.1 6.12 6.12-rt userevents userevents-sdk "${arm64_lanes[@]}" host)

log() { printf 'matrix.sh: %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

kernels=()
update=0
targs=()
while [ $# -gt 0 ]; do
	case $1 in
	--update-docs) update=1; shift ;;
	--) shift; targs=("$@"); break ;;
	-*) die "unknown flag $1" ;;
	*) kernels+=("$1"); shift ;;
	esac
done
whole=0
if [ ${#kernels[@]} -eq 0 ]; then
	kernels=("${all[@]}")
	whole=1
fi
[ "$(id -u)" -eq 0 ] || die "needs root (the VM kernels' cache, apt-get for missing packages, BPF on the host)"
mkdir -p "$out"

# The packages whose tests load BPF, and the agent's end-to-end tests; on
# the user_events kernel, the user_events tests too.
bpf_pkgs=(./bpf ./internal/kernel ./collector ./source/tracepoint ./internal/perftp ./internal/usdt ./internal/usdt/vmtest ./internal/inflight ./internal/srcspec ./emit ./test/vm/agent)
ue_pkgs=(./userevents ./test/vm/e2e ./include)

# The tests that show each feature's row on the host (the VM kernels run
# every test of bpf_pkgs).
host_tests='^(TestCore|TestMarker|TestCMarker|TestUSDT|TestArgsInBPF|TestNamesOnAbsentPages|TestStuckSpan|TestKernelReport|TestDemo|TestProbe)'

# Function spans (./source/function) need the full core (5.17+): they run
# on the 6.1 and 6.12 lanes of both architectures, not on 5.10, and there
# only the tests that show them working with programs cross-built before
# boot (C by the VM's gcc, Go by GOARCH): exact counts with a budget, C
# results and parameters by DWARF name, Go arguments and results, and
# Go's goroutine pairing under stack growth, recursion and recovered
# panics (3 s, -test.short), and returns: uretprobe's exact counts and
# results (the stack pointer at the return differs by architecture):
# about 3 minutes on arm64 under TCG.
# TestArgsC and TestParamsGo pass there too (docs/functions.md) but add
# a minute and show nothing the others do not. The package's other
# tests parse files (the same code on every kernel) or need programs the
# VM has not (PostgreSQL, prometheus).
function_pkgs=(./source/function)
function_lanes=" 6.1 6.12 6.1-arm64 6.12-arm64 "
function_flags='SPANWATCH_VM_FLAGS_source_function=-test.run ^(TestExactCounts|TestParamsC|TestArgsGo|TestGoStress|TestUretprobeExactCounts|TestUretprobeParamsC)$ -test.short'

# On arm64 every package of bpf_pkgs runs, but of ./collector and
# ./source/tracepoint only the tests that show a feature's row (and
# TestEventHeaderSources): their others test the maps' growth and
# eviction and the event-header decoder, the same code on either
# architecture, and cost an amd64 6.1 lane 126 of its 490 s (collector's
# other tests 77 s, source/tracepoint's 49 s). An arm64 guest under TCG
# runs plain Go about as fast as an amd64 guest (internal/kernel,
# internal/srcspec), but the BPF tests 1.4 to 2.3 times slower
# (collector's TestCore, TestMarker and TestCMarker tests 238 to 328 s
# against 105 to 155 s, TestDemo 31 s against 23 s, on a loaded 2-core
# host): with every test an arm64 lane would take twice an amd64 one.
arm64_flags=(
	"SPANWATCH_VM_FLAGS_collector=-test.run $host_tests"
	"SPANWATCH_VM_FLAGS_source_tracepoint=-test.run ^TestEventHeaderSources\$"
	"$function_flags"
)

# The static programs of the user_events tests (the VM has no compiler;
# the other C programs come from test/vm/cprograms.txt, built by run.sh).
user_events_programs() {
	mkdir -p include/testdata
	gcc -static -O2 -Wall -Werror -o include/testdata/spanwatch_test.static include/test/spanwatch_test.c
	gcc -static -O2 -g -fno-omit-frame-pointer -Wall -Werror -o test/vm/e2e/testdata/uevprog.static test/vm/e2e/testdata/uevprog.c
}

# The SDK lane's packages, their tests, and the npm cache the Node.js test
# installs from in the VM (no network there): filled here from the
# registry, once per package-lock.json.
sdk_pkgs=(./sdk/c ./sdk/python ./sdk/node ./sdk/java)
sdk_tests='^TestService$'
npm_cache=/var/cache/spanwatch-vm/npm
fill_npm_cache() {
	local app
	command -v npm >/dev/null || { log "no npm: the Node.js SDK test will fail in the VM"; return 0; }
	app=$(mktemp -d)
	cp sdk/node/testdata/package.json sdk/node/testdata/package-lock.json "$app/"
	if ! (cd "$app" && npm ci --ignore-scripts --no-audit --no-fund --cache "$npm_cache") >"$out/npm-cache.log" 2>&1; then
		log "filling the npm cache failed (see $out/npm-cache.log): the Node.js SDK test will fail in the VM"
	fi
	rm -rf "$app"
}

# run_kernel runs one kernel's tests: $out/KERNEL.log is their output,
# $out/KERNEL.summary run.sh's, $out/KERNEL.result one line for the end.
run_kernel() {
	local k=$1 res=$out/$1.log start rc
	start=$(date +%s)
	case $k in
	host)
		# The host in the VM runs' format, for matrixdoc; in a mount
		# namespace of its own, as ./test.sh runs the tests: what the
		# collector mounts (tracefs) goes away with it.
		local private=()
		command -v unshare >/dev/null && private=(unshare --mount --propagation private)
		{
			echo "SPANWATCH-VM: BOOTED $(uname -r) cpus=$(nproc)"
			for pkg in "${bpf_pkgs[@]}"; do
				name=${pkg#./}
				echo "SPANWATCH-VM: BEGIN ${name//\//_}"
				set +e
				"${private[@]}" go test -count=1 -v -timeout 20m -run "$host_tests" "$pkg" "${targs[@]}" 2>&1
				rc=$?
				set -e
				echo "SPANWATCH-VM: END ${name//\//_} rc=$rc"
			done
			echo "SPANWATCH-VM: DONE"
		} >"$res"
		if grep -q '^--- FAIL\|^FAIL' "$res"; then
			echo "host: FAIL ($(grep -c '^--- FAIL' "$res") tests) in $(($(date +%s) - start))s" >"$out/$k.result"
			return 1
		fi
		echo "host: $(grep -c '^--- PASS' "$res") passed, $(grep -c '^--- SKIP' "$res") skipped in $(($(date +%s) - start))s" >"$out/$k.result"
		return 0
		;;
	esac
	local pkgs=("${bpf_pkgs[@]}") env=() image opts=() args=("${targs[@]}")
	case $k in *-arm64) env=("${arm64_flags[@]}") ;; esac
	if [[ $function_lanes == *" $k "* ]]; then
		pkgs+=("${function_pkgs[@]}")
		[[ $k == *-arm64 ]] || env+=("$function_flags")
	fi
	if [ "$k" = userevents-sdk ]; then
		image=$(test/vm/kernel.sh)
		pkgs=("${sdk_pkgs[@]}")
		opts=(-hostroot)
		[ ${#args[@]} -gt 0 ] || args=(-test.run "$sdk_tests")
		env=("SPANWATCH_VM_ENV_sdk_node=SPANWATCH_NPM_CACHE=$npm_cache SPANWATCH_NPM_OFFLINE=1")
	elif [ "$k" = userevents ]; then
		image=$(test/vm/kernel.sh)
		pkgs+=("${ue_pkgs[@]}")
		# The span SDK prefers user_events there: the collector's marker
		# tests use the marker as told.
		env=(SPANWATCH_VM_ENV_collector=SPANWATCH_EMIT=marker)
	else
		image=$(test/vm/distro-kernel.sh "$k")
	fi
	log "$k: $image"
	set +e
	env "${env[@]}" SPANWATCH_VM_RESULTS="$res" SPANWATCH_VM_QUIET="${SPANWATCH_VM_QUIET:-1}" \
		test/vm/run.sh -kernel "$image" "${opts[@]}" "${pkgs[@]}" -- "${args[@]}" >"$out/$k.summary" 2>&1
	rc=$?
	set -e
	echo "$k: $(tail -n 1 "$out/$k.summary") in $(($(date +%s) - start))s" >"$out/$k.result"
	if [ $rc -ne 0 ]; then
		grep -E '^(FAIL|run.sh:)' "$out/$k.summary" >&2 || true
	fi
	return $rc
}

# The VM kernels, $SPANWATCH_VM_JOBS at once (default: one per CPU: a VM
# under single-threaded TCG is one host thread), the longest first so that
# they end together (6.12-rt, slowest under TCG, and the user_events
# kernel, built on first use; the arm64 kernels between 6.1 and 6.12),
# then the host alone, whose tests are timed.
jobs=${SPANWATCH_VM_JOBS:-$(nproc)}
[[ " ${kernels[*]} " == *" userevents "* ]] && user_events_programs
[[ " ${kernels[*]} " == *" userevents-sdk "* ]] && fill_npm_cache
status=0
results=()
running=0
order=()
for k in 6.12-rt userevents 6.1 "${arm64_lanes[@]}" 6.12 userevents-sdk 5.10; do
	[[ " ${kernels[*]} " == *" $k "* ]] && order+=("$k")
done
for k in "${kernels[@]}"; do
	[ "$k" = userevents-sdk ] || results+=("$k=$out/$k.log")
	[[ $k == host || " ${order[*]} " == *" $k "* ]] || order+=("$k")
done

for k in "${order[@]}"; do
	run_kernel "$k" &
	running=$((running + 1))
	if [ $running -ge "$jobs" ]; then
		wait -n || status=1
		running=$((running - 1))
	fi
done
while [ $running -gt 0 ]; do
	wait -n || status=1
	running=$((running - 1))
done
if [[ " ${kernels[*]} " == *" host "* ]]; then
	run_kernel host || status=1
fi
summary=()
for k in "${kernels[@]}"; do
	summary+=("$(cat "$out/$k.result" 2>/dev/null || echo "$k: no result")")
done

# Each feature's state against its test on each kernel, and the docs.
doc=(-check)
[ $update -eq 1 ] && doc=(-write)
[ $whole -eq 1 ] || doc=()
# (userevents-sdk alone has no column: then there is no table to make.)
if [ ${#results[@]} -gt 0 ] && ! go run ./test/vm/matrixdoc "${doc[@]}" "${results[@]}" >"$out/kernels.md"; then
	status=1
fi
for s in "${summary[@]}"; do
	log "$s"
done
exit $status
