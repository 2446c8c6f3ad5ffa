package console

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/finedge/idempotent-consumer/app/service/status"
	"github.com/finedge/idempotent-consumer/queue"
)

// sample is one point of the overview's history. Missing: the backend did
// not answer at At (a gap in every chart); Debits.Known false: the
// consumer's metrics were not read (a gap in its charts).
type sample struct {
	At      time.Time
	Missing bool
	Waiting int
	DLQBy   map[queue.Code]int // nil: not read by reason this time
	Debits  status.Debits
}

// The charts' geometry: a viewBox of chartW × chartH, the plot inside the
// margins (the value axis's labels on the left, the time axis's below).
const (
	chartW, chartH             = 460.0, 196.0
	plotL, plotR, plotT, plotB = 52.0, 448.0, 22.0, 164.0
)

// svgChart is one chart, every number already placed: the template writes
// numbers and words only (html/template, no script, no style attribute).
type svgChart struct {
	ID, Title, Unit string
	XTicks, YTicks  []tick
	Lines           []svgLine
	// Latest is the last sample's value(s) in words; Empty says why there
	// is nothing to draw.
	Latest string
	Empty  string
	W, H   float64
	L, R   float64
	T, B   float64
}

type tick struct {
	Pos   float64 // x for a time tick, y for a value tick
	Label string
}

// svgLine is one series: its runs of points (a gap between runs: a sample
// missing, never a line to zero), its last value.
type svgLine struct {
	Name   string
	Class  string // s0…s5: the series' colour (console.css)
	Runs   []string
	Dots   []point // single points between two gaps
	Latest string
}

type point struct{ X, Y float64 }

// seriesIn is one named series of values, NaN where a sample has none.
type seriesIn struct {
	name string
	ys   []float64
}

// maxGap: consecutive samples further apart than this many refreshes are
// a gap (the console was not sampling: too slow a backend, or stopped).
const maxGap = 3

// buildChart places series ss (one value per sample at xs) in a chart.
// A count (whole) has whole steps on its value axis.
func buildChart(id, title, unit string, whole bool, xs []time.Time, refresh time.Duration, ss []seriesIn, format func(float64) string) svgChart {
	c := svgChart{ID: id, Title: title, Unit: unit, W: chartW, H: chartH, L: plotL, R: plotR, T: plotT, B: plotB}
	for _, in := range ss {
		for j, y := range in.ys {
			if math.IsNaN(y) || math.IsInf(y, 0) || y < 0 || y > 1e12 {
				in.ys[j] = math.NaN() // not a value a chart can place (a hostile or broken /metrics): a gap
			}
		}
	}
	if len(xs) == 0 {
		c.Empty = "no sample yet"
		return c
	}
	t0, t1 := xs[0], xs[len(xs)-1]
	if !t1.After(t0) {
		t0 = t1.Add(-refresh)
	}
	top := 0.0
	for _, s := range ss {
		for _, y := range s.ys {
			if !math.IsNaN(y) {
				top = max(top, y)
			}
		}
	}
	if whole {
		top = max(top, 4) // steps of 1 at least
	}
	step, ticks := niceTicks(top)
	c.YTicks = make([]tick, 0, len(ticks))
	top = ticks[len(ticks)-1]
	yOf := func(v float64) float64 { return plotB - (plotB-plotT)*v/top }
	xOf := func(t time.Time) float64 {
		return plotL + (plotR-plotL)*t.Sub(t0).Seconds()/t1.Sub(t0).Seconds()
	}
	for _, v := range ticks {
		c.YTicks = append(c.YTicks, tick{Pos: round1(yOf(v)), Label: trimNum(v, step)})
	}
	c.XTicks = timeTicks(t0, t1, xOf)
	any := false
	var latest []string
	for i, s := range ss {
		l := svgLine{Name: s.name, Class: "s" + strconv.Itoa(i%6)}
		var run []point
		flush := func() {
			switch len(run) {
			case 0:
			case 1:
				l.Dots = append(l.Dots, run[0])
			default:
				var b strings.Builder
				for _, p := range run {
					fmt.Fprintf(&b, "%.1f,%.1f ", p.X, p.Y)
				}
				l.Runs = append(l.Runs, strings.TrimSpace(b.String()))
			}
			run = nil
		}
		for j, y := range s.ys {
			if j > 0 && xs[j].Sub(xs[j-1]) > maxGap*refresh {
				flush()
			}
			if math.IsNaN(y) {
				flush()
				continue
			}
			any = true
			run = append(run, point{round1(xOf(xs[j])), round1(yOf(y))})
		}
		flush()
		if last := s.ys[len(s.ys)-1]; math.IsNaN(last) {
			l.Latest = "no value at " + xs[len(xs)-1].UTC().Format("15:04:05")
		} else {
			l.Latest = format(last) + " " + unit
			if unit == "messages" && last == 1 {
				l.Latest = "1 message"
			}
		}
		if s.name != "" {
			latest = append(latest, s.name+" "+l.Latest)
		} else {
			latest = append(latest, l.Latest)
		}
		c.Lines = append(c.Lines, l)
	}
	c.Latest = strings.Join(latest, " · ")
	if len(ss) > 1 {
		c.Latest = "" // the legend has each series' latest value
	}
	if !any {
		c.Empty = "no values in these samples"
	}
	return c
}

