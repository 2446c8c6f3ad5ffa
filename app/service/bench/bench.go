// Package bench is chargerecovery bench: month-end load on a real backend
// (embedded, PostgreSQL or AWS, optionally with the Redis store) through
// the same pipeline serve runs, with the bank simulated in process. It
// enqueues charges with redeliveries, drains them, optionally runs the same
// pipeline without the claim first (the baseline), and reports throughput,
// handling latency, store and queue calls per message, memory, and the
// exactly-once verdict read from the simulated ledger.
package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/app/metrics"
	"github.com/finedge/idempotent-consumer/app/service/backend"
	"github.com/finedge/idempotent-consumer/app/service/cli"
	"github.com/finedge/idempotent-consumer/app/service/pipeline"
	"github.com/finedge/idempotent-consumer/consumer"
	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
	"github.com/finedge/idempotent-consumer/queue"
)

type benchConfig struct {
	bc          backend.Config
	charges     int
	dupRatio    float64
	dupLag      int
	latency     time.Duration
	concurrency int
	baseline    bool
	colocate    string
	receivers   int
	asJSON      bool
	timeout     time.Duration
	progress    time.Duration
	dir         string
	cpuProfile  string
	expired     int
	poison      float64
	// The month-end mode (burst.go).
	profileRaw  string
	profile     []phase
	loadLatency time.Duration
	curveEvery  time.Duration
}

type latencyMS struct {
	P50 float64 `json:"p50"`
	P95 float64 `json:"p95"`
	P99 float64 `json:"p99"`
	Max float64 `json:"max"`
}

type RunReport struct {
	Mode              string    `json:"mode"` // guarded or baseline
	Backend           string    `json:"backend"`
	Charges           int       `json:"charges"`
	Messages          int       `json:"messages"`
	Concurrency       int       `json:"concurrency"`
	CorebankLatencyMS float64   `json:"corebank_latency_ms"`
	EnqueueSeconds    float64   `json:"enqueue_seconds"`
	Seconds           float64   `json:"seconds"`
	ChargesPerSecond  float64   `json:"charges_per_second"`
	MessagesPerSecond float64   `json:"messages_per_second"`
	HandlingLatencyMS latencyMS `json:"handling_latency_ms"`
	// ClaimPath is where the claims were written: "store" (calls of their
	// own) or "queue" (in the receive's transaction, the result with the
	// message's delete or dead-letter).
	ClaimPath string `json:"claim_path,omitempty"`
	// ClaimsInReceive are the claims written in receives (claim path
	// "queue"), ResultsWithMessage the results written with their
	// message's delete or dead-letter.
	ClaimsInReceive    int64            `json:"claims_in_receive,omitempty"`
	ResultsWithMessage int64            `json:"results_with_message,omitempty"`
	StorePerFresh      float64          `json:"store_calls_per_fresh_charge"`
	StorePerDuplicate  float64          `json:"store_calls_per_duplicate"`
	StoreCalls         map[string]int64 `json:"store_calls"`
	QueueCallsPerMsg   float64          `json:"queue_calls_per_message"`
	QueueCalls         map[string]int64 `json:"queue_calls"`
	PeakHeapMB         float64          `json:"peak_heap_inuse_mb"`
	PeakRSSMB          float64          `json:"peak_rss_mb"`
	DuplicatesDropped  int64            `json:"duplicates_dropped"`
	DuplicatesDeferred int64            `json:"duplicates_deferred"`
	Retries            int64            `json:"retries"`
	DebitCalls         int64            `json:"debit_calls"`
	DebitedOnce        int              `json:"debited_once"`
	DoubleDebits       int              `json:"double_debits"`
	// WrongDebits are debits of a charge's key with another payload
	// (account, amount, type or narrative): each fails the run.
	WrongDebits int `json:"wrong_debits,omitempty"`
	NotDebited  int `json:"not_debited"`
	// With --poison: the poison messages sent, and how many the DLQ holds
	// after the run (every one of them, or the run failed).
	Poison         int `json:"poison,omitempty"`
	PoisonOnTheDLQ int `json:"poison_on_the_dlq,omitempty"`
	// With --expired: records past retention seeded before the consume
	// phase, and how many the retention sweeper deleted during it.
	ExpiredSeeded int `json:"expired_seeded,omitempty"`
	RecordsPurged int `json:"records_purged,omitempty"`
	// Burst is the month-end mode's (--profile).
	Burst *BurstStats `json:"burst,omitempty"`
	OK    bool        `json:"ok"`
}

