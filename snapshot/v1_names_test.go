package snapshot

import (
	"strings"
	"testing"
)

// TestDecodeV1Ids checks that version 1's container and pod (the ids the
// cgroup path names) become container_id and pod_uid, leaving the names
// (container, pod) empty, in series and overruns alike.
func TestDecodeV1Ids(t *testing.T) {
	const (
		id  = "3f4b8c2a9d1e7f6a5b4c3d2e1f0a9b8c7d6e5f4a3b2c1d0e9f8a7b6c5d4e3f2a"
		uid = "0d1c2b3a-4f5e-6d7c-8b9a-a1b2c3d4e5f6"
	)
	v1 := `{"version": 1, "time": "2026-12-02T10:00:00Z", "window_ns": 10000000000, "series": [
	  {"span": "checkout", "cgroup_id": 42, "container": "` + id + `", "pod": "` + uid + `", "count": 0, "rate": 0, "errors": 0, "error_ratio": 0,
	   "sum_ns": 0, "p50_ns": 0, "p90_ns": 0, "p99_ns": 0, "max_ns": 0, "window_max_ns": 0, "over_budget": 0}],
	  "overruns": [{"time": "2026-12-02T10:00:00Z", "span": "checkout", "pid": 1, "tid": 1, "comm": "x", "cgroup_id": 42,
	   "container": "` + id + `", "pod": "` + uid + `", "duration_ns": 5, "budget_ns": 1}],
	  "stats": {"events": 0, "ringbuf_drops": 0, "stats_full": 0, "short_events": 0, "read_errors": 0, "overruns_dropped": 0, "read_ns": 1}}`
	s, err := Decode(strings.NewReader(v1))
	if err != nil {
		t.Fatal(err)
	}
	sr, ov := s.Series[0], s.Overruns[0]
	if sr.ContainerID != id || sr.PodUID != uid || sr.Container != "" || sr.Pod != "" {
		t.Errorf("series ids/names = %q %q / %q %q", sr.ContainerID, sr.PodUID, sr.Container, sr.Pod)
	}
	if ov.ContainerID != id || ov.PodUID != uid || ov.Container != "" || ov.Pod != "" {
		t.Errorf("overrun ids/names = %q %q / %q %q", ov.ContainerID, ov.PodUID, ov.Container, ov.Pod)
	}
}
