package console

// Charts of the overview page, drawn on the server as SVG: no script, no
// CDN, readable without JavaScript (each bar has a title, and a table
// beside each chart says the same in numbers).

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// series are the stacked outcomes of the calls chart, bottom first.
var series = []struct{ Key, Label string }{
	{"succeeded", "succeeded"},
	{"tool_error", "tool error"},
	{"refused", "refused"},
	{"failed", "failed"},
	{"uncertain", "uncertain"},
	{"started", "running"},
	{"resolved", "resolved"},
}

// seriesOf is the series an overview outcome is counted in.
func seriesOf(outcome string) string {
	if strings.HasPrefix(outcome, "refused:") {
		return "refused"
	}
	return outcome
}

// Chart dimensions, in SVG user units.
const (
	chartW, chartH = 720.0, 160.0
	chartPad       = 28.0 // room for the axis labels
)

// chart is a chart ready for its template.
type chart struct {
	W, H   float64
	Max    int // the top of the scale
	Total  int // what the bars add up to (the browser test counts it)
	Rects  []rect
	Legend []legend
	Rows   []chartRow // the same numbers as a table
	XFirst string     // the first and last bucket's labels
	XLast  string
	Label  string // the chart's accessible name
}

type rect struct {
	X, Y, W, H float64
	Class      string
	Count      int
	Title      string
}

type legend struct {
	Class, Label string
	Total        int
}

type chartRow struct {
	Label  string
	Counts []int
}

// callsChart stacks the calls of each bucket by outcome.
func callsChart(o *Overview) *chart {
	c := &chart{W: chartW, H: chartH + chartPad}
	if o == nil || len(o.Buckets) == 0 {
		return c
	}
	per := make([]map[string]int, len(o.Buckets))
	for i, b := range o.Buckets {
		per[i] = map[string]int{}
		sum := 0
		for k, n := range b.Counts {
			per[i][seriesOf(k)] += n
			sum += n
		}
		c.Max = max(c.Max, sum)
	}
	if c.Max == 0 {
		c.Max = 1
	}
	bw := chartW / float64(len(o.Buckets))
	layout := bucketLayout(o.Bucket)
	for i, b := range o.Buckets {
		y := chartH
		label := b.Start.UTC().Format(layout)
		row := chartRow{Label: label}
		for _, s := range series {
			n := per[i][s.Key]
			row.Counts = append(row.Counts, n)
			if n == 0 {
				continue
			}
			h := float64(n) / float64(c.Max) * chartH
			y -= h
			c.Rects = append(c.Rects, rect{X: float64(i)*bw + 0.5, Y: y, W: max(bw-1, 0.5), H: h,
				Class: "s-" + s.Key, Count: n, Title: fmt.Sprintf("%s UTC: %d %s", label, n, s.Label)})
			c.Total += n
		}
		if slices.ContainsFunc(row.Counts, func(n int) bool { return n > 0 }) {
			c.Rows = append(c.Rows, row)
		}
	}
	for _, s := range series {
		total := 0
		for i := range per {
			total += per[i][s.Key]
		}
		if total > 0 || s.Key == "succeeded" || s.Key == "refused" {
			c.Legend = append(c.Legend, legend{Class: "s-" + s.Key, Label: s.Label, Total: total})
		}
	}
	c.XFirst = o.Buckets[0].Start.UTC().Format(layout)
	c.XLast = o.Buckets[len(o.Buckets)-1].Start.UTC().Format(layout)
	c.Label = fmt.Sprintf("Calls per %s by outcome, %s to %s UTC: %d in all", shortDuration(o.Bucket), c.XFirst, c.XLast, c.Total)
	return c
}

// refusedChart is one horizontal bar per refusal class.
func refusedChart(o *Overview) *chart {
	c := &chart{W: chartW}
	if o == nil {
		return c
	}
	counts := map[string]int{}
	for k, n := range o.Totals {
		if class, ok := strings.CutPrefix(k, "refused:"); ok {
			counts[class] += n
		}
	}
	classes := slices.Sorted(func(yield func(string) bool) {
		for k := range counts {
			if !yield(k) {
				return
			}
		}
	})
	slices.SortStableFunc(classes, func(a, b string) int { return counts[b] - counts[a] })
	for _, k := range classes {
		c.Max = max(c.Max, counts[k])
	}
	const rowH, labelW = 24.0, 180.0
	c.H = rowH * float64(len(classes))
	for i, k := range classes {
		w := float64(counts[k]) / float64(max(c.Max, 1)) * (chartW - labelW - 60)
		c.Rects = append(c.Rects, rect{X: labelW, Y: float64(i)*rowH + 3, W: max(w, 1), H: rowH - 6,
			Class: "s-refused", Count: counts[k], Title: k})
		c.Total += counts[k]
		c.Rows = append(c.Rows, chartRow{Label: k, Counts: []int{counts[k]}})
	}
	c.Label = fmt.Sprintf("Refused calls by class: %d in all", c.Total)
	return c
}

func bucketLayout(d time.Duration) string {
	if d >= 24*time.Hour {
		return "Jan 2"
	}
	if d >= time.Hour {
		return "Jan 2 15:04"
	}
	return "15:04"
}

// shortDuration writes 1m, 2h, 1d.
func shortDuration(d time.Duration) string {
	switch {
	case d >= 24*time.Hour && d%(24*time.Hour) == 0:
		return fmt.Sprintf("%dd", d/(24*time.Hour))
	case d >= time.Hour && d%time.Hour == 0:
		return fmt.Sprintf("%dh", d/time.Hour)
	case d >= time.Minute && d%time.Minute == 0:
		return fmt.Sprintf("%dmin", d/time.Minute)
	}
	return d.String()
}
