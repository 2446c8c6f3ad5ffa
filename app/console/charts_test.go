package console

import (
	"bytes"
	"encoding/xml"
	"io"
	"math"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/app/service/status"
	"github.com/finedge/idempotent-consumer/memqueue"
	"github.com/finedge/idempotent-consumer/memstore"
	"github.com/finedge/idempotent-consumer/queue"
)

// svgDoc is what a test reads of a chart.
type svgDoc struct {
	ViewBox   string `xml:"viewBox,attr"`
	Texts     []svgText
	Polylines []struct {
		Class  string `xml:"class,attr"`
		Points string `xml:"points,attr"`
	} `xml:"polyline"`
	Circles []struct {
		CX string `xml:"cx,attr"`
	} `xml:"circle"`
}

type svgText struct {
	Class string `xml:"class,attr"`
	Text  string `xml:",chardata"`
}

// parseSVGs reads every <svg> of an overview panel, by its figure's id.
func parseSVGs(t *testing.T, page string) map[string]svgDoc {
	t.Helper()
	out := map[string]svgDoc{}
	figRE := regexp.MustCompile(`(?s)<figure class="chart" id="([^"]+)">.*?(<svg.*?</svg>)`)
	for _, m := range figRE.FindAllStringSubmatch(page, -1) {
		var doc svgDoc
		d := xml.NewDecoder(strings.NewReader(m[2]))
		decode := func(v any, se xml.StartElement) {
			if err := d.DecodeElement(v, &se); err != nil {
				t.Fatal(err)
			}
		}
		// the texts sit inside <g>: collect every <text> wherever it is
		for {
			tok, err := d.Token()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("%s: the SVG is not well-formed: %v\n%s", m[1], err, m[2])
			}
			se, ok := tok.(xml.StartElement)
			if !ok {
				continue
			}
			switch se.Name.Local {
			case "svg":
				for _, a := range se.Attr {
					if a.Name.Local == "viewBox" {
						doc.ViewBox = a.Value
					}
				}
			case "text":
				var tx svgText
				decode(&tx, se)
				doc.Texts = append(doc.Texts, tx)
			case "polyline":
				var pl struct {
					Class  string `xml:"class,attr"`
					Points string `xml:"points,attr"`
				}
				decode(&pl, se)
				doc.Polylines = append(doc.Polylines, pl)
			case "circle":
				var c struct {
					CX string `xml:"cx,attr"`
				}
				decode(&c, se)
				doc.Circles = append(doc.Circles, c)
			}
		}
		out[m[1]] = doc
	}
	return out
}

func (d svgDoc) texts(class string) []string {
	var out []string
	for _, t := range d.Texts {
		if t.Class == class {
			out = append(out, strings.TrimSpace(t.Text))
		}
	}
	return out
}

// debits is a consumer's counters after n successes taking ms each.
func debits(n float64, ms float64) status.Debits {
	d := status.Debits{Known: true, Succeeded: n, Calls: n, Seconds: n * ms / 1000, Buckets: map[float64]float64{}}
	for _, b := range []float64{.005, .01, .025, .05, .1, .25, .5, 1, math.Inf(1)} {
		if ms/1000 <= b {
			d.Buckets[b] = n
		} else {
			d.Buckets[b] = 0
		}
	}
	return d
}

