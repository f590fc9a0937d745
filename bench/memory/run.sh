#!/usr/bin/env bash
# run.sh holds a spanwatch agent at full series capacity for a while, with a
# real Prometheus (Debian's prometheus package) scraping its /metrics every
# 15 s and --output writing every snapshot, and prints its memory every
# 30 s; then it sends SIGTERM and times the exit. bench/memory/fill keeps
# every series live (a few values each, every 5 s). A watchdog kills the
# agent if its anonymous memory passes WATCHDOG_MIB (default 6144), so a
# run without a bound does not take the machine down.
#
#   sudo bench/memory/run.sh BINARY [MINUTES] [SERIES] [-- AGENT ARGS...]
#   sudo bench/memory/run.sh ./spanwatch 10 131072 -- --memory-budget 1GiB
#
# With MEMCG_LIMIT=SIZE (bytes, or 512M) the agent runs in a memory cgroup
# of its own with that limit (a child of this shell's, on cgroup v2 or the
# v1 memory controller; removed at the end), so its budget comes from the
# cgroup as in a container.
#
# Each row: elapsed seconds, VmRSS, RssAnon, RssFile (the mmapped BPF maps
# are counted here), the BPF maps' memlock, the Go heap in use, Prometheus'
# last scrape_duration_seconds and up for the agent, series live, and the
# agent's output size. Needs root, prometheus, curl, jq.
set -euo pipefail
bin=$(readlink -f "$1")
minutes=${2:-10}
series=${3:-131072}
shift $(( $# < 3 ? $# : 3 ))
[ "${1:-}" = "--" ] && shift
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
d=$(mktemp -d /tmp/spanwatch-membench.XXXXXX)
port=${PORT:-19464}
pport=${PROM_PORT:-19090}
watchdog=${WATCHDOG_MIB:-6144}
pids=()
cg=
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	[ -z "$cg" ] || rmdir "$cg" 2>/dev/null || true
	[ -n "${KEEP:-}" ] || rm -rf "$d"
}
trap cleanup EXIT

(cd "$root" && go build -o "$d/fill" ./bench/memory/fill)
cat > "$d/rules.yaml" <<'YAML'
budgets:
  - span: "GET /api/v1/service-001/*"
    budget: 100ms
rules:
  # Every span, over the default range (1m): the history holds every series.
  - name: SpanErrors
    span: "*"
    when: error_ratio > 0.5
    for: 1m
  - name: SlowService
    span: "GET /api/v1/service-00*"
    when: p99 > 50ms
    over: 5m
YAML
cat > "$d/prometheus.yml" <<YAML
global:
  scrape_interval: 15s
  scrape_timeout: 10s
scrape_configs:
  - job_name: spanwatch
    static_configs:
      - targets: ["127.0.0.1:$port"]
YAML

launch=()
if [ -n "${MEMCG_LIMIT:-}" ]; then
	if v2=$(awk -F: '$1 == "0" {print $3}' /proc/self/cgroup) && [ -f "/sys/fs/cgroup/$v2/memory.max" ]; then
		cg="/sys/fs/cgroup/$v2/spanwatch-membench.$$"
		mkdir "$cg"
		echo "$MEMCG_LIMIT" > "$cg/memory.max"
	else
		v1=$(awk -F: '$2 ~ /(^|,)memory(,|$)/ {print $3}' /proc/self/cgroup)
		cg="/sys/fs/cgroup/memory/$v1/spanwatch-membench.$$"
		mkdir "$cg"
		echo "$MEMCG_LIMIT" > "$cg/memory.limit_in_bytes"
	fi
	launch=(sh -c 'echo $$ > "$0/cgroup.procs" && exec "$@"' "$cg")
fi
"${launch[@]}" "$bin" run --config "$d/rules.yaml" --metrics-addr "127.0.0.1:$port" --output "$d/out.jsonl" \
	--output-max-size 256M --output-keep 1 "$@" 2> "$d/agent.log" &
agent=$!
pids+=("$agent")
until grep -q msg=started "$d/agent.log" 2>/dev/null; do
	kill -0 "$agent" 2>/dev/null || { cat "$d/agent.log"; exit 1; }
	sleep 0.2
done
"$d/fill" --pid "$agent" --series "$series" --every 5s > "$d/fill.log" 2>&1 &
pids+=("$!")
prometheus --config.file "$d/prometheus.yml" --storage.tsdb.path "$d/tsdb" \
	--web.listen-address "127.0.0.1:$pport" --enable-feature=native-histograms > "$d/prometheus.log" 2>&1 &
pids+=("$!")

status() { awk -v k="$1" '$1 == k":" {printf "%.0f", $2/1024}' /proc/$agent/status; }
maps() {
	local t=0 m
	for f in /proc/$agent/fdinfo/*; do
		m=$(awk '$1 == "map_id:" {id=1} $1 == "memlock:" {ml=$2} END {if (id) print ml}' "$f" 2>/dev/null || true)
		[ -n "$m" ] && t=$((t + m))
	done
	echo $((t / 1048576))
}
prom() {
	curl -s --max-time 5 "http://127.0.0.1:$pport/api/v1/query" --data-urlencode "query=$1" |
		jq -r '.data.result[0].value[1] // "-"' 2>/dev/null || echo -
}
printf '%-5s %-8s %-8s %-8s %-8s %-9s %-8s %-5s %-9s %-3s %-8s %-8s\n' sec rss_mib anon_mib file_mib maps_mib heap_mib live_mib shed scrape_s up series out_mib
start=$(date +%s)
peak=0
killed=
for ((i = 0; i <= minutes * 2; i++)); do
	if ((i > 0)); then
		# Sample the watchdog every second between rows.
		for ((s = 0; s < 30; s++)); do
			sleep 1
			kill -0 "$agent" 2>/dev/null || break 2
			a=$(status RssAnon)
			((a > peak)) && peak=$a
			if ((a > watchdog)); then
				echo "watchdog: RssAnon ${a} MiB > ${watchdog} MiB at $(($(date +%s) - start)) s: killing the agent"
				kill -KILL "$agent"
				killed=1
				break 2
			fi
		done
	fi
	if [ -n "$killed" ] || ! kill -0 "$agent" 2>/dev/null; then break; fi
	heap=$(prom 'go_memstats_heap_inuse_bytes{job="spanwatch"} / 1048576')
	live=$(prom 'spanwatch_memory_usage_bytes{job="spanwatch",part="go"} / 1048576')
	printf '%-5s %-8s %-8s %-8s %-8s %-9s %-8s %-5s %-9.4s %-3s %-8s %-8s\n' $(($(date +%s) - start)) "$(status VmRSS)" "$(status RssAnon)" "$(status RssFile)" "$(maps)" "${heap%.*}" "${live%.*}" "$(prom 'spanwatch_memory_shed_level{job="spanwatch"}')" \
		"$(prom 'scrape_duration_seconds{job="spanwatch"}')" "$(prom 'up{job="spanwatch"}')" "$(prom spanwatch_series_live)" \
		"$(du -cm "$d"/out.jsonl* 2>/dev/null | tail -1 | cut -f1)"
done
echo "peak RssAnon: $peak MiB"
if [ -z "$killed" ] && kill -0 "$agent" 2>/dev/null; then
	t0=$(date +%s.%N)
	kill -TERM "$agent"
	for ((w = 0; w < 600; w++)); do
		kill -0 "$agent" 2>/dev/null || break
		sleep 0.1
	done
	t1=$(date +%s.%N)
	if kill -0 "$agent" 2>/dev/null; then
		echo "SIGTERM: not exited after 60 s; killing"
		kill -KILL "$agent"
	else
		echo "SIGTERM to exit: $(echo "$t1 - $t0" | bc) s"
	fi
fi
grep -E 'msg=(stopped|memory_)' "$d/agent.log" | tail -8 || true
grep -c 'level=ERROR' "$d/agent.log" | sed 's/^/agent errors logged: /' || true
if [ -n "$cg" ]; then
	for f in memory.events memory.failcnt memory.max_usage_in_bytes memory.peak; do
		[ -f "$cg/$f" ] && echo "cgroup $f: $(tr '\n' ' ' < "$cg/$f")"
	done
fi
head -2 "$d/fill.log"
