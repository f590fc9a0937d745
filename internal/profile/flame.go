package profile

import (
	"fmt"
	"hash/fnv"
	"html"
	"io"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/spanwatch/spanwatch/snapshot"
)

// FlameOptions configures a flame graph.
type FlameOptions struct {
	// Title heads the graph; "Where the time went" when empty.
	Title string
	// Value is what widths stand for; ValueDuration when empty.
	Value Value
	// Width is the image width in pixels; 1200 when zero.
	Width int
}

// A flameNode is one frame of the flame graph's tree: the frames of all
// stacks with the same path from the root merged.
type flameNode struct {
	name     string
	detail   string // file:line of the first frame merged here
	class    string // frame class: span, pseudo, user, kernel
	weight   uint64
	offCPU   uint64 // weight from off-CPU samples
	end      uint64 // weight from end stacks
	children []*flameNode
	index    map[string]*flameNode
}

func (n *flameNode) child(name, class, detail string) *flameNode {
	key := class + "\x00" + name
	if c := n.index[key]; c != nil {
		return c
	}
	c := &flameNode{name: name, class: class, detail: detail}
	if n.index == nil {
		n.index = map[string]*flameNode{}
	}
	n.index[key] = c
	n.children = append(n.children, c)
	return c
}

// flameTree merges stacks into a tree under a root standing for all of
// them, weighed by v.
func flameTree(stacks []Stack, v Value) *flameNode {
	root := &flameNode{name: "all", class: "root"}
	for _, s := range stacks {
		w := s.Weight(v)
		if w == 0 {
			continue
		}
		n := root
		add := func(c *flameNode) {
			c.weight += w
			switch s.Kind {
			case KindOffCPU:
				c.offCPU += w
			case KindEnd:
				c.end += w
			}
			n = c
		}
		root.weight += w
		add(n.child(s.Span, "span", ""))
		if s.notSampled(v) {
			add(n.child(FrameNotSampled, "pseudo", ""))
			continue
		}
		if s.Kind == KindEnd {
			add(n.child(s.marker(), "pseudo", ""))
		}
		for i := len(s.UserStack) - 1; i >= 0; i-- {
			f := s.UserStack[i]
			add(n.child(frameName(f), "user", frameDetail(f)))
		}
		for i := len(s.KernelStack) - 1; i >= 0; i-- {
			f := s.KernelStack[i]
			add(n.child(frameName(f), "kernel", frameDetail(f)))
		}
		if len(s.UserStack)+len(s.KernelStack) == 0 {
			add(n.child(FrameNoStack, "pseudo", ""))
		}
		if s.Kind == KindOffCPU {
			add(n.child(FrameOffCPU, "pseudo", ""))
		}
	}
	var sortTree func(n *flameNode)
	sortTree = func(n *flameNode) {
		sort.SliceStable(n.children, func(i, j int) bool {
			if n.children[i].weight != n.children[j].weight {
				return n.children[i].weight > n.children[j].weight
			}
			return n.children[i].name < n.children[j].name
		})
		for _, c := range n.children {
			sortTree(c)
		}
	}
	sortTree(root)
	return root
}

func frameDetail(f snapshot.Frame) string {
	switch {
	case f.File != "":
		d := fmt.Sprintf("%s:%d", f.File, f.Line)
		if f.Inlined {
			d += " (inlined)"
		}
		return d
	case f.Module != "" && f.Function != "":
		return fmt.Sprintf("%s+0x%x", f.Module, f.Offset)
	}
	return ""
}

func (n *flameNode) depth() int {
	d := 0
	for _, c := range n.children {
		d = max(d, c.depth())
	}
	return d + 1
}

// Layout of the image, in pixels.
const (
	flameFrameHeight = 16
	flameFontSize    = 12
	flameTop         = 52 // title, subtitle
	flameBottom      = 34 // details line
	flamePad         = 10
	flameMinWidth    = 0.3 // frames narrower than this are left out
)