func round1(f float64) float64 { return math.Round(f*10) / 10 }

// niceTicks are 0 and the round values up to at least top (4 or 5 of
// them, steps of 1, 2 or 5 × 10ⁿ), and the step.
func niceTicks(top float64) (float64, []float64) {
	if top <= 0 || math.IsNaN(top) || math.IsInf(top, 0) {
		top = 1
	}
	raw := top / 4
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	step := mag
	for _, m := range []float64{1, 2, 5, 10} {
		if m*mag >= raw {
			step = m * mag
			break
		}
	}
	var out []float64
	for v := 0.0; ; v += step {
		out = append(out, v)
		if v >= top-step*1e-9 {
			return step, out
		}
	}
}

// trimNum is v as a value axis shows it, with the step's decimals.
func trimNum(v, step float64) string {
	decimals := 0
	if step < 1 {
		decimals = int(math.Ceil(-math.Log10(step)))
	}
	return strconv.FormatFloat(v, 'f', decimals, 64)
}

// timeTicks are clock times (UTC) at a round step, 3 to 6 of them.
func timeTicks(t0, t1 time.Time, xOf func(time.Time) float64) []tick {
	span := t1.Sub(t0)
	var step time.Duration
	for _, s := range []time.Duration{time.Second, 2 * time.Second, 5 * time.Second, 10 * time.Second, 15 * time.Second, 30 * time.Second,
		time.Minute, 2 * time.Minute, 5 * time.Minute, 10 * time.Minute, 15 * time.Minute, 30 * time.Minute, time.Hour, 2 * time.Hour, 6 * time.Hour} {
		step = s
		if span/s <= 5 {
			break
		}
	}
	layout := "15:04:05"
	if step >= time.Minute {
		layout = "15:04"
	}
	var out []tick
	for t := t0.Truncate(step); !t.After(t1); t = t.Add(step) {
		if t.Before(t0) {
			continue
		}
		out = append(out, tick{Pos: round1(xOf(t)), Label: t.UTC().Format(layout)})
	}
	return out
}

