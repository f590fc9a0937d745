#!/usr/bin/env bash
# vm.sh boots the test VM with 2 and then with 16 vCPUs and runs
# TestSeriesModelScales (test/vm/e2e) in each: the kernel's series capacity
# and map memory at the default sizes, and the snapshot read cost per
# series of 100,000 series. It prints both runs' figures and the ratios
# (16 vCPUs / 2 vCPUs): capacity and memory must not fall, nor read cost
# grow, with the CPU count. TCG emulates 16 vCPUs on the host's cores, so
# absolute times are slow; the ratio is the figure.
#
#   sudo bench/series/vm.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
declare -A read cap bytes
for smp in 2 16; do
	out=$(SPANWATCH_VM_SMP=$smp test/vm/run.sh ./test/vm/e2e -- -test.run '^TestSeriesModelScales$' 2>&1) || {
		echo "$out" | tail -20
		exit 1
	}
	line=$(echo "$out" | grep -o 'series-model cpus=.*' | head -1)
	[ -n "$line" ] || { echo "$out" | tail -20; echo "no figures from the VM with $smp vCPUs" >&2; exit 1; }
	echo "smp=$smp: $line"
	read[$smp]=$(echo "$line" | sed 's/.*read_ns_per_series=\([0-9]*\).*/\1/')
	cap[$smp]=$(echo "$line" | sed 's/.*capacity=\([0-9]*\).*/\1/')
	bytes[$smp]=$(echo "$line" | sed 's/.*map_bytes=\([0-9]*\).*/\1/')
done
awk -v r2="${read[2]}" -v r16="${read[16]}" -v c2="${cap[2]}" -v c16="${cap[16]}" -v b2="${bytes[2]}" -v b16="${bytes[16]}" 'BEGIN {
	printf "capacity 16/2 vCPUs: %d / %d series (ratio %.3f)\n", c16, c2, c16 / c2
	printf "map bytes 16/2 vCPUs: %.1f / %.1f MiB (ratio %.3f)\n", b16 / 1048576, b2 / 1048576, b16 / b2
	printf "read cost 16/2 vCPUs: %d / %d ns per series (ratio %.2f)\n", r16, r2, r16 / r2
}'
