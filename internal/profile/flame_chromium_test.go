package profile

import (
	"bytes"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// chromium returns Debian's Chromium, or skips.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Skip("skipping: no chromium on PATH (Debian: apt install chromium; .ci/install-deps.sh installs it)")
	return ""
}

// TestFlameGraphInChromium opens the flame graph, a file on its own, in
// headless Chromium and looks at the picture: the towers of the samples
// are drawn in the colours the SVG gives them (the on-CPU user frame
// main.spin warm, the off-CPU time.Sleep blue), wide as their share of the
// span's time.
func TestFlameGraphInChromium(t *testing.T) {
	bin := chromium(t)
	dir := t.TempDir()
	svg := filepath.Join(dir, "flame.svg")
	var b bytes.Buffer
	if err := WriteFlameGraph(&b, Aggregate(fixture()), FlameOptions{Title: "checkout"}); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(svg, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	shot := filepath.Join(dir, "flame.png")
	cmd := exec.Command(bin, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--user-data-dir="+filepath.Join(dir, "profile"), "--window-size=1200,400",
		"--screenshot="+shot, "file://"+svg)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("chromium: %v\n%s", err, out)
	}
	f, err := os.Open(shot)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	frames := parseFlame(t, b.Bytes())
	count := func(fill string) int {
		p := strings.Split(strings.TrimSuffix(strings.TrimPrefix(fill, "rgb("), ")"), ",")
		var want [3]uint32
		for i := range want {
			v, _ := strconv.Atoi(p[i])
			want[i] = uint32(v)
		}
		n := 0
		r := img.Bounds()
		for y := r.Min.Y; y < r.Max.Y; y++ {
			for x := r.Min.X; x < r.Max.X; x++ {
				cr, cg, cb, _ := img.At(x, y).RGBA()
				if cr>>8 == want[0] && cg>>8 == want[1] && cb>>8 == want[2] {
					n++
				}
			}
		}
		return n
	}
	for _, tc := range []struct {
		name string
		w    float64 // its share of the width
	}{{"main.spin", 200.0 / 950}, {"time.Sleep", 50.0 / 950}} {
		fs := frames[tc.name]
		if len(fs) != 1 {
			t.Fatalf("%s drawn %d times", tc.name, len(fs))
		}
		// A frame box is 15 pixels high and its share of 1180 wide,
		// less its label and rounded corners.
		want := int(tc.w * 1180 * 15 * 0.5)
		if got := count(fs[0].Rect.Fill); got < want {
			t.Errorf("%s (%s): %d pixels of its colour in the screenshot, want at least %d", tc.name, fs[0].Rect.Fill, got, want)
		}
	}
}
