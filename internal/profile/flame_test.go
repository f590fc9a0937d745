package profile

import (
	"bytes"
	"encoding/xml"
	"math"
	"strconv"
	"strings"
	"testing"
)

// flameFrame is one drawn frame of the SVG.
type flameFrame struct {
	Class string  `xml:"class,attr"`
	X     float64 `xml:"data-x,attr"`
	W     float64 `xml:"data-w,attr"`
	Title string  `xml:"title"`
	Rect  struct {
		Y    int    `xml:"y,attr"`
		Fill string `xml:"fill,attr"`
	} `xml:"rect"`
	Text string `xml:"text"`
}

// parseFlame parses the SVG as XML (it must be well-formed to open in a
// browser as a file) and returns its frames by name.
func parseFlame(t *testing.T, b []byte) map[string][]flameFrame {
	t.Helper()
	var doc struct {
		XMLName xml.Name
		Width   int `xml:"width,attr"`
		Groups  []struct {
			ID     string       `xml:"id,attr"`
			Frames []flameFrame `xml:"g"`
		} `xml:"g"`
		Script string `xml:"script"`
	}
	if err := xml.Unmarshal(b, &doc); err != nil {
		t.Fatalf("svg is not well-formed XML: %v", err)
	}
	if doc.XMLName.Local != "svg" || doc.Width != 1200 || !strings.Contains(doc.Script, "zoom") {
		t.Fatalf("not a self-contained svg: root %s, width %d, script %d bytes", doc.XMLName.Local, doc.Width, len(doc.Script))
	}
	out := map[string][]flameFrame{}
	for _, g := range doc.Groups {
		for _, f := range g.Frames {
			name, _, _ := strings.Cut(f.Title, " — ")
			out[name] = append(out[name], f)
		}
	}
	return out
}