func TestTheChartsHaveAxesTimesUnitsAndGaps(t *testing.T) {
	t0 := time.Date(2026, 12, 3, 8, 0, 0, 0, time.UTC)
	refresh := 5 * time.Second
	var ss []sample
	for i := range 24 {
		s := sample{At: t0.Add(time.Duration(i) * refresh), Waiting: 100 - 4*i,
			DLQBy:  map[queue.Code]int{"debit_failed": i / 4, "conflict": 1},
			Debits: debits(float64(10*i), 40)}
		if i == 10 || i == 11 {
			s = sample{At: s.At, Missing: true} // the backend did not answer
		}
		if i == 17 {
			s.Debits = status.Debits{} // the consumer did not answer
		}
		ss = append(ss, s)
	}
	audit, err := OpenAuditLog(filepath.Join(t.TempDir(), "audit.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { audit.Close() })
	c, err := New(Options{Queue: memqueue.New(memqueue.Options{}), Store: memstore.New(), Auth: ProxyAuth{}, Audit: audit})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := c.pages["overview"].ExecuteTemplate(&buf, "panel", page{Data: overviewView{Charts: charts(ss, refresh)}}); err != nil {
		t.Fatal(err)
	}
	svgs := parseSVGs(t, buf.String())
	for _, id := range []string{"chart-debited", "chart-backlog", "chart-dlq", "chart-latency"} {
		doc, ok := svgs[id]
		if !ok {
			t.Fatalf("no chart %s in\n%s", id, buf.String())
		}
		xl := doc.texts("xlabel")
		if len(xl) < 3 {
			t.Errorf("%s: time axis %q, want 3 or more clock times", id, xl)
		}
		for _, l := range xl {
			if _, err := time.Parse("15:04:05", l); err != nil {
				if _, err := time.Parse("15:04", l); err != nil {
					t.Errorf("%s: time label %q is not a clock time", id, l)
				}
			}
		}
		if xl[0] != "08:00:00" {
			t.Errorf("%s: first time label %q, want 08:00:00", id, xl[0])
		}
		yl := doc.texts("ylabel")
		if f, _ := strconv.ParseFloat(yl[0], 64); len(yl) < 3 || f != 0 {
			t.Errorf("%s: value axis %q, want 0 and up", id, yl)
		}
		for _, l := range yl {
			if _, err := strconv.ParseFloat(l, 64); err != nil {
				t.Errorf("%s: value label %q is not a number", id, l)
			}
		}
		units := doc.texts("unit")
		if len(units) != 2 || units[1] != "time (UTC)" {
			t.Errorf("%s: units %q", id, units)
		}
	}
	if u := svgs["chart-debited"].texts("unit")[0]; u != "/s" {
		t.Errorf("debited's unit %q", u)
	}
	if u := svgs["chart-latency"].texts("unit")[0]; u != "ms" {
		t.Errorf("latency's unit %q", u)
	}
	// Backlog: a gap where the backend did not answer (two runs, not one
	// line through zero).
	if n := len(svgs["chart-backlog"].Polylines); n != 2 {
		t.Errorf("backlog: %d runs, want 2 (a gap at the missing samples)", n)
	}
	// Debited: gaps at the missing samples (and the one after, whose rate
	// has no previous reading) and where the consumer did not answer.
	if n := len(svgs["chart-debited"].Polylines); n != 3 {
		t.Errorf("debited: %d runs, want 3", n)
	}
	for _, pl := range svgs["chart-debited"].Polylines {
		for _, p := range strings.Fields(pl.Points) {
			_, y, _ := strings.Cut(p, ",")
			if f, _ := strconv.ParseFloat(y, 64); f >= plotB { // 2/s in every sample: never at zero
				t.Errorf("debited drawn at zero (%s): a missing sample is a gap", p)
			}
		}
	}
	// (40 ms calls: p95 within the 25–50 ms bucket, linear as histogram_quantile: 49 ms.)
	// DLQ by reason: one line per reason, with a legend.
	if n := len(svgs["chart-dlq"].Polylines); n != 4 {
		t.Errorf("DLQ by reason: %d runs, want 2 reasons × 2 runs", n)
	}
	out := buf.String()
	for _, want := range []string{"conflict <strong>1 message</strong>", "debit_failed <strong>5 messages</strong>", "2.0 /s", "49 ms"} {
		if !strings.Contains(out, want) {
			t.Errorf("the panel lacks %q", want)
		}
	}
	if strings.Contains(out, "style=") || strings.Contains(out, "<script") {
		t.Error("inline style or script in the charts (the CSP forbids them)")
	}
}

// A broken or hostile /metrics (NaN, infinities, counters going back)
// leaves gaps: every number in the SVG is a finite one.
func TestTheChartsPlaceOnlyFiniteNumbers(t *testing.T) {
	t0 := time.Date(2026, 12, 3, 8, 0, 0, 0, time.UTC)
	var ss []sample
	for i, v := range []float64{0, 10, math.Inf(1), math.NaN(), 5, -1e300, 1e300, 20} {
		d := debits(float64(i), 40)
		d.Succeeded = v
		d.Buckets[math.Inf(1)] = math.NaN()
		ss = append(ss, sample{At: t0.Add(time.Duration(i) * 5 * time.Second), Waiting: i, Debits: d})
	}
	for _, c := range charts(ss, 5*time.Second) {
		for _, l := range c.Lines {
			for _, r := range l.Runs {
				if strings.Contains(r, "Inf") || strings.Contains(r, "NaN") {
					t.Fatalf("%s: points %q", c.ID, r)
				}
			}
		}
		for _, tk := range append(c.XTicks, c.YTicks...) {
			if math.IsNaN(tk.Pos) || math.IsInf(tk.Pos, 0) || strings.Contains(tk.Label, "Inf") || strings.Contains(tk.Label, "NaN") {
				t.Fatalf("%s: tick %+v", c.ID, tk)
			}
		}
	}
}