// WriteFlameGraph writes stacks as a flame graph: a self-contained SVG
// image (no external script, font or style) that a browser opens as it
// is. Each frame's width is its share of v (ValueDuration: span time); the
// root holds each span, its samples by the code paths they were in, and by
// time the part no sample covers as "[not sampled]", by overruns its end
// stacks under "[stack at span end]". On-CPU samples are drawn in warm
// colours, off-CPU samples in blue, end stacks in grey-green, kernel
// frames in orange. A click on a frame zooms to it (a click on "all"
// zooms out), hovering shows its time, share and source line, and typing
// in the search box highlights matching frames.
func WriteFlameGraph(w io.Writer, stacks []Stack, opts FlameOptions) error {
	fw := &flameWriter{w: w}
	fw.svg(stacks, opts, true)
	return fw.err
}

// WriteHTML writes a page for a browser: per span its overruns, their
// durations, how much the in-span samples cover and the hottest frames,
// then the flame graph of WriteFlameGraph, inline. Like the SVG it needs
// nothing but the file.
func WriteHTML(w io.Writer, overruns []snapshot.Overrun, stacks []Stack, opts FlameOptions) error {
	fw := &flameWriter{w: w}
	title := opts.Title
	if title == "" {
		title = "Where the time went"
	}
	fw.printf("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>%s</title>\n", html.EscapeString(title))
	fw.printf("<style>\nbody{font-family:Verdana,sans-serif;font-size:13px;margin:16px;color:#222}\n" +
		"table{border-collapse:collapse;margin:8px 0 16px}td,th{padding:3px 10px;text-align:left;vertical-align:top;border-bottom:1px solid #ddd}\n" +
		"th{background:#f3f3f3}.num{text-align:right}.hot{font-family:monospace;white-space:pre}\n</style>\n</head>\n<body>\n")
	fw.printf("<h1 style=\"font-size:18px\">%s</h1>\n", html.EscapeString(title))
	fw.printf("<table>\n<tr><th>span</th><th class=\"num\">overruns</th><th class=\"num\">total</th><th class=\"num\">max</th><th class=\"num\">sampled</th><th>hottest frames (share of total)</th></tr>\n")
	for _, s := range Summarize(overruns) {
		sampled := "—"
		if s.Samples > 0 {
			sampled = fmt.Sprintf("%v in %s", dur(s.SampledNs), plural(s.Samples, "sample"))
		}
		running := ""
		if s.StillRunning > 0 {
			running = fmt.Sprintf(" (%d still running)", s.StillRunning)
		}
		fw.printf("<tr><td>%s</td><td class=\"num\">%d%s</td><td class=\"num\">%v</td><td class=\"num\">%v</td><td class=\"num\">%s</td><td class=\"hot\">%s</td></tr>\n",
			html.EscapeString(s.Span), s.Overruns, running, dur(s.DurationNs), dur(s.MaxNs), sampled, html.EscapeString(FormatHottest(s.Hottest, s.DurationNs)))
	}
	fw.printf("</table>\n")
	fw.svg(stacks, opts, false)
	fw.printf("\n<p>Width: %s. Click a frame to zoom, click <b>all</b> to zoom out; type in the search box to highlight frames. "+
		"Warm: on-CPU samples; blue: off-CPU samples (blocked, or a parked goroutine); grey: [not sampled], the span time no sample covers; "+
		"grey-green: stacks at the span's end (by overruns); orange: kernel frames.</p>\n</body>\n</html>\n", valueWords(opts.Value))
	return fw.err
}

func valueWords(v Value) string {
	switch v {
	case ValueCount:
		return "overruns, at their end stacks"
	case ValueSamples:
		return "in-span samples"
	}
	return "span time (samples by the time they stand for, [not sampled] the time none covers)"
}

type flameWriter struct {
	w   io.Writer
	err error
}

func (fw *flameWriter) printf(format string, args ...any) {
	if fw.err == nil {
		if _, err := fmt.Fprintf(fw.w, format, args...); err != nil {
			fw.err = fmt.Errorf("write flame graph: %w", err)
		}
	}
}