func TestFlameGraph(t *testing.T) {
	stacks := Aggregate(fixture())
	for _, tc := range []struct {
		v     Value
		total float64
		// frame name -> its width as a share of the whole
		want map[string]float64
		gone []string
	}{
		// The time no sample covers (checkout: 50 of the sampled span's
		// 300ms, the unsampled 500ms and the 100ms still running; search's
		// 50ms) is the spans' [not sampled], never their end stacks'.
		{ValueDuration, 950e6, map[string]float64{
			"all": 950e6, "checkout": 900e6, "search": 50e6, FrameNotSampled: 700e6,
			"main.spin": 200e6, "time.Now": 200e6, "time.Sleep": 50e6, FrameOffCPU: 50e6,
		}, []string{FrameAtEnd, FrameRunning, "main.other", "vfs_read"}},
		{ValueSamples, 21, map[string]float64{"all": 21, "checkout": 21, "main.spin": 20, FrameOffCPU: 1}, []string{"search", FrameAtEnd, FrameNotSampled}},
		{ValueCount, 4, map[string]float64{"all": 4, "checkout": 3, "search": 1, FrameAtEnd: 3, FrameRunning: 1, "main.other": 1}, []string{"main.spin", FrameNotSampled}},
	} {
		t.Run(string(tc.v), func(t *testing.T) {
			var b bytes.Buffer
			if err := WriteFlameGraph(&b, stacks, FlameOptions{Title: "test <&>", Value: tc.v}); err != nil {
				t.Fatal(err)
			}
			got := parseFlame(t, b.Bytes())
			for name, w := range tc.want {
				fs := got[name]
				if len(fs) == 0 {
					t.Errorf("no frame %q", name)
					continue
				}
				sum := 0.0
				for _, f := range fs {
					sum += f.W
				}
				if math.Abs(sum-w/tc.total) > 1e-3 {
					t.Errorf("frame %q is %.4f of the width, want %.4f", name, sum, w/tc.total)
				}
			}
			for _, name := range tc.gone {
				if len(got[name]) > 0 {
					t.Errorf("frame %q drawn for value %s", name, tc.v)
				}
			}
		})
	}

	var b bytes.Buffer
	if err := WriteFlameGraph(&b, stacks, FlameOptions{}); err != nil {
		t.Fatal(err)
	}
	got := parseFlame(t, b.Bytes())
	// The span sits on the root, its samples' code and its [not sampled]
	// on the span, nothing on [not sampled]; off-CPU frames are blue,
	// on-CPU warm.
	level := func(got map[string][]flameFrame, name string) int { return got[name][0].Rect.Y }
	step := flameFrameHeight
	if len(got["main.main"]) != 1 || level(got, "all")-level(got, "checkout") != step || level(got, "checkout")-level(got, FrameNotSampled) != step ||
		level(got, "main.main") != level(got, "checkout")-step {
		t.Errorf("levels: all %d, checkout %d, %s %d, main.main %v", level(got, "all"), level(got, "checkout"), FrameNotSampled, level(got, FrameNotSampled), got["main.main"])
	}
	for _, f := range got[FrameNotSampled] {
		for _, g := range got["main.main"] {
			if g.X >= f.X && g.X < f.X+f.W {
				t.Errorf("main.main drawn above %s", FrameNotSampled)
			}
		}
	}
	// By overruns, the end stacks: under their markers.
	b.Reset()
	if err := WriteFlameGraph(&b, stacks, FlameOptions{Value: ValueCount}); err != nil {
		t.Fatal(err)
	}
	byCount := parseFlame(t, b.Bytes())
	var mains []int
	for _, f := range byCount["main.main"] {
		mains = append(mains, f.Rect.Y)
	}
	if !(level(byCount, "checkout")-level(byCount, FrameAtEnd) == step && len(mains) == 2 &&
		mains[0] == level(byCount, FrameAtEnd)-step && mains[1] == level(byCount, FrameRunning)-step) {
		t.Errorf("levels by count: checkout %d, %s %d, main.main %v", level(byCount, "checkout"), FrameAtEnd, level(byCount, FrameAtEnd), mains)
	}
	rgb := func(name string) (r, g, bl int) {
		fill := strings.TrimSuffix(strings.TrimPrefix(got[name][0].Rect.Fill, "rgb("), ")")
		p := strings.Split(fill, ",")
		r, _ = strconv.Atoi(p[0])
		g, _ = strconv.Atoi(p[1])
		bl, _ = strconv.Atoi(p[2])
		return
	}
	if r, _, bl := rgb("time.Sleep"); bl < r {
		t.Errorf("off-CPU frame time.Sleep is %s, want blue", got["time.Sleep"][0].Rect.Fill)
	}
	if r, _, bl := rgb("main.spin"); r < bl {
		t.Errorf("on-CPU frame main.spin is %s, want warm", got["main.spin"][0].Rect.Fill)
	}
	if title := got["main.spin"][0].Title; !strings.Contains(title, "200ms (21.1%)") || !strings.Contains(title, "/src/app/main.go:30") {
		t.Errorf("main.spin title %q", title)
	}
	if got["main.spin"][0].Text != "main.spin" {
		t.Errorf("main.spin labelled %q", got["main.spin"][0].Text)
	}
	if strings.Contains(b.String(), "http://") && strings.Count(b.String(), "http://") != 1 {
		t.Errorf("svg refers to something outside it (only its namespace may)")
	}
}

func TestFitText(t *testing.T) {
	for _, tc := range []struct {
		name string
		w    float64
		want string
	}{
		{"main.main", 200, "main.main"},
		{"main.aVeryLongFunctionName", 64, "main.a.."},
		{"main.main", 20, ""},
	} {
		if got := fitText(tc.name, tc.w); got != tc.want {
			t.Errorf("fitText(%q, %v) = %q, want %q", tc.name, tc.w, got, tc.want)
		}
	}
}

func TestHTML(t *testing.T) {
	overruns := fixture()
	var b bytes.Buffer
	if err := WriteHTML(&b, overruns, Aggregate(overruns), FlameOptions{Title: "checkout <1>"}); err != nil {
		t.Fatal(err)
	}
	page := b.String()
	for _, want := range []string{
		"<title>checkout &lt;1&gt;</title>",
		"<td>checkout</td><td class=\"num\">3 (1 still running)</td><td class=\"num\">900ms</td>",
		"250ms in 21 samples",
		" 22% main.spin (/src/app/main.go:30) on-CPU, in time.Now",
		"<svg version=\"1.1\"",
	} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	// The SVG inside is the same well-formed image.
	i, j := strings.Index(page, "<svg"), strings.Index(page, "</svg>")
	if frames := parseFlame(t, []byte(page[i:j+len("</svg>")])); len(frames["main.spin"]) != 1 {
		t.Errorf("inline svg: main.spin frames %v", frames["main.spin"])
	}
}
