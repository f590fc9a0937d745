package deploy

import (
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/spanwatch/spanwatch/internal/buildinfo"
)

func releaseVersion(t *testing.T) string {
	t.Helper()
	if !regexp.MustCompile(`^v[0-9]+\.[0-9]+\.[0-9]+$`).MatchString(buildinfo.Release) {
		t.Fatalf("buildinfo.Release %q is not vMAJOR.MINOR.PATCH", buildinfo.Release)
	}
	return buildinfo.Release
}

// TestVersionsAgree checks that every place naming spanwatch's version
// names buildinfo.Release: the chart's version and appVersion, the image
// the manifest runs, every "go install ...@vX.Y.Z" and image tag in the
// docs, the release script's default; and that a tag on HEAD is that
// version.
func TestVersionsAgree(t *testing.T) {
	rel := releaseVersion(t)
	c := readChart(t)
	if c.AppVersion != rel || "v"+c.Version != rel {
		t.Errorf("%s/Chart.yaml: version %s, appVersion %s; want %s and %s (buildinfo.Release)", chartPath, c.Version, c.AppVersion, strings.TrimPrefix(rel, "v"), rel)
	}
	m := loadManifest(t)
	if img := m.ds.Spec.Template.Spec.Containers[0].Image; img != "ghcr.io/spanwatch/spanwatch:"+rel {
		t.Errorf("%s runs %s, want ghcr.io/spanwatch/spanwatch:%s (buildinfo.Release)", manifestPath, img, rel)
	}
	// Every version the docs name for spanwatch itself.
	named := regexp.MustCompile(`(?:github\.com/spanwatch/spanwatch/cmd/spanwatch@|buildinfo\.version=|ghcr\.io/spanwatch/spanwatch:|--version[ =])(v[0-9]+\.[0-9]+\.[0-9]+)\b`)
	found := 0
	for _, f := range []string{"../README.md", "README.md", "../docs/install.md"} {
		data, err := os.ReadFile(f)
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range named.FindAllSubmatch(data, -1) {
			found++
			if string(m[1]) != rel {
				t.Errorf("%s names %s, want %s (buildinfo.Release)", f, m[0], rel)
			}
		}
	}
	if found == 0 {
		t.Error("the README names no version to install")
	}
	// A release is tagged at the commit that says so: a tag on HEAD must
	// be the release's version.
	out, err := exec.Command("git", "tag", "--points-at", "HEAD").Output()
	if err != nil {
		t.Logf("git tag: %v (not a git checkout?): the tag is not checked", err)
		return
	}
	for _, tag := range strings.Fields(string(out)) {
		if regexp.MustCompile(`^v[0-9]`).MatchString(tag) && tag != rel {
			t.Errorf("HEAD is tagged %s but buildinfo.Release is %s", tag, rel)
		}
	}
}
