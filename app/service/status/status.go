// Package status is the one view of a running backend an operator asks for
// at month-end: the queue's depth and oldest message, the DLQ by reason
// code, the records by state where the store can count them cheaply, the
// stuck claims, and the circuit of a consumer on this host.
package status

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/finedge/idempotent-consumer/internal/redact"

	"github.com/finedge/idempotent-consumer/idempotency/driver"
	"github.com/finedge/idempotent-consumer/queue"
)

// Report is what status shows.
type Report struct {
	Backend string    `json:"backend"`
	Queue   QueueView `json:"queue"`
	// DLQByCode counts the DLQ's messages by reason code (nil when the DLQ
	// was not read this time: Sources.ScanDLQ said no).
	DLQByCode map[queue.Code]int `json:"dlqByCode"`
	// DLQUnseen is how many DLQ messages DLQByCode misses (SQS: held
	// invisible by another reader for longer than the read waited; an
	// approximate count).
	DLQUnseen int `json:"dlqUnseen,omitempty"`
	// Records counts the records by state; RecordsNote says why not when
	// the store cannot count cheaply.
	Records     map[driver.State]int `json:"records,omitempty"`
	RecordsNote string               `json:"recordsNote,omitempty"`
	// Stuck is how many claims are IN_PROGRESS past their lease (-1: the
	// store cannot list them).
	Stuck int `json:"stuck"`
	// Consumer is what the consumer's /metrics on this host says.
	Consumer Consumer `json:"consumer"`
}

// QueueView is the queue's depth as status shows it.
type QueueView struct {
	Waiting  int `json:"waiting"`
	InFlight int `json:"inFlight"`
	DLQ      int `json:"dlq"`
	// Approximate: the counts are the queue's estimates (SQS), not exact.
	Approximate bool `json:"approximate,omitempty"`
	// OldestAge is the oldest message's age in whole seconds; absent where
	// the queue cannot tell (SQS reports it to CloudWatch only).
	OldestAge *int64 `json:"oldestAge,omitempty"`
}

// Consumer is the state of a consumer read from its /metrics.
type Consumer struct {
	URL       string `json:"url"`
	Reachable bool   `json:"reachable"`
	// Circuit is closed, half_open or open ("" when unknown).
	Circuit  string  `json:"circuit,omitempty"`
	InFlight float64 `json:"inFlight"`
	Error    string  `json:"error,omitempty"`
	// Window is the posting window as the consumer reports it: "open
	// until T" or "outside posting window until T" ("" without one).
	Window string `json:"postingWindow,omitempty"`
	// Debits are the consumer's debit counters (for the console's charts:
	// rates between two reads).
	Debits Debits `json:"-"`
}

// Debits are a consumer's cumulative debit counters from its /metrics.
type Debits struct {
	Known bool // the consumer exports them
	// Succeeded: chargerecovery_debits_total{result="success"}.
	Succeeded float64
	// Calls and Seconds: chargerecovery_debit_seconds' count and sum, every
	// result; Buckets its cumulative buckets by upper bound (le), every
	// result summed.
	Calls, Seconds float64
	Buckets        map[float64]float64
}

// Sources are what Collect reads.
type Sources struct {
	Backend    string
	Queue      queue.Operator
	Store      driver.Store
	MetricsURL string // "" to skip
	Client     *http.Client
	Now        time.Time
	// ScanDLQ, when set, says from the queue's depth whether to read the
	// DLQ by reason code this time (a console sampling SQS every few
	// seconds must not keep the DLQ busy); nil: always.
	ScanDLQ func(queue.Depth) bool
	// Sampled says the report is a sample taken every few seconds (the
	// console's overview): on a store that finds its IN_PROGRESS records
	// only by reading every record (IndexCounter: DynamoDB, whose hot path
	// writes no index), only what its index holds is counted, and the
	// stuck claims are not (Stuck -1); RecordsNote says so.
	Sampled bool
}

// IndexCounter is a store whose IN_PROGRESS count and stuck claims are a
// Scan of the whole table (awsdynamodb: the hot path writes no index), and
// which counts the states its index holds without one.
type IndexCounter interface {
	CountIndexed(ctx context.Context, now time.Time) (map[driver.State]int, error)
}

