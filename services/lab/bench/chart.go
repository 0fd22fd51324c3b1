package bench

import (
	"fmt"
	"html"
	"math"
	"strings"
	"time"
)

// palette colours byzlog's rows apart from the baselines.
func barColour(system string) string {
	switch {
	case strings.HasPrefix(system, "byzlog"):
		return "#2b6cb0"
	case system == SystemKVStore || system == SystemNoop:
		return "#718096"
	default:
		return "#c05621"
	}
}

// SVG draws the suite as two horizontal bar charts side by side: committed
// records/s and produce→receipt p99, one group of bars per record size.
// It is a plain SVG document with no scripts or external references.
func (s Suite) SVG() []byte {
	const (
		rowH, groupGap, top, left, panelW, gap = 22, 26, 56, 150, 330, 120
	)
	type bar struct {
		label      string
		rate, p99  float64
		system     string
		groupStart bool
		size       int
	}
	var bars []bar
	for _, size := range s.RecordSizes() {
		first := true
		for _, r := range s.Runs {
			if r.RecordSize != size || r.Err != "" {
				continue
			}
			label := r.System
			if r.Rate > 0 {
				label += fmt.Sprintf(" @%.0f/s", r.Rate)
			}
			bars = append(bars, bar{label: label, rate: r.Result.RecordsPerSec,
				p99: float64(r.Result.Receipt.P99) / float64(time.Millisecond), system: r.System, groupStart: first, size: size})
			first = false
		}
	}
	var maxRate, maxP99 float64
	for _, b := range bars {
		maxRate, maxP99 = math.Max(maxRate, b.rate), math.Max(maxP99, b.p99)
	}
	groups := len(s.RecordSizes())
	height := top + len(bars)*rowH + groups*groupGap + 30
	width := left + 2*panelW + gap + 90
	var sb strings.Builder
	fmt.Fprintf(&sb, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", width, height, width, height)
	fmt.Fprintf(&sb, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&sb, `<text x="10" y="20" font-size="15" font-weight="bold">byzlog-lab bench suite, %s</text>`+"\n", html.EscapeString(s.Started.UTC().Format("2006-01-02 15:04 UTC")))
	x2 := left + panelW + gap
	fmt.Fprintf(&sb, `<text x="%d" y="44" font-weight="bold">committed records/s</text>`+"\n", left)
	fmt.Fprintf(&sb, `<text x="%d" y="44" font-weight="bold">p99 latency to acknowledgement, ms</text>`+"\n", x2)
	y := top
	scale := func(v, m float64) float64 {
		if m <= 0 {
			return 0
		}
		return v / m * float64(panelW)
	}
	for _, b := range bars {
		if b.groupStart {
			y += groupGap
			fmt.Fprintf(&sb, `<text x="10" y="%d" font-weight="bold">%d B records</text>`+"\n", y-8, b.size)
		}
		c := barColour(b.system)
		fmt.Fprintf(&sb, `<text x="%d" y="%d" text-anchor="end">%s</text>`+"\n", left-6, y+15, html.EscapeString(b.label))
		fmt.Fprintf(&sb, `<rect x="%d" y="%d" width="%.1f" height="%d" fill="%s"/>`+"\n", left, y+3, scale(b.rate, maxRate), rowH-6, c)
		fmt.Fprintf(&sb, `<text x="%.1f" y="%d">%.0f</text>`+"\n", float64(left)+scale(b.rate, maxRate)+4, y+15, b.rate)
		fmt.Fprintf(&sb, `<rect x="%d" y="%d" width="%.1f" height="%d" fill="%s"/>`+"\n", x2, y+3, scale(b.p99, maxP99), rowH-6, c)
		fmt.Fprintf(&sb, `<text x="%.1f" y="%d">%.0f</text>`+"\n", float64(x2)+scale(b.p99, maxP99)+4, y+15, b.p99)
		y += rowH
	}
	fmt.Fprintf(&sb, `<text x="10" y="%d" fill="#4a5568">blue: byzlog · grey: stock CometBFT baselines · orange: NATS JetStream R3</text>`+"\n", y+22)
	sb.WriteString("</svg>\n")
	return []byte(sb.String())
}
