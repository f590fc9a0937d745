package buildinfo

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
)

// Set with -ldflags "-X github.com/spanwatch/spanwatch/internal/buildinfo.version=...".
var (
	version  string
	revision string
)

// Info describes the running binary.
type Info struct {
	// Version is the module version: the linker's, else the toolchain's
	// ("v0.2.0", a pseudo-version, or "(devel)" when nothing says more).
	Version string
	// Revision is the source commit, when known; Modified says the tree
	// had uncommitted changes.
	Revision string
	Modified bool
	// Time is the commit's time (RFC 3339), when known.
	Time      string
	GoVersion string
	GOOS      string
	GOARCH    string
}

// Get returns the running binary's Info.
func Get() Info {
	return get(version, revision, readBuildInfo)
}

var readBuildInfo = debug.ReadBuildInfo

func get(ver, rev string, read func() (*debug.BuildInfo, bool)) Info {
	i := Info{Version: ver, Revision: rev, GoVersion: runtime.Version(), GOOS: runtime.GOOS, GOARCH: runtime.GOARCH}
	if bi, ok := read(); ok {
		if i.Version == "" {
			i.Version = bi.Main.Version
		}
		if bi.GoVersion != "" {
			i.GoVersion = bi.GoVersion
		}
		vcsRev := ""
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				vcsRev = s.Value
			case "vcs.time":
				i.Time = s.Value
			case "vcs.modified":
				i.Modified = s.Value == "true"
			}
		}
		if i.Revision == "" {
			i.Revision = vcsRev
		} else if vcsRev != "" && vcsRev != i.Revision {
			// The linker's revision wins; the toolchain's time and
			// modified flag describe another commit then.
			i.Time, i.Modified = "", false
		}
	}
	if i.Version == "" {
		i.Version = "(devel)"
	}
	return i
}

// String is the one line "spanwatch version" prints.
func (i Info) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "spanwatch %s", i.Version)
	var details []string
	if i.Revision != "" {
		r := i.Revision
		if i.Modified {
			r += "-dirty"
		}
		details = append(details, "revision "+r)
	}
	if i.Time != "" {
		details = append(details, i.Time)
	}
	details = append(details, i.GoVersion, i.GOOS+"/"+i.GOARCH)
	fmt.Fprintf(&b, " (%s)", strings.Join(details, ", "))
	return b.String()
}