// Collect reads everything; an error means the backend did not answer.
func Collect(ctx context.Context, s Sources) (Report, error) {
	r := Report{Backend: s.Backend, Stuck: -1}
	var err error
	d, err := s.Queue.Depth(ctx)
	if err != nil {
		return r, fmt.Errorf("queue depth: %w", err)
	}
	r.Queue = QueueView{Waiting: d.Waiting, InFlight: d.InFlight, DLQ: d.DLQ, Approximate: d.Approximate}
	if d.OldestKnown {
		secs := int64(d.OldestAge.Round(time.Second) / time.Second)
		r.Queue.OldestAge = &secs
	}
	if s.ScanDLQ == nil || s.ScanDLQ(d) {
		dry, err := s.Queue.Redrive(ctx, queue.RedriveOptions{DryRun: true})
		if err != nil {
			return r, fmt.Errorf("read the DLQ: %w", err)
		}
		r.DLQByCode, r.DLQUnseen = dry.SeenByCode, dry.Unseen
		if r.DLQByCode == nil {
			r.DLQByCode = map[queue.Code]int{}
		}
	}
	if ic, ok := s.Store.(IndexCounter); ok && s.Sampled {
		r.Records, err = ic.CountIndexed(ctx, s.Now)
		switch {
		case errors.Is(err, driver.ErrNotIndexed):
			r.Records, r.RecordsNote = nil, err.Error()
		case err != nil:
			return r, fmt.Errorf("count records: %w", err)
		default:
			r.RecordsNote = "IN_PROGRESS, stuck claims and DONE not counted in the overview: on DynamoDB they are a Scan of the whole table " +
				"(the Stuck page and chargerecovery status and stuck read them when asked)"
		}
		return s.consumer(ctx, r), nil
	}
	if sc, ok := s.Store.(driver.StateCounter); ok {
		r.Records, err = sc.CountByState(ctx, s.Now)
		switch {
		case errors.Is(err, driver.ErrNotIndexed):
			r.Records, r.RecordsNote = nil, err.Error() // a table made before its index: what to run
		case err != nil:
			return r, fmt.Errorf("count records: %w", err)
		case !hasState(r.Records, driver.StateDone):
			r.RecordsNote = "DONE not counted: the store's index holds only the states worth listing (DynamoDB: counting DONE would scan the table)"
		}
	} else {
		r.RecordsNote = "this store cannot count records by state without reading all of them (Redis: every key); use inspect for one charge"
	}
	if sl, ok := s.Store.(driver.StuckLister); ok {
		if _, r.Stuck, err = sl.Stuck(ctx, s.Now, 1); err != nil {
			return r, fmt.Errorf("stuck claims: %w", err)
		}
	}
	return s.consumer(ctx, r), nil
}

// consumer is r with the consumer's /metrics read, where there is one.
func (s Sources) consumer(ctx context.Context, r Report) Report {
	if s.MetricsURL != "" {
		r.Consumer = readConsumer(ctx, s.Client, s.MetricsURL)
	}
	return r
}

// waiting is ", N WAITING (scheduled)" when some records wait (a retry
// scheduled, a notice's lead), else nothing: the line stays as it was for
// a service without a recovery policy.
func waiting(records map[driver.State]int) string {
	if n := records[driver.StateWaiting]; n > 0 {
		return fmt.Sprintf(", %d WAITING (scheduled: a retry, or a debit after its notice)", n)
	}
	return ""
}

// readConsumer reads the circuit state and in-flight gauge from a
// consumer's /metrics.
func readConsumer(ctx context.Context, c *http.Client, url string) (out Consumer) {
	out = Consumer{URL: redact.URL(url)}
	if c == nil {
		c = &http.Client{Timeout: 3 * time.Second}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		out.Error = redact.Error(err, url).Error()
		return out
	}
	resp, err := c.Do(req)
	if err != nil {
		out.Error = "no consumer answering: " + redact.Error(err, url).Error()
		return out
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		out.Error = "metrics answered " + resp.Status
		return out
	}
	out.Reachable = true
	windowOpen, windowUntil := -1.0, 0.0
	sc := bufio.NewScanner(io.LimitReader(resp.Body, 8<<20))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		name, val, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(val, 64)
		if err != nil {
			continue
		}
		if metric, labels, ok := strings.Cut(name, "{"); ok {
			readDebits(&out.Debits, metric, labels, v)
			continue
		}
		switch name {
		case "chargerecovery_circuit_state":
			out.Circuit = [...]string{"closed", "half_open", "open"}[min(max(int(v), 0), 2)]
		case "chargerecovery_in_flight":
			out.InFlight = v
		case "chargerecovery_posting_window_open":
			windowOpen = v
		case "chargerecovery_posting_window_change_timestamp_seconds":
			windowUntil = v
		}
	}
	out.Window = windowText(windowOpen, windowUntil)
	return out
}

// windowText is the posting window read from a consumer's gauges (open:
// -1 when it reports none).
func windowText(open, until float64) string {
	if open < 0 {
		return ""
	}
	when := "(no change within 400 days)"
	if until > 0 {
		when = "until " + time.UnixMilli(int64(until*1000)).UTC().Format(time.RFC3339)
	}
	if open >= 1 {
		return "posting window open " + when
	}
	return "outside posting window " + when + ": no debit is posted, charges wait on the queue"
}

