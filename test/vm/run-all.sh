#!/usr/bin/env bash
# run-all.sh runs spanwatch's user_events tests in a VM: what ./test.sh (and
# so CI) runs. It builds the VM kernel or reuses the cached one
# (kernel.sh), then runs the packages below with run.sh, which reports each
# test by name and ends with "N passed, N failed". Exits non-zero if a test
# failed or the VM did not report.
#
#   test/vm/run-all.sh                         the default packages
#   test/vm/run-all.sh -- -test.run TestKprobe  flags for the test binaries
#
# Needs root (apt-get for missing packages, the kernel cache under
# /var/cache/spanwatch-vm; set SPANWATCH_VM_CACHE to put it elsewhere).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cd "$here/../.."

# The packages whose tests need user_events: the ABI package itself, the
# end-to-end tests of the span SDK and the collector, and the C emitter.
pkgs=(./userevents ./test/vm/e2e ./include ./internal/usdt/vmtest)

# The C emitter's end-to-end test runs a C program; the VM has no compiler,
# so it gets a static build in the package's testdata.
mkdir -p include/testdata
gcc -static -O2 -Wall -Werror -o include/testdata/spanwatch_test.static include/test/spanwatch_test.c
# A program that registers its own user_events with the kernel's ABI, for
# the user_events sources (frame pointers: its stacks are walked in BPF).
gcc -static -O2 -g -fno-omit-frame-pointer -Wall -Werror -o test/vm/e2e/testdata/uevprog.static test/vm/e2e/testdata/uevprog.c
# A service with USDT probes, for names read by sleepable programs.
mkdir -p internal/usdt/vmtest/testdata
gcc -static -O2 -g -fno-omit-frame-pointer -o internal/usdt/vmtest/testdata/service.static internal/usdt/testdata/service.c

start=$(date +%s)
kernel=$(test/vm/kernel.sh)
echo "run-all.sh: kernel ready after $(($(date +%s) - start))s: $kernel" >&2
status=0
test/vm/run.sh -kernel "$kernel" "${pkgs[@]}" "$@" || status=$?
echo "run-all.sh: VM tests took $(($(date +%s) - start))s in all" >&2
exit $status
