#!/usr/bin/env bash
# footprint.sh prints a running process's memory: its resident set from
# /proc/PID/status (anonymous, file-backed, and shared memory, which holds
# the BPF maps the agent mmaps) and the memory the kernel charges for the
# BPF maps it holds (the memlock of each map fd, from /proc/PID/fdinfo;
# `bpftool map show` gives the same figure per map; from Linux 6.4 it is
# what each map uses, before that a lower bound: internal/memory's meter
# says why). The BPF maps the agent mmaps are resident file pages too:
# binary_mib is RssFile less them (the Rss of its anon_inode:bpf-map
# mappings, /proc/PID/smaps), and idle_mib = anon + binary + maps counts
# each page once: the "RSS plus BPF map memory".
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
mmapped=$(awk '/^[0-9a-f]+-[0-9a-f]+ / {m = ($0 ~ /anon_inode:bpf-map/)} m && $1 == "Rss:" {k += $2} END {print k + 0}' /proc/$pid/smaps)
rss=$(kib VmRSS) anon=$(kib RssAnon) file=$(kib RssFile) shmem=$(kib RssShmem)
awk -v rss=$rss -v anon=$anon -v file=$file -v shmem=$shmem -v maps=$maps -v n=$n -v mm=$mmapped 'BEGIN {
	printf "rss_mib=%.1f anon_mib=%.1f file_mib=%.1f shmem_mib=%.1f bpf_maps=%d bpf_map_mib=%.1f rss_without_shmem_plus_maps_mib=%.1f mmapped_maps_mib=%.1f binary_mib=%.1f idle_mib=%.1f\n",
		rss/1024, anon/1024, file/1024, shmem/1024, n, maps/1048576, (anon+file)/1024 + maps/1048576,
		mm/1024, (file-mm)/1024, (anon+file-mm)/1024 + maps/1048576
}'