func (fw *flameWriter) svg(stacks []Stack, opts FlameOptions, standalone bool) {
	if opts.Value == "" {
		opts.Value = ValueDuration
	}
	if opts.Width == 0 {
		opts.Width = 1200
	}
	title := opts.Title
	if title == "" {
		title = "Where the time went"
	}
	root := flameTree(stacks, opts.Value)
	depth := root.depth()
	width := float64(opts.Width)
	height := flameTop + depth*flameFrameHeight + flameBottom
	if standalone {
		fw.printf("<?xml version=\"1.0\" standalone=\"no\"?>\n")
	}
	fw.printf(`<svg version="1.1" xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" id="flame" data-value="%s">`+"\n",
		opts.Width, height, opts.Width, height, opts.Value)
	fw.printf("<style>\n%s</style>\n", flameStyle)
	fw.printf(`<rect x="0" y="0" width="%d" height="%d" fill="#fdfdf6"/>`+"\n", opts.Width, height)
	fw.printf(`<text x="%d" y="22" text-anchor="middle" class="title">%s</text>`+"\n", opts.Width/2, html.EscapeString(title))
	fw.printf(`<text x="%d" y="40" text-anchor="middle" class="sub">%s</text>`+"\n", opts.Width/2, html.EscapeString(subtitle(root, opts.Value)))
	fw.printf(`<text x="%d" y="22" class="sub" id="search">search</text>`+"\n", opts.Width-flamePad-60)
	fw.printf(`<text x="%d" y="%d" class="sub" id="details"> </text>`+"\n", flamePad, height-12)
	fw.printf("<g id=\"frames\">\n")
	scale := (width - 2*flamePad) / float64(max(root.weight, 1))
	var draw func(n *flameNode, x float64, level int)
	draw = func(n *flameNode, x float64, level int) {
		wpx := float64(n.weight) * scale
		if wpx < flameMinWidth {
			return
		}
		y := height - flameBottom - (level+1)*flameFrameHeight
		info := fmt.Sprintf("%s — %s", n.name, weightWords(n.weight, root.weight, opts.Value))
		if n.detail != "" {
			info += " — " + n.detail
		}
		if n.offCPU > 0 && n.offCPU < n.weight {
			info += fmt.Sprintf(" — %d%% off-CPU", n.offCPU*100/n.weight)
		}
		fw.printf(`<g class="f" data-x="%.4f" data-w="%.4f"><title>%s</title><rect x="%.1f" y="%d" width="%.1f" height="%d" fill="%s" rx="2"/><text x="%.1f" y="%d">%s</text></g>`+"\n",
			(x-flamePad)/(width-2*flamePad), wpx/(width-2*flamePad), html.EscapeString(info),
			x, y, wpx, flameFrameHeight-1, n.color(), x+3, y+flameFrameHeight-4, html.EscapeString(fitText(n.name, wpx)))
		cx := x
		for _, c := range n.children {
			draw(c, cx, level+1)
			cx += float64(c.weight) * scale
		}
	}
	draw(root, flamePad, 0)
	fw.printf("</g>\n<script><![CDATA[\n%s]]></script>\n</svg>\n", flameScript)
}

func subtitle(root *flameNode, v Value) string {
	spans := len(root.children)
	noun := "spans"
	if spans == 1 {
		noun = "span"
	}
	return fmt.Sprintf("%d %s, %s; click a frame to zoom", spans, noun, weightWords(root.weight, 0, v))
}

// weightWords renders a weight, and its share of total when total is set.
func weightWords(w, total uint64, v Value) string {
	var s string
	switch v {
	case ValueCount:
		s = plural(w, "overrun")
	case ValueSamples:
		s = plural(w, "sample")
	default:
		s = dur(w).String()
	}
	if total > 0 {
		s += fmt.Sprintf(" (%.1f%%)", float64(w)*100/float64(total))
	}
	return s
}

// fitText cuts a frame's name to the width of its box, or to nothing.
func fitText(name string, wpx float64) string {
	chars := int((wpx - 6) / (flameFontSize * 0.59))
	if chars < 3 {
		return ""
	}
	r := []rune(name)
	if len(r) <= chars {
		return name
	}
	return string(r[:chars-2]) + ".."
}