type Report struct {
	Guarded  RunReport  `json:"guarded"`
	Baseline *RunReport `json:"baseline,omitempty"`
	// GuardCost is baseline throughput / guarded throughput, both measured
	// in this run (1.0: the guard is free; 2.0: half the throughput).
	GuardCost  float64 `json:"guard_cost,omitempty"`
	GoMaxProcs int     `json:"gomaxprocs"`
}

func Run(ctx context.Context, env *cli.Env, args []string) error {
	f := cli.NewFlagSet(env, "bench", "bench [flags]")
	var c benchConfig
	c.bc.BindFresh(f)
	f.Int(&c.charges, "charges", "", 100000, "distinct charges to enqueue")
	f.Float(&c.dupRatio, "dup-ratio", "", 0.3, "fraction of charges delivered a second time")
	f.Int(&c.dupLag, "dup-lag", "", 1000, "a duplicate is enqueued this many messages after its original")
	f.Duration(&c.latency, "corebank-latency", "", 0, "simulated core-banking latency per debit")
	f.Int(&c.concurrency, "concurrency", "", 64, "consumer concurrency")
	f.Bool(&c.baseline, "baseline", "", false, "also run the same pipeline without the idempotency claim first, and report the guard's cost")
	f.Int(&c.receivers, "receivers", "", 0, "receives under way at once (0: as serve chooses)")
	f.String(&c.colocate, "colocate", "", "auto", "auto: claims ride in the queue's transactions where the queue and the store share a database (as serve does); off: store calls of their own")
	f.Bool(&c.asJSON, "json", "", false, "print one JSON object")
	f.String(&c.bc.Sync, "sqlite-sync", "IC_SQLITE_SYNC", "FULL", "embedded: FULL or NORMAL")
	f.Duration(&c.timeout, "timeout", "", time.Hour, "give up after this")
	f.Duration(&c.progress, "progress", "", time.Second, "progress line interval on stderr (0: none)")
	f.String(&c.dir, "dir", "", os.TempDir(), "embedded: directory for the bench's SQLite file (deleted afterwards)")
	f.String(&c.cpuProfile, "cpuprofile", "", "", "write a CPU profile of the consume phase(s) to this file (go tool pprof)")
	f.Float(&c.poison, "poison", "", 0, "add this many poison messages per charge message (0-1), spread evenly: half not events at all, half events that do not parse (a fractional amount); each must reach the DLQ, and the run fails otherwise")
	f.Int(&c.expired, "expired", "", 0, "embedded: seed this many idempotency records past retention, and run serve's retention sweeper (every 1s, 500 rows per write, 1s apart, serve's defaults but the interval) during the consume phase, to measure its cost")
	f.String(&c.profileRaw, "profile", "", "", "month-end mode: send the charges while the consumer runs, at these rates, DURATION@RATE,… (\"month-end\": "+DefaultProfile+"); --charges is then the profile's total. The report adds the backlog curve and each charge's time from send to debit")
	f.Duration(&c.loadLatency, "corebank-load-latency", "", 0, "the bank slows down under load: each debit also waits this long per debit in flight at its start (e.g. 200us)")
	f.Duration(&c.curveEvery, "curve-interval", "", time.Second, "month-end mode: how often the backlog is sampled")
	if err := f.Parse(args, false); err != nil {
		return err
	}
	var p cli.Problems
	if c.profileRaw != "" {
		raw := c.profileRaw
		if raw == "month-end" {
			raw = DefaultProfile
		}
		ps, err := parseProfile(raw)
		if err != nil {
			p.Add("--profile: %v", err)
		} else {
			c.profile, c.charges = ps, profileCharges(ps)
		}
		if c.curveEvery < 100*time.Millisecond {
			p.Add("--curve-interval %s is under 100ms", c.curveEvery)
		}
	}
	if c.loadLatency < 0 {
		p.Add("--corebank-load-latency must not be negative")
	}
	if c.colocate != "auto" && c.colocate != "off" {
		p.Add("--colocate %q is not auto or off", c.colocate)
	}
	c.bc.Check(&p)
	if c.charges < 1 || c.charges > 10_000_000 {
		p.Add("--charges %d is outside 1-10000000", c.charges)
	}
	if c.dupRatio < 0 || c.dupRatio > 1 {
		p.Add("--dup-ratio %v is outside 0-1", c.dupRatio)
	}
	if c.poison < 0 || c.poison > 1 || (c.poison > 0 && c.profileRaw != "") {
		p.Add("--poison %v must be within 0-1, and is not for the month-end mode (--profile)", c.poison)
	}
	if c.concurrency < 1 || c.concurrency > 4096 {
		p.Add("--concurrency %d is outside 1-4096", c.concurrency)
	}
	if c.expired < 0 || (c.expired > 0 && (c.bc.Kind == backend.AWS || c.bc.Store != "")) {
		p.Add("--expired needs --backend embedded or postgres with its own store, and must not be negative (DynamoDB and Redis expire records themselves)")
	}
	if c.dupLag < 0 || c.latency < 0 || c.timeout <= 0 {
		p.Add("--dup-lag and --corebank-latency must not be negative, --timeout must be positive")
	}
	if err := p.Err(); err != nil {
		return err
	}
	rep := Report{GoMaxProcs: runtime.GOMAXPROCS(0)}
	if c.cpuProfile != "" {
		pf, err := os.OpenFile(c.cpuProfile, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
		if err != nil {
			return cli.Usagef("--cpuprofile: %v", err)
		}
		defer pf.Close()
		if err := pprof.StartCPUProfile(pf); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	if c.baseline {
		b, err := benchOnce(ctx, env, c, true)
		if err != nil {
			return err
		}
		rep.Baseline = &b
	}
	g, err := benchOnce(ctx, env, c, false)
	if err != nil {
		return err
	}
	rep.Guarded = g
	if rep.Baseline != nil && g.MessagesPerSecond > 0 {
		rep.GuardCost = rep.Baseline.MessagesPerSecond / g.MessagesPerSecond
	}
	if c.asJSON {
		if err := json.NewEncoder(env.Stdout).Encode(rep); err != nil {
			return err
		}
	} else {
		printBench(env.Stdout, rep)
	}
	if !g.OK {
		return fmt.Errorf("exactly-once check failed: %d double debits, %d not debited, %d debits with another charge's payload", g.DoubleDebits, g.NotDebited, g.WrongDebits)
	}
	return nil
}

func printBench(w io.Writer, r Report) {
	runs := []RunReport{r.Guarded}
	if r.Baseline != nil {
		runs = []RunReport{*r.Baseline, r.Guarded}
	}
	for _, b := range runs {
		fmt.Fprintf(w, `%s run (%s), GOMAXPROCS=%d
  charges %d, messages %d (%d duplicates), concurrency %d, core-banking latency %.1fms
  enqueue             %.1fs
  consume             %.2fs: %.0f charges/s, %.0f messages/s
  handling latency    p50 %.2fms  p95 %.2fms  p99 %.2fms  max %.1fms
  store calls         %.2f per fresh charge, %.2f per duplicate  %v%s
  queue calls         %.3f per message  %v
  peak memory         heap in use %.1f MiB, RSS %.1f MiB
  duplicates          %d dropped as done, %d deferred while in progress; %d retries
  exactly once        %d debited once, %d double debits, %d not debited (%d debit calls) -> %s
%s`, b.Mode, b.Backend, r.GoMaxProcs, b.Charges, b.Messages, b.Messages-b.Charges-b.Poison, b.Concurrency, b.CorebankLatencyMS,
			b.EnqueueSeconds, b.Seconds, b.ChargesPerSecond, b.MessagesPerSecond,
			b.HandlingLatencyMS.P50, b.HandlingLatencyMS.P95, b.HandlingLatencyMS.P99, b.HandlingLatencyMS.Max,
			b.StorePerFresh, b.StorePerDuplicate, b.StoreCalls, claimPathText(b), b.QueueCallsPerMsg, b.QueueCalls,
			b.PeakHeapMB, b.PeakRSSMB, b.DuplicatesDropped, b.DuplicatesDeferred, b.Retries,
			b.DebitedOnce, b.DoubleDebits, b.NotDebited, b.DebitCalls, map[bool]string{true: "OK", false: "FAILED"}[b.OK], poisonText(b))
	}
	if r.Baseline != nil {
		fmt.Fprintf(w, "guard cost: the baseline handles %.2fx the messages per second of the guarded run\n", r.GuardCost)
	}
	for _, b := range runs {
		if b.Burst != nil {
			printBurst(w, b)
		}
	}
}

// printBurst writes the month-end mode's backlog curve and waits.
func printBurst(w io.Writer, b RunReport) {
	s := b.Burst
	var prof []string
	for _, p := range s.Profile {
		prof = append(prof, fmt.Sprintf("%gs@%d/s", p.Secs, p.Rate))
	}
	fmt.Fprintf(w, `month-end (%s run): profile %s, bank +%.0fµs per debit in flight
  backlog             max %d messages; drained %.1fs after the profile ended
  send → debit        p50 %.1fms  p95 %.1fms  p99 %.1fms  max %.1fms
  backlog curve       t(s)  sent  decided  backlog
`, b.Mode, strings.Join(prof, " "), s.LoadLatencyUS, s.MaxBacklog, s.DrainedAfterSecs,
		s.TimeToDebitMS.P50, s.TimeToDebitMS.P95, s.TimeToDebitMS.P99, s.TimeToDebitMS.Max)
	for _, p := range s.Curve {
		fmt.Fprintf(w, "                      %5.1f %6d %8d %8d\n", p.Seconds, p.Sent, p.Decided, p.Backlog)
	}
}

// SeedExpired writes n idempotency records whose retention has passed (as
// a guard whose clock reads 31 days ago would), in parallel batches.
func SeedExpired(ctx context.Context, store driver.Store, n int) error {
	if n == 0 {
		return nil
	}
	past := time.Now().Add(-31 * 24 * time.Hour)
	g, err := idempotency.NewGuard(store, idempotency.Options{Clock: fixedClock(past)})
	if err != nil {
		return err
	}
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for w := range 64 {
		wg.Go(func() {
			for i := w; i < n; i += 64 {
				if _, err := g.Claim(ctx, fmt.Sprintf("EXPIRED-%08d", i), "fp"); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}

type fixedClock time.Time

func (c fixedClock) Now() time.Time { return time.Time(c) }

// benchCharge builds charge i of a run.
func benchCharge(run string, i int) charge.Charge {
	fees := []struct {
		t     charge.Type
		minor int64
	}{{charge.SMSAlertFee, 2500}, {charge.ChequeBookFee, 15000}, {charge.LockerRent, 250000}}
	fee := fees[i%len(fees)]
	return charge.Charge{
		ID: fmt.Sprintf("B%s-%d", run, i), AccountID: fmt.Sprintf("%012d", 100000000000+i),
		Amount: charge.Money{Minor: fee.minor, Currency: "INR"}, Type: fee.t,
		DueDate: time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC),
	}
}

// duplicated decides, spread evenly and deterministically, which charges
// are delivered twice.
func duplicated(i int, ratio float64) bool {
	return float64((uint64(i)*2654435761)%10000) < ratio*10000
}

func benchOnce(ctx context.Context, env *cli.Env, c benchConfig, baseline bool) (RunReport, error) {
	run := backend.RandomID()
	mode := "guarded"
	if baseline {
		mode = "baseline"
	}
	bc := c.bc
	bc.Receivers = pipeline.Config{Receivers: c.receivers}.MostReceivers()
	b, drop, err := backend.OpenFresh(ctx, env.Stderr, bc, "bench", c.dir, benchVisibility, false)
	if err != nil {
		return RunReport{}, err
	}
	defer drop()
	// 1. Enqueue the charges and their redeliveries (in the month-end
	// mode a producer sends them while the consumer runs).
	var prod *producer
	var messages int
	var enqSeconds float64
	if c.profile != nil {
		prod = newProducer(c.charges)
		for i := range c.charges + c.dupLag {
			if orig, dup := at(i, c); orig >= 0 && dup >= 0 {
				messages += 2
			} else if orig >= 0 || dup >= 0 {
				messages++
			}
		}
	} else {
		enqStart := time.Now()
		if messages, err = enqueue(ctx, b.Queue, c, run); err != nil {
			return RunReport{}, err
		}
		enqSeconds = time.Since(enqStart).Seconds()
	}
	// 2. With --expired, records past retention for the sweeper.
	if err := SeedExpired(ctx, b.Store, c.expired); err != nil {
		return RunReport{}, fmt.Errorf("seed expired records: %w", err)
	}
	// 3. Consume them all through the pipeline serve runs.
	cr, err := consume(ctx, env, b, c, mode, baseline, messages, prod, run)
	if err != nil {
		return RunReport{}, err
	}
	// 4. Count and verify.
	r, err := report(c, b, mode, baseline, messages, enqSeconds, cr)
	if err != nil || c.poison == 0 {
		return r, err
	}
	r.Poison = poisonCount(c, goodMessages(c))
	d, err := b.Queue.Depth(ctx)
	if err != nil {
		return r, fmt.Errorf("count the DLQ: %w", err)
	}
	r.PoisonOnTheDLQ = d.DLQ
	r.OK = r.OK && d.DLQ == r.Poison
	return r, nil
}

// The bench's queue visibility and claim lease: long, so that nothing is
// redelivered or reclaimed because the machine is busy.
const benchVisibility, benchLease = 60 * time.Second, 60 * time.Second

// enqueue sends the originals in order, each duplicate dupLag messages
// later, through the queue port's batch send (SQS: 10 per call, 8 calls at
// once; embedded: 1,000 per transaction, one at a time, as there is one
// writer), and returns how many messages it sent.
func enqueue(ctx context.Context, q queue.Queue, c benchConfig, run string) (int, error) {
	batchMax, parallel := 1000, 1
	if c.bc.Kind == backend.AWS {
		batchMax, parallel = 10, 8
	}
	messages := 0
	batch := make([]queue.Outgoing, 0, batchMax)
	var sendMu sync.Mutex
	var wg sync.WaitGroup
	var sendErr error
	sem := make(chan struct{}, parallel)
	flush := func() {
		if len(batch) == 0 {
			return
		}
		msgs := batch
		batch = make([]queue.Outgoing, 0, batchMax)
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if _, err := q.SendBatch(ctx, msgs); err != nil {
				sendMu.Lock()
				sendErr = err
				sendMu.Unlock()
			}
		})
	}
	add := func(i int) error {
		body, err := charge.MarshalEvent(benchCharge(run, i))
		if err != nil {
			return err
		}
		batch = append(batch, queue.Outgoing{Body: body})
		messages++
		if len(batch) == batchMax {
			flush()
		}
		return nil
	}
	sent := 0 // good messages, for the poison's spacing
	for i := 0; i < c.charges+c.dupLag; i++ {
		orig, dup := at(i, c)
		for _, j := range []int{orig, dup} {
			if j < 0 {
				continue
			}
			if err := add(j); err != nil {
				return 0, err
			}
			if sent++; poisonAfter(c, sent) {
				batch = append(batch, queue.Outgoing{Body: poisonBody(run, sent)})
				messages++
				if len(batch) == batchMax {
					flush()
				}
			}
		}
	}
	flush()
	wg.Wait()
	if sendErr != nil {
		return 0, fmt.Errorf("enqueue: %w", sendErr)
	}
	return messages, nil
}

// poisonAfter says whether a poison message follows the sent-th good
// one: c.poison per charge, spread evenly.
func poisonAfter(c benchConfig, sent int) bool {
	return c.poison > 0 && int(float64(sent)*c.poison) > int(float64(sent-1)*c.poison)
}

// goodMessages is how many charge messages (originals and duplicates)
// a run sends.
func goodMessages(c benchConfig) int {
	n := 0
	for i := range c.charges + c.dupLag {
		orig, dup := at(i, c)
		if orig >= 0 {
			n++
		}
		if dup >= 0 {
			n++
		}
	}
	return n
}

// poisonCount is how many poison messages enqueue sends among good
// charge messages.
func poisonCount(c benchConfig, good int) int {
	n := 0
	for i := 1; i <= good; i++ {
		if poisonAfter(c, i) {
			n++
		}
	}
	return n
}

// poisonBody is the n-th poison message: alternately not an event at all,
// and an event that does not parse (a fractional amount in minor units).
func poisonBody(run string, n int) []byte {
	if n%2 == 0 {
		return []byte("not an event: poison " + run + "-" + strconv.Itoa(n))
	}
	return []byte(`{"schemaVersion":1,"chargeId":"POISON-` + run + `-` + strconv.Itoa(n) + `","accountId":"001234567890","amount":{"minor":25.5,"currency":"INR"},"chargeType":"SMS_ALERT_FEE","dueDate":"2026-11-30"}`)
}

// consumed is what the consume phase measured.
type consumed struct {
	elapsed                            time.Duration
	heapMB, rssMB                      float64
	ledger                             *benchLedger
	counts                             metrics.Counts
	hist                               *histogram
	dropped, deferred, retries, purged int64
	burst                              *BurstStats
	colocated                          bool
}

// consume runs the pipeline until every message is decided (or the
// timeout), with a progress line every c.progress, and the retention
// sweeper beside it with --expired.
func consume(ctx context.Context, env *cli.Env, b *backend.Backend, c benchConfig, mode string, baseline bool, messages int, prod *producer, runID string) (consumed, error) {
	// No log line is formatted: the queue-only baseline writes none, and
	// the charge handler's line per charge (~4% of the guarded run's CPU
	// when formatted into io.Discard) is the service's observability, not
	// the guard's cost (BENCHMARKS.md).
	quiet := slog.New(slog.DiscardHandler)
	runtime.GC()
	mem := startMemSampler()
	ledger := newBenchLedger(c.charges, c.latency)
	ledger.loadLatency = c.loadLatency
	if prod != nil {
		ledger.sentAt = prod.sentAt
	}
	m := metrics.New() // counts store and queue calls by wrapping the ports
	var hist histogram
	var decided, dropped, deferred, retries atomic.Int64
	done := make(chan struct{})
	var doneOnce sync.Once
	onDecision := func(_ queue.Message, d consumer.Decision, took time.Duration) {
		hist.add(took)
		if d.Action != consumer.Retry && decided.Add(1) == int64(messages) {
			doneOnce.Do(func() { close(done) })
		}
	}
	onResult := func(_ context.Context, _ queue.Message, _ charge.Charge, r charge.Result) {
		switch r.Outcome {
		case charge.DuplicateDone:
			dropped.Add(1)
		case charge.DuplicateInProgress:
			deferred.Add(1)
		case charge.RetryLater, charge.LeaseLost:
			retries.Add(1)
		}
	}
	pl, err := pipeline.New(
		pipeline.Ports{Source: b.Queue, Store: b.Store, Bank: pipeline.Bank{Debiter: ledger}, Notifier: nopNotifier{}},
		pipeline.Config{Concurrency: c.concurrency, Visibility: benchVisibility, Lease: benchLease, Retention: idempotency.DefaultRetention,
			Skew: idempotency.DefaultSkewMargin, ShutdownTimeout: 30 * time.Second, NotifyTimeout: 5 * time.Second, Fingerprints: pipeline.RunKeys(),
			Colocate: c.colocate, Receivers: c.receivers},
		pipeline.Options{Logger: quiet, Metrics: m, OnResult: onResult, OnDecision: onDecision, Baseline: baseline})
	if err != nil {
		return consumed{}, err
	}
	rt := pl.Runtime
	rctx, cancel := context.WithCancel(ctx)
	runDone := make(chan error, 1)
	start := time.Now()
	go func() { runDone <- pl.Run(rctx) }()
	var burst *BurstStats
	prodErr := make(chan error, 1)
	var curve <-chan time.Time
	if prod != nil {
		burst = &BurstStats{Profile: c.profile, LoadLatencyUS: float64(c.loadLatency.Nanoseconds()) / 1000}
		go func() { prodErr <- prod.run(rctx, b.Queue, c, runID, start) }()
		t := time.NewTicker(c.curveEvery)
		defer t.Stop()
		curve = t.C
	}
	sample := func() {
		if burst == nil {
			return
		}
		sent, dec := prod.sent.Load(), decided.Load()
		burst.Curve = append(burst.Curve, CurvePoint{Seconds: time.Since(start).Round(time.Millisecond).Seconds(), Sent: sent, Decided: dec, Backlog: sent - dec})
		burst.MaxBacklog = max(burst.MaxBacklog, sent-dec)
	}
	var purged atomic.Int64
	if c.expired > 0 {
		sweepDone := make(chan struct{})
		defer func() { <-sweepDone }()
		go func() {
			defer close(sweepDone)
			backend.RunSweeper(rctx, b, b.Store, backend.SweepConfig{Interval: time.Second, Batch: 500, Pause: time.Second}, quiet,
				func(s backend.SweepCounts) { purged.Add(int64(s.Records)) })
		}()
	}
	var tick <-chan time.Time
	if c.progress > 0 {
		t := time.NewTicker(c.progress)
		defer t.Stop()
		tick = t.C
	}
	timeout := time.After(c.timeout)
	last, lastAt := int64(0), start
wait:
	for {
		select {
		case <-done:
			break wait
		case <-curve:
			sample()
		case err := <-prodErr:
			if err != nil {
				cancel()
				<-runDone
				return consumed{}, fmt.Errorf("bench %s: producer: %w", mode, err)
			}
		case <-tick:
			n := decided.Load()
			now := time.Now()
			fmt.Fprintf(env.Stderr, "bench %s: %d/%d messages (%.0f msg/s now), in flight %d\n",
				mode, n, messages, float64(n-last)/now.Sub(lastAt).Seconds(), rt.Stats().InFlight)
			last, lastAt = n, now
		case <-timeout:
			cancel()
			<-runDone
			return consumed{}, fmt.Errorf("bench %s: timed out after %s with %d of %d messages done", mode, c.timeout, decided.Load(), messages)
		case <-ctx.Done():
			cancel()
			<-runDone
			return consumed{}, ctx.Err()
		}
	}
	elapsed := time.Since(start)
	if burst != nil {
		sample()
		var profileDur time.Duration
		for _, p := range c.profile {
			profileDur += p.Dur
		}
		burst.DrainedAfterSecs = (elapsed - profileDur).Seconds()
		td := &ledger.toDebit
		burst.TimeToDebitMS = latencyMS{P50: ms(td.quantile(.5)), P95: ms(td.quantile(.95)), P99: ms(td.quantile(.99)), Max: ms(td.max)}
	}
	cancel()
	if err := <-runDone; err != nil {
		return consumed{}, err
	}
	heapMB, rssMB := mem.finish()

	counts, err := m.Counts()
	if err != nil {
		return consumed{}, err
	}
	return consumed{elapsed: elapsed, heapMB: heapMB, rssMB: rssMB, ledger: ledger, counts: counts, hist: &hist,
		dropped: dropped.Load(), deferred: deferred.Load(), retries: retries.Load(), purged: purged.Load(), burst: burst, colocated: pl.Colocated}, nil
}

// report counts the calls per message and verifies exactly-once from the
// bench's ledger.
func report(c benchConfig, b *backend.Backend, mode string, baseline bool, messages int, enqSeconds float64, cr consumed) (RunReport, error) {
	ledger, counts, hist, elapsed := cr.ledger, cr.counts, cr.hist, cr.elapsed
	once, double, none := ledger.verify()
	won := counts.ClaimOutcomes["acquired"] + counts.ClaimOutcomes["reclaimed"]
	// Only claims that were store calls of their own count as store calls
	// (a claim written in the receive's transaction is not one).
	wonByCall := min(won, counts.StoreCalls["claim"])
	claimedDup := counts.StoreCalls["claim"] - wonByCall
	fresh := float64(c.charges)
	dups := float64(goodMessages(c) - c.charges)
	r := RunReport{
		Mode: mode, Backend: b.Desc, Charges: c.charges, Messages: messages, Concurrency: c.concurrency,
		CorebankLatencyMS: float64(c.latency.Microseconds()) / 1000, EnqueueSeconds: enqSeconds,
		Seconds: elapsed.Seconds(), ChargesPerSecond: fresh / elapsed.Seconds(), MessagesPerSecond: float64(messages) / elapsed.Seconds(),
		HandlingLatencyMS: latencyMS{P50: ms(hist.quantile(.5)), P95: ms(hist.quantile(.95)), P99: ms(hist.quantile(.99)), Max: ms(hist.max)},
		StoreCalls:        counts.StoreCalls, QueueCalls: counts.QueueCalls,
		PeakHeapMB: cr.heapMB, PeakRSSMB: cr.rssMB,
		DuplicatesDropped: cr.dropped, DuplicatesDeferred: cr.deferred, Retries: cr.retries,
		DebitCalls: ledger.calls.Load(), DebitedOnce: once, DoubleDebits: double, NotDebited: none, WrongDebits: int(ledger.wrong.Load()),
		ExpiredSeeded: c.expired, RecordsPurged: int(cr.purged), Burst: cr.burst,
	}
	if !baseline {
		r.ClaimPath = "store"
		if cr.colocated {
			r.ClaimPath = "queue"
			var claims int64
			for _, n := range counts.ClaimOutcomes {
				claims += n
			}
			r.ClaimsInReceive = claims - counts.StoreCalls["claim"]
			r.ResultsWithMessage = counts.StoreCalls["finish_settle"]
		}
		r.StorePerFresh = float64(wonByCall+counts.StoreCalls["finish"]+counts.StoreCalls["extend"]) / fresh
		if dups > 0 {
			r.StorePerDuplicate = float64(claimedDup) / dups
		}
	}
	var qcalls int64
	for _, v := range r.QueueCalls {
		qcalls += v
	}
	r.QueueCallsPerMsg = float64(qcalls) / float64(messages)
	r.OK = once == c.charges && double == 0 && none == 0 && r.WrongDebits == 0
	return r, nil
}

// poisonText is the poison line of a run with --poison.
func poisonText(b RunReport) string {
	if b.Poison == 0 {
		return ""
	}
	return fmt.Sprintf("  poison              %d sent, %d on the DLQ\n", b.Poison, b.PoisonOnTheDLQ)
}

// claimPathText says, after the store calls, where the claims rode.
func claimPathText(b RunReport) string {
	if b.ClaimPath != "queue" {
		return ""
	}
	return fmt.Sprintf("\n  claim path          in the queue's transactions: %d claims written in receives, %d results with their messages' deletes",
		b.ClaimsInReceive, b.ResultsWithMessage)
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
