package console

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/xml"
	"errors"
	"io"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/app/audit"
	"github.com/finedge/idempotent-consumer/app/service/backend"
	"github.com/finedge/idempotent-consumer/app/service/cli"
	"github.com/finedge/idempotent-consumer/app/service/status"
	"github.com/finedge/idempotent-consumer/memqueue"
	"github.com/finedge/idempotent-consumer/memstore"
	"github.com/finedge/idempotent-consumer/queue"
)

// runOptions are console's flags as parsed from args, defaults and all,
// over an embedded backend in dir with token sign-in.
func runOptions(t *testing.T, dir string, args ...string) RunOptions {
	t.Helper()
	tokens := filepath.Join(dir, "tokens")
	if err := os.WriteFile(tokens, []byte(TokenLine("ana", Operator, "tok-ana-1234567890", "")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := &cli.Env{Stdout: new(bytes.Buffer), Stderr: new(bytes.Buffer), Getenv: func(string) string { return "" }}
	f := cli.NewFlagSet(env, "console", "console [flags]")
	var o RunOptions
	o.Bind(f)
	base := []string{"--backend", "embedded", "--db", filepath.Join(dir, "c.db"), "--console-auth", "token", "--console-token-file", tokens,
		"--audit-file", filepath.Join(dir, "audit.jsonl"), "--addr", "127.0.0.1:0", "--metrics-url", ""}
	if err := f.Parse(append(base, args...), false); err != nil {
		t.Fatal(err)
	}
	return o
}

func TestRunChecksEveryOptionAndNeverCreatesTheBackend(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"retention", []string{"--retention", "1h"}, "--retention 1h0m0s is under 24h"},
		{"lease", []string{"--lease", "0s"}, "--lease must be positive"},
		{"skew", []string{"--skew-margin", "-1s"}, "--skew-margin not negative"},
		{"no audit file", []string{"--audit-file", ""}, "--audit-file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Run(t.Context(), runOptions(t, t.TempDir(), tc.args...), new(bytes.Buffer))
			var ue *cli.UsageError
			if !errors.As(err, &ue) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Run: %v; want a usage error naming %q", err, tc.want)
			}
		})
	}
	dir := t.TempDir()
	if err := Run(t.Context(), runOptions(t, dir), new(bytes.Buffer)); err == nil {
		t.Fatal("Run on a backend that is not there: no error")
	}
	if _, err := os.Stat(filepath.Join(dir, "c.db")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Run created the database: %v", err)
	}
}

func TestRunServesUntilItsContextEnds(t *testing.T) {
	dir := t.TempDir()
	o := runOptions(t, dir)
	b, err := backend.Open(t.Context(), o.Backend, 30*time.Second, true)
	if err != nil {
		t.Fatal(err)
	}
	b.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
	defer cancel()
	var log bytes.Buffer
	if err := Run(ctx, o, &log); err != nil {
		t.Fatalf("Run: %v\n%s", err, log.String())
	}
	if ctx.Err() == nil {
		t.Fatal("Run returned before its context ended")
	}
}

func TestNewToken(t *testing.T) {
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	key := audit.PublicKeyString(pub)
	for _, tc := range []struct {
		name, who, role, key string
		usage                string // "": made
	}{
		{name: "viewer", who: "ana", role: "viewer"},
		{name: "operator with a key", who: " ben ", role: "operator", key: key},
		{name: "a space in the name", who: "a b", role: "viewer", usage: "give a NAME without spaces"},
		{name: "no name", who: " ", role: "viewer", usage: "give a NAME without spaces"},
		{name: "a bad role", who: "ana", role: "admin", usage: "ROLE viewer or operator"},
		{name: "a bad key", who: "ana", role: "viewer", key: "ed25519:nope", usage: "--key: "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tok, line, err := NewToken(tc.who, tc.role, tc.key)
			var ue *cli.UsageError
			if tc.usage != "" {
				if !errors.As(err, &ue) || !strings.Contains(err.Error(), tc.usage) {
					t.Fatalf("NewToken: %v; want a usage error naming %q", err, tc.usage)
				}
				return
			}
			if err != nil || len(tok) < 32 || strings.Contains(line, tok) || !strings.HasPrefix(line, strings.TrimSpace(tc.who)+" "+tc.role+" sha256:") ||
				tc.key != "" && !strings.HasSuffix(line, " "+tc.key) {
				t.Fatalf("NewToken = %q, %q, %v", tok, line, err)
			}
		})
	}
}

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
