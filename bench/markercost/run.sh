#!/bin/sh
# Where the Go marker's BPF program (uprobe_marker) spends its time, by
# stages (issue 28, goal 2; the figures are in BENCHMARKS.md): the program
# cut short after each stage, built from a copy of this commit with
# stages.patch applied, each attached to the Go SDK's marker by
# BenchmarkMarkerVsBareUprobe, which reports the program's own time per
# run from the kernel's BPF statistics. The rounds alternate the stages,
# so that the machine's load falls on all of them alike; compare the
# smallest figure of each stage (preemption only adds time).
#
#   0  returns at once (the program's entry and the statistics)
#   1  reads the event's address at sp+8 (bpf_probe_read_user, 8 bytes)
#   2  and copies the event (bpf_probe_read_user, sizeof(struct span_event))
#   3  and cuts and hashes its name (name_cut, span_name_id)
#   4  and looks its series up in series_index (cgroup id, split check)
#   9  the whole program
#
# Usage, as root on a kernel with uprobes: bench/markercost/run.sh [rounds]
# (default 4). Needs clang (the BPF objects are rebuilt).
set -eu
rounds=${1:-4}
top=$(git rev-parse --show-toplevel)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
git -C "$top" archive HEAD | tar -x -C "$tmp"
cd "$tmp"
git apply "$top/bench/markercost/stages.patch"
cd bpf
for s in 0 1 2 3 4 9; do
	GOPACKAGE=bpf go tool bpf2go -cc clang \
		-cflags "-O2 -g -Wall -Werror -mcpu=v3 -DMARKER_STAGE=$s -I/usr/include/x86_64-linux-gnu" \
		-target amd64 -type series_key -type series_slot -type budget -type budget_key -type budget_glob \
		-type span_name -type overrun -type core_state -type counter -type span_source -type series_kind \
		-type budget_flags -type slot_state -type core_sizes -type span_event_sizes -type span_status \
		-type span_flags -type budget_bits Spanwatch spanwatch.bpf.c >/dev/null
	(cd .. && go test -c -o "$tmp/stage$s.test" ./collector)
done
cd ../collector
uptime
for r in $(seq "$rounds"); do
	for s in 0 1 2 3 4 9; do
		printf 'stage %s ' "$s"
		MARKER_STAGE=$s "$tmp/stage$s.test" -test.run '^$' -test.bench 'MarkerVsBareUprobe$' -test.benchtime 100000x |
			grep -o '[0-9.]* prog-ns/run-[a-z]*' | tr '\n' ' '
		echo
	done
done
uptime
