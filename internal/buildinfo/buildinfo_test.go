package buildinfo

import (
	"runtime/debug"
	"strings"
	"testing"
)

func TestGet(t *testing.T) {
	vcs := func(main string, settings ...string) func() (*debug.BuildInfo, bool) {
		return func() (*debug.BuildInfo, bool) {
			bi := &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Path: "github.com/spanwatch/spanwatch", Version: main}}
			for i := 0; i+1 < len(settings); i += 2 {
				bi.Settings = append(bi.Settings, debug.BuildSetting{Key: settings[i], Value: settings[i+1]})
			}
			return bi, true
		}
	}
	none := func() (*debug.BuildInfo, bool) { return nil, false }
	for _, tc := range []struct {
		name     string
		ver, rev string
		read     func() (*debug.BuildInfo, bool)
		want     Info
	}{
		{"go install @version", "", "", vcs("v0.2.0"), Info{Version: "v0.2.0", GoVersion: "go1.26.0"}},
		{"git checkout", "", "", vcs("v0.0.0-20261202181010-195c61939a51+dirty", "vcs.revision", "195c61939a51", "vcs.time", "2026-12-02T18:10:10Z", "vcs.modified", "true"),
			Info{Version: "v0.0.0-20261202181010-195c61939a51+dirty", Revision: "195c61939a51", Time: "2026-12-02T18:10:10Z", Modified: true, GoVersion: "go1.26.0"}},
		{"ldflags win", "v1.0.0", "abc", vcs("(devel)", "vcs.revision", "def", "vcs.time", "2026-01-01T00:00:00Z", "vcs.modified", "true"),
			Info{Version: "v1.0.0", Revision: "abc", GoVersion: "go1.26.0"}},
		{"ldflags revision equals vcs", "v1.0.0", "abc", vcs("(devel)", "vcs.revision", "abc", "vcs.time", "2026-01-01T00:00:00Z"),
			Info{Version: "v1.0.0", Revision: "abc", Time: "2026-01-01T00:00:00Z", GoVersion: "go1.26.0"}},
		{"nothing", "", "", none, Info{Version: "(devel)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := get(tc.ver, tc.rev, tc.read)
			got.GOOS, got.GOARCH = "", ""
			if tc.want.GoVersion == "" {
				got.GoVersion = ""
			}
			if got != tc.want {
				t.Errorf("get = %+v\nwant %+v", got, tc.want)
			}
		})
	}
	s := Info{Version: "v1.0.0", Revision: "abc", Modified: true, GoVersion: "go1.26.0", GOOS: "linux", GOARCH: "amd64"}.String()
	if want := "spanwatch v1.0.0 (revision abc-dirty, go1.26.0, linux/amd64)"; s != want {
		t.Errorf("String = %q, want %q", s, want)
	}
	if !strings.HasPrefix(Get().String(), "spanwatch ") {
		t.Errorf("Get().String() = %q", Get().String())
	}
}