// charts are the overview's: debited per second and the bank's latency
// (p95) from the consumer's metrics, the waiting backlog and the DLQ by
// reason from the queue.
func charts(ss []sample, refresh time.Duration) []svgChart {
	xs := make([]time.Time, len(ss))
	for i, s := range ss {
		xs[i] = s.At
	}
	nan := math.NaN()
	rate := make([]float64, len(ss))
	p95 := make([]float64, len(ss))
	waiting := make([]float64, len(ss))
	codes := map[queue.Code]bool{}
	for _, s := range ss {
		for c := range s.DLQBy {
			codes[c] = true
		}
	}
	order := slices.Sorted(func(yield func(queue.Code) bool) {
		for c := range codes {
			if !yield(c) {
				return
			}
		}
	})
	dlq := make([][]float64, len(order))
	for i := range dlq {
		dlq[i] = make([]float64, len(ss))
	}
	var lastBy map[queue.Code]int // on SQS the DLQ is read by reason less often: the last read stands
	for i, s := range ss {
		rate[i], p95[i], waiting[i] = nan, nan, nan
		for k := range dlq {
			dlq[k][i] = nan
		}
		if s.Missing {
			continue
		}
		waiting[i] = float64(s.Waiting)
		if s.DLQBy != nil {
			lastBy = s.DLQBy
		}
		if lastBy != nil {
			for k, c := range order {
				dlq[k][i] = float64(lastBy[c])
			}
		}
		if i == 0 {
			continue
		}
		prev := ss[i-1]
		dt := s.At.Sub(prev.At).Seconds()
		if prev.Missing || !prev.Debits.Known || !s.Debits.Known || dt <= 0 {
			continue
		}
		if d := s.Debits.Succeeded - prev.Debits.Succeeded; d >= 0 { // < 0: the consumer restarted (a gap)
			rate[i] = d / dt
		}
		p95[i] = quantile(0.95, prev.Debits, s.Debits)
	}
	out := []svgChart{
		buildChart("chart-debited", "Debited", "/s", false, xs, refresh, []seriesIn{{"", rate}}, func(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) }),
		buildChart("chart-backlog", "Backlog (waiting)", "messages", true, xs, refresh, []seriesIn{{"", waiting}}, func(v float64) string { return strconv.FormatFloat(v, 'f', 0, 64) }),
	}
	var byReason []seriesIn
	for k, c := range order {
		byReason = append(byReason, seriesIn{string(c), dlq[k]})
	}
	dl := buildChart("chart-dlq", "DLQ by reason", "messages", true, xs, refresh, byReason, func(v float64) string { return strconv.FormatFloat(v, 'f', 0, 64) })
	if len(order) == 0 && dl.Empty == "" {
		dl.Empty = "the DLQ is empty"
	}
	lat := buildChart("chart-latency", "Bank latency (p95)", "ms", false, xs, refresh, []seriesIn{{"", p95}}, func(v float64) string { return strconv.FormatFloat(v, 'f', 0, 64) })
	out = append(out, dl, lat)
	if len(ss) > 0 && !ss[len(ss)-1].Debits.Known {
		for _, i := range []int{0, 3} {
			out[i].Empty = "the consumer's metrics are not read (no --metrics-url, or it does not answer)"
		}
	}
	return out
}

// quantile is the q-quantile in milliseconds of the debit calls between
// two reads of the histogram (linear within a bucket, as Prometheus's
// histogram_quantile), NaN when there were none.
func quantile(q float64, from, to status.Debits) float64 {
	if to.Calls-from.Calls <= 0 || len(to.Buckets) == 0 {
		return math.NaN()
	}
	bounds := make([]float64, 0, len(to.Buckets))
	for b := range to.Buckets {
		bounds = append(bounds, b)
	}
	slices.Sort(bounds)
	total := to.Buckets[bounds[len(bounds)-1]] - from.Buckets[bounds[len(bounds)-1]]
	if total <= 0 {
		return math.NaN()
	}
	rank := q * total
	lower, below := 0.0, 0.0
	for _, b := range bounds {
		n := to.Buckets[b] - from.Buckets[b]
		if n >= rank {
			if math.IsInf(b, 1) {
				return lower * 1000 // beyond the last bound: its value, as Prometheus does
			}
			if n == below {
				return b * 1000
			}
			return (lower + (b-lower)*(rank-below)/(n-below)) * 1000
		}
		lower, below = b, n
	}
	return lower * 1000
}