// maxBuckets bounds the histogram buckets kept from a /metrics (ours has
// 12): a page with more keeps memory bounded, not every bound.
const maxBuckets = 64

// readDebits adds one labelled sample of /metrics to d when it is one of
// the debit series.
func readDebits(d *Debits, metric, labels string, v float64) {
	label := func(name string) (string, bool) {
		_, rest, ok := strings.Cut(labels, name+`="`)
		if !ok {
			return "", false
		}
		val, _, ok := strings.Cut(rest, `"`)
		return val, ok
	}
	switch metric {
	case "chargerecovery_debits_total":
		if r, _ := label("result"); r == "success" {
			d.Succeeded += v
			d.Known = true
		}
	case "chargerecovery_debit_seconds_count":
		d.Calls += v
		d.Known = true
	case "chargerecovery_debit_seconds_sum":
		d.Seconds += v
	case "chargerecovery_debit_seconds_bucket":
		le, ok := label("le")
		if !ok {
			return
		}
		bound, err := strconv.ParseFloat(le, 64) // "+Inf" too
		if err != nil {
			return
		}
		if d.Buckets == nil {
			d.Buckets = map[float64]float64{}
		}
		if _, ok := d.Buckets[bound]; ok || len(d.Buckets) < maxBuckets {
			d.Buckets[bound] += v
		}
	}
}

// Print writes r for a person.
func Print(w io.Writer, r Report) {
	fmt.Fprintf(w, "backend   %s\n", r.Backend)
	age := "oldest age not known (SQS: CloudWatch ApproximateAgeOfOldestMessage)"
	if r.Queue.OldestAge != nil {
		age = "oldest " + (time.Duration(*r.Queue.OldestAge) * time.Second).String()
	}
	approx := ""
	if r.Queue.Approximate {
		approx = " (approximate counts: SQS's)"
	}
	fmt.Fprintf(w, "queue     %d waiting, %d in flight, %s%s\n", r.Queue.Waiting, r.Queue.InFlight, age, approx)
	fmt.Fprintf(w, "dlq       %d%s%s\n", r.Queue.DLQ, byCode(r.DLQByCode), map[bool]string{true: " (approximate)", false: ""}[r.Queue.Approximate])
	if r.DLQUnseen > 0 {
		fmt.Fprintf(w, "          by reason incomplete: about %d DLQ message(s) not seen (another reader held them); run status again\n", r.DLQUnseen)
	}
	switch {
	case r.Records != nil && hasState(r.Records, driver.StateDone):
		fmt.Fprintf(w, "records   %d IN_PROGRESS, %d DONE, %d FAILED%s\n",
			r.Records[driver.StateInProgress], r.Records[driver.StateDone], r.Records[driver.StateFailed], waiting(r.Records))
	case r.Records != nil:
		fmt.Fprintf(w, "records   %d IN_PROGRESS, %d FAILED%s; %s\n", r.Records[driver.StateInProgress], r.Records[driver.StateFailed], waiting(r.Records), r.RecordsNote)
	default:
		fmt.Fprintf(w, "records   not counted: %s\n", r.RecordsNote)
	}
	if r.Stuck >= 0 {
		fmt.Fprintf(w, "stuck     %d claim(s) IN_PROGRESS past their lease%s\n", r.Stuck, map[bool]string{true: " (see: chargerecovery stuck)", false: ""}[r.Stuck > 0])
	} else {
		fmt.Fprintln(w, "stuck     not listed: this store cannot list stuck claims")
	}
	switch c := r.Consumer; {
	case c.URL == "":
	case !c.Reachable:
		fmt.Fprintf(w, "consumer  %s: %s\n", c.URL, c.Error)
	case c.Circuit == "":
		fmt.Fprintf(w, "consumer  %s: %.0f in flight, no circuit breaker reported\n", c.URL, c.InFlight)
	default:
		fmt.Fprintf(w, "consumer  %s: circuit %s, %.0f in flight\n", c.URL, c.Circuit, c.InFlight)
	}
	if c := r.Consumer; c.Reachable && c.Window != "" {
		fmt.Fprintf(w, "window    %s\n", c.Window)
	}
}

// hasState: m counts st (a store may count only some states).
func hasState(m map[driver.State]int, st driver.State) bool { _, ok := m[st]; return ok }

func byCode(m map[queue.Code]int) string {
	if len(m) == 0 {
		return ""
	}
	var parts []string
	for c, n := range m {
		parts = append(parts, fmt.Sprintf("%s %d", c, n))
	}
	slices.Sort(parts)
	return " (" + strings.Join(parts, ", ") + ")"
}
