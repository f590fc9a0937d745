package main

import (
	"testing"
)

func TestReleaseSeries(t *testing.T) {
	const table = "| kernel | 5.10 | 6.1 | userevents | host |\n" +
		"|---|---|---|---|---|\n"
	for _, tc := range []struct {
		name      string
		have      string
		want      string
		sameCheck bool
	}{
		{
			name:      "point releases and host builds",
			have:      table + "| release | Debian 5.10.251-5 | Debian 6.1.192-3 | 6.12.118 | 6.18.44-fc-v1272 |\n| BPF objects | compat | full | full | full |\n",
			want:      table + "| release | Debian 5.10.252-1 | Debian 6.1.193-1 | 6.12.119 | 6.18.51-fc-v1301 |\n| BPF objects | compat | full | full | full |\n",
			sameCheck: true,
		},
		{
			name: "a new series",
			have: table + "| release | Debian 5.10.251-5 | Debian 6.1.192-3 | 6.12.118 | 6.18.44-fc-v1272 |\n",
			want: table + "| release | Debian 5.10.251-5 | Debian 6.1.192-3 | 6.12.118 | 6.19.2-fc-v1 |\n",
		},
		{
			name: "a new kernel label",
			have: table + "| release | Debian 5.10.251-5 | Debian 6.1.192-3 | 6.12.118 | 6.18.44 |\n",
			want: "| kernel | 5.10 | 6.1-arm64 | userevents | host |\n|---|---|---|---|---|\n" +
				"| release | Debian 5.10.251-5 | Debian 6.1.192-3 | 6.12.118 | 6.18.44 |\n",
		},
		{
			name: "another row changed",
			have: table + "| release | Debian 6.1.192-3 |\n| BPF objects | full |\n",
			want: table + "| release | Debian 6.1.193-1 |\n| BPF objects | compat |\n",
		},
		{
			name: "a kernel without a release",
			have: table + "| release | 6.1.0 |\n",
			want: table + "| release | — |\n",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := string(releaseSeries([]byte(tc.have))) == string(releaseSeries([]byte(tc.want)))
			if got != tc.sameCheck {
				t.Errorf("same by series = %v, want %v:\n%s\n%s", got, tc.sameCheck, releaseSeries([]byte(tc.have)), releaseSeries([]byte(tc.want)))
			}
		})
	}
	// Only the release row is rewritten, and only to the series.
	doc := table + "| release | Debian 5.10.251-5 | Debian 6.1.192-3 | 6.12.118 | 6.18.44-fc-v1272 |\n| BPF objects | compat | full | full | full |\n"
	want := table + "| release | 5.10 | 6.1 | 6.12 | 6.18 |\n| BPF objects | compat | full | full | full |\n"
	if got := string(releaseSeries([]byte(doc))); got != want {
		t.Errorf("releaseSeries:\n%s\nwant\n%s", got, want)
	}
}
