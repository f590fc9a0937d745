#!/usr/bin/env bash
# footprint.sh prints a running process's memory: its resident set from
# /proc/PID/status (anonymous, file-backed, and shared memory, which holds
# the BPF maps the agent mmaps) and the memory the kernel charges for the
# BPF maps it holds (the memlock of each map fd, from /proc/PID/fdinfo;
# `bpftool map show` gives the same figure per map).
#
#   bench/memory/footprint.sh PID
set -euo pipefail
pid=$1
kib() { awk -v k="$1" '$1 == k":" {print $2}' /proc/$pid/status; }
maps=0
n=0
for f in /proc/$pid/fdinfo/*; do
	m=$(awk '$1 == "map_id:" {id=1} $1 == "memlock:" {ml=$2} END {if (id) print ml}' "$f" 2>/dev/null || true)
	if [ -n "$m" ]; then maps=$((maps + m)); n=$((n + 1)); fi
done
rss=$(kib VmRSS) anon=$(kib RssAnon) file=$(kib RssFile) shmem=$(kib RssShmem)
awk -v rss=$rss -v anon=$anon -v file=$file -v shmem=$shmem -v maps=$maps -v n=$n 'BEGIN {
	printf "rss_mib=%.1f anon_mib=%.1f file_mib=%.1f shmem_mib=%.1f bpf_maps=%d bpf_map_mib=%.1f rss_without_shmem_plus_maps_mib=%.1f\n",
		rss/1024, anon/1024, file/1024, shmem/1024, n, maps/1048576, (anon+file)/1024 + maps/1048576
}'