// color picks a frame's fill: by class, and for code frames by what their
// time was (off-CPU, end stacks), with a hue from the name so neighbours
// differ.
func (n *flameNode) color() string {
	h := fnv.New32a()
	h.Write([]byte(n.name))
	v := float64(h.Sum32()%1000) / 1000
	switch {
	case n.class == "root":
		return "rgb(200,200,200)"
	case n.class == "span":
		return "rgb(150,150,210)"
	case n.class == "pseudo":
		return "rgb(190,190,190)"
	case n.offCPU*2 > n.weight:
		return fmt.Sprintf("rgb(%d,%d,%d)", 70+int(40*v), 120+int(50*v), 215+int(35*v))
	case n.end*2 > n.weight:
		return fmt.Sprintf("rgb(%d,%d,%d)", 150+int(30*v), 185+int(30*v), 150+int(20*v))
	case n.class == "kernel":
		return fmt.Sprintf("rgb(%d,%d,%d)", 225+int(30*v), 130+int(50*v), 40+int(30*v))
	}
	return fmt.Sprintf("rgb(%d,%d,%d)", 225+int(30*v), int(math.Round(60+130*v)), 50+int(30*v))
}

const flameStyle = `text{font-family:Verdana,sans-serif;font-size:12px;fill:#000}
.title{font-size:17px}
.sub{font-size:12px;fill:#555}
#search{cursor:pointer;fill:#36c}
.f{cursor:pointer}
.f:hover rect{stroke:#000;stroke-width:0.7}
.f text{pointer-events:none}
.hl rect{fill:rgb(230,0,230)!important}
`

// flameScript zooms, shows details and searches. Frames carry their place
// as fractions of the full width (data-x, data-w), so zooming rescales
// them without the tree.
const flameScript = `(function () {
  var svg = document.getElementById("flame");
  var frames = svg.querySelectorAll("g.f");
  var details = document.getElementById("details");
  var pad = 10, width = +svg.getAttribute("width") - 2 * pad;
  function fit(t, name, w) {
    var n = Math.floor((w - 6) / 7.1);
    if (n < 3) { t.textContent = ""; return; }
    t.textContent = name.length <= n ? name : name.slice(0, n - 2) + "..";
  }
  frames.forEach(function (g) {
    g.dataset.name = g.querySelector("title").textContent.split(" — ")[0];
    g.addEventListener("mouseover", function () { details.textContent = g.querySelector("title").textContent; });
    g.addEventListener("mouseout", function () { details.textContent = " "; });
    g.addEventListener("click", function () { zoom(g); });
  });
  function zoom(z) {
    var zx = +z.dataset.x, zw = +z.dataset.w, zy = +z.querySelector("rect").getAttribute("y");
    frames.forEach(function (g) {
      var x = +g.dataset.x, w = +g.dataset.w, r = g.querySelector("rect"), t = g.querySelector("text");
      var y = +r.getAttribute("y");
      var inside = y <= zy && x >= zx - 1e-9 && x + w <= zx + zw + 1e-9;
      var ancestor = y > zy && x <= zx + 1e-9 && x + w >= zx + zw - 1e-9;
      if (!inside && !ancestor) { g.style.display = "none"; return; }
      g.style.display = "";
      var nx, nw;
      if (inside) { nx = pad + (x - zx) / zw * width; nw = w / zw * width; }
      else { nx = pad; nw = width; }
      r.setAttribute("x", nx.toFixed(1)); r.setAttribute("width", nw.toFixed(1));
      t.setAttribute("x", (nx + 3).toFixed(1));
      fit(t, g.dataset.name, nw);
    });
  }
  document.getElementById("search").addEventListener("click", function () {
    var term = prompt("Highlight frames containing:", "");
    frames.forEach(function (g) {
      g.classList.toggle("hl", !!term && g.dataset.name.indexOf(term) >= 0);
    });
  });
})();
`

// FlameTitle returns a graph title for the selected spans.
func FlameTitle(span string, overruns []snapshot.Overrun) string {
	if span == "" {
		span = "all spans"
	}
	start, end := TimeRange(overruns)
	t := "Where the time went: " + span
	if !start.IsZero() {
		t += fmt.Sprintf(", %s to %s", start.UTC().Format(time.DateTime), end.UTC().Format(time.TimeOnly))
	}
	return strings.TrimSpace(t)
}
