#!/usr/bin/env bash
# run-all.sh runs spanwatch's tests on the user_events kernel (kernel.sh
# builds it, or reuses the cached one): the user_events tests, the BPF
# tests and the agent end to end. It is test/vm/matrix.sh for that kernel
# alone; ./test.sh runs the whole matrix.
#
#   test/vm/run-all.sh                          the tests
#   test/vm/run-all.sh -- -test.run TestKprobe  flags for the test binaries
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
exec "$here/matrix.sh" userevents "$@"
