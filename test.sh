#!/usr/bin/env bash
# spanwatch's test suite: what CI runs (.ci/run) and what the README tells
# you to run. As root it runs everything: the real BPF tests on this kernel,
# and the kernel matrix: the BPF tests and the agent end to end in VMs
# booting Debian's stock kernels (5.10, 6.1, 6.12, 6.12-rt) and a kernel
# with user_events (built on first use and cached), checked against
# docs/kernels.md (see test/vm/README.md). Then it runs every package
# again under the race detector (-race -short, about 5 minutes on 2 cores).
# As another user the tests that need root skip and say why. It fails on a
# build artefact tracked in git and on a tree that does not build for arm64
# or for another system (darwin).
#
#   ./test.sh            everything
#   ./test.sh --no-vm    skip the VM (for a quick run)
set -euo pipefail
cd "$(dirname "$0")"
export PATH=$PATH:/usr/local/go/bin

vm=1
for a in "$@"; do
	case $a in
	--no-vm) vm=0 ;;
	*) echo "usage: ./test.sh [--no-vm]" >&2; exit 2 ;;
	esac
done

step() { printf '\n=== %s\n' "$*"; }

# Tests never change the machine they run on. What they could change is
# recorded now and checked when the script ends, however it ends: the
# device nodes they use (a test run as root once replaced /dev/null with a
# regular file: zsh's compinit writing its dump over it), the sysctls BPF
# tests touch (statistics are switched on with BPF_ENABLE_STATS, an fd the
# kernel closes, never with the sysctl), and the host's mounts of the
# kinds the agent makes (tracefs: the collector mounts it where it is
# missing, which is why the tests run in a mount namespace of their own,
# below).
devices=(/dev/null /dev/zero /dev/full /dev/random /dev/urandom)
sysctls=(kernel.bpf_stats_enabled kernel.perf_event_paranoid kernel.unprivileged_bpf_disabled kernel.kptr_restrict kernel.perf_event_max_stack)
machine_state() {
	stat -c '%n %F %t:%T %a' "${devices[@]}" 2>&1
	for s in "${sysctls[@]}"; do
		echo "$s = $(cat "/proc/sys/${s//.//}" 2>/dev/null)"
	done
	# The host's mount namespace (init's), whatever namespace this runs in.
	awk '{ for (i = 7; $i != "-"; i++); if ($(i+1) ~ /^(tracefs|debugfs|bpf|tmpfs)$/) print "mount", $5, $(i+1) }' /proc/1/mountinfo 2>/dev/null | sort
}
devices_before=$(machine_state)
check_devices() {
	local rc=$? now
	now=$(machine_state)
	if [[ $now != "$devices_before" ]]; then
		echo "test.sh: the machine changed during the run (a test changed it; or, for a mount or sysctl, something else on the machine did):" >&2
		diff <(echo "$devices_before") <(echo "$now") >&2 || true
		exit 1
	fi
	exit $rc
}
trap check_devices EXIT

if [[ $(id -u) -eq 0 ]]; then
	step "install dependencies"
	.ci/install-deps.sh
fi

# As root the tests, and the demo, run in a mount namespace of their own
# (mounts private): what the agent mounts there (tracefs) goes away with
# them instead of staying on the machine.
private=()
if [[ $(id -u) -eq 0 ]] && command -v unshare >/dev/null; then
	private=(unshare --mount --propagation private)
fi

step "no build artefacts tracked in git (.ci/tracked-artefacts.sh)"
.ci/tracked-artefacts.sh

step "go vet"
go vet ./...

step "arm64 cross-build (GOARCH=arm64 go build ./... && go vet ./...)"
# BPF attaching on arm64 may be refused at run time (say where); the tree
# must build and vet for it.
GOARCH=arm64 go build ./...
GOARCH=arm64 go vet ./...

step "other systems build (GOOS=darwin go build ./...)"
# The agent needs Linux; its packages (config, policy, detector, notify,
# snapshot, the SDKs) are used elsewhere too, in `spanwatch check` on a
# laptop and in the tests of other tools: they must build there.
GOOS=darwin go build ./...

step "generated BPF objects are up to date (go generate ./bpf/...)"
if command -v clang >/dev/null; then
	go generate ./bpf/...
	if ! git diff --quiet -- bpf/; then
		git --no-pager diff --stat -- bpf/
		echo "go generate changed bpf/: commit the regenerated files" >&2
		exit 1
	fi
else
	echo "skipped: clang is not installed"
fi

step "go test ./... (real BPF on this kernel as root)"
if ! "${private[@]}" go test -count=1 -timeout 20m ./... 2>&1 | tee /tmp/spanwatch-gotest.log; then
	echo "go test failed (log: /tmp/spanwatch-gotest.log)" >&2
	exit 1
fi

step "go test -race -short ./... (real BPF on this kernel as root)"
# Every package, as root with its BPF tests: the races that matter are
# between the collector's goroutines and the kernel objects they share.
# -short leaves out the tests that only build or start other programs
# (the release binaries and image, Prometheus, the event-header stress
# run); the step above runs them: among them deploy/release.sh's
# binaries for amd64 and arm64 and its OCI image, run under runc. The
# Helm chart's tests (helm lint and template, kubectl-validate: built by
# deploy/tools.sh) run in both.
if ! "${private[@]}" go test -race -short -count=1 -timeout 30m ./... 2>&1 | tee /tmp/spanwatch-race.log; then
	echo "go test -race failed (log: /tmp/spanwatch-race.log)" >&2
	exit 1
fi

step "spanwatch demo (built-in config and workload)"
if [[ $(id -u) -eq 0 ]]; then
	"${private[@]}" go run ./cmd/spanwatch demo --duration 3s > /tmp/spanwatch-demo.log 2>&1 || { cat /tmp/spanwatch-demo.log; exit 1; }
	tail -n 2 /tmp/spanwatch-demo.log
else
	echo "skipped: the demo loads BPF and needs root"
fi

if [[ $vm -eq 1 ]]; then
	step "the kernel matrix in VMs: Debian's 5.10, 6.1, 6.12, 6.12-rt, the user_events kernel (and the C, Python, Node.js and Java SDKs on it), Debian's 6.1 and 6.12 for arm64, the host (test/vm/matrix.sh)"
	if [[ $(id -u) -eq 0 ]]; then
		test/vm/matrix.sh
	else
		echo "skipped: fetching the VM kernels and booting them needs root (apt-get, the kernel cache)"
	fi
fi

echo
echo "all test steps passed"
