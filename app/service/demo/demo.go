// Package demo is chargerecovery demo: the exactly-once proof in one
// command. It starts the bank simulator over HTTP (or mutual TLS and
// OAuth2 with --secure), sends charges of which about 30% are delivered
// again, runs the consumer on a fresh backend, and checks the simulator's
// ledger: every charge debited once, none twice, declined charges (with
// --decline-rate) recorded FAILED and dead-lettered, never debited. With
// --reconcile it then exports the simulator's ledger as a camt.053
// statement of the run's period and reconciles it against the records,
// as chargerecovery reconcile does: a break fails the demo.
package demo

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/app/corebanksim"
	"github.com/finedge/idempotent-consumer/app/notifysim"
	"github.com/finedge/idempotent-consumer/app/reconcile"
	"github.com/finedge/idempotent-consumer/app/reconcile/statement"
	"github.com/finedge/idempotent-consumer/app/service/backend"
	"github.com/finedge/idempotent-consumer/app/service/cli"
	"github.com/finedge/idempotent-consumer/app/service/pipeline"
	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
	"github.com/finedge/idempotent-consumer/internal/pki"
	"github.com/finedge/idempotent-consumer/queue"
)

// Report is the demo's result (--json prints it as one object).
type Report struct {
	Backend      string `json:"backend"`
	Charges      int    `json:"charges"`
	MessagesSent int    `json:"messages_sent"`
	DebitedOnce  int    `json:"debited_once"`
	// DoubleDebits: charges posted more than once. AskedAgain: charges
	// posted once, but asked again after core banking confirmed them (its
	// own Idempotency-Key check kept them to one posting: the last line of
	// defence, which the guard must not lean on).
	DoubleDebits       int            `json:"double_debits"`
	AskedAgain         int            `json:"asked_again"`
	NotDebited         int            `json:"not_debited"`
	Declined           int            `json:"declined"`
	DuplicateRequests  int            `json:"duplicate_debit_requests"`
	DuplicatesDropped  int            `json:"duplicates_dropped"`
	DuplicatesDeferred int            `json:"duplicates_deferred"`
	Retries            int            `json:"retries"`
	DeadLettered       int            `json:"dead_lettered"`
	Outcomes           map[string]int `json:"outcomes"`
	ElapsedMS          int64          `json:"elapsed_ms"`
	OK                 bool           `json:"ok"`
	Problem            string         `json:"problem,omitempty"`
	// Bank is how the consumer reached the bank: "plain HTTP", or mutual
	// TLS + OAuth2 with the count of tokens issued.
	Bank string `json:"bank"`
	// Reconciliation is what --reconcile found (nil without it).
	Reconciliation *Reconciliation `json:"reconciliation,omitempty"`
}

// Reconciliation is the demo's reconciliation of the simulator's statement
// against the records.
type Reconciliation struct {
	// Statement is the camt.053 file (in the demo's temporary directory:
	// gone afterwards unless --keep).
	Statement         string         `json:"statement"`
	CollectionAccount string         `json:"collection_account"`
	PeriodFrom        string         `json:"period_from"`
	PeriodTo          string         `json:"period_to"`
	Postings          int            `json:"postings"`
	Reversals         int            `json:"reversals"`
	Matched           int            `json:"matched"`
	Unverified        int            `json:"unverified"`
	Breaks            int            `json:"breaks"`
	Kinds             map[string]int `json:"break_kinds"`
	// Report is the reconciliation's own report (its breaks, to act on).
	Report reconcile.Report `json:"report"`
}

type demoConfig struct {
	bc          backend.Config
	charges     int
	dupRatio    float64
	concurrency int
	timeout     time.Duration
	seed        uint64
	asJSON      bool
	verbose     bool
	keep        bool
	// existing (aws): queue, DLQ and table to run on as they are, neither
	// created nor deleted (e.g. deploy/aws/stack.json's outputs).
	existingQueue, existingDLQ, existingTable string
	faults                                    corebanksim.FaultsBody
	latency                                   time.Duration
	bankTimeout                               time.Duration
	declineRate                               float64
	hostile                                   cli.HostileFlags
	baseline                                  bool
	secure                                    bool
	reconcile                                 bool
}

func Run(ctx context.Context, env *cli.Env, args []string) error {
	f := cli.NewFlagSet(env, "demo", "demo [flags]")
	var c demoConfig
	c.bc.BindFresh(f)
	f.Int(&c.charges, "charges", "", 20, "how many distinct charges")
	f.Float(&c.dupRatio, "dup-ratio", "", 0.3, "fraction of charges sent a second time under the same chargeId (simulated redelivery)")
	f.Int(&c.concurrency, "concurrency", "", 8, "consumer concurrency")
	f.Duration(&c.timeout, "timeout", "", 2*time.Minute, "give up waiting for the queue to drain after this")
	f.Flags().Uint64Var(&c.seed, "seed", 0, "random seed for accounts, amounts and which charges repeat (0: random)")
	f.Bool(&c.asJSON, "json", "", false, "print one JSON object instead of the summary")
	f.Bool(&c.verbose, "verbose", "", false, "log every decision to stderr")
	f.Bool(&c.keep, "keep", "", false, "keep the demo's SQLite file / queues / table afterwards")
	f.String(&c.existingQueue, "existing-queue", "", "", "aws: run on this queue (name or URL) instead of fresh ones, with --existing-dlq and --existing-table; nothing is created or deleted (e.g. the outputs of deploy/aws/stack.json); the queue must be empty")
	f.String(&c.existingDLQ, "existing-dlq", "", "", "aws: the existing queue's DLQ (name or URL)")
	f.String(&c.existingTable, "existing-table", "", "", "aws: an existing idempotency table")
	f.Duration(&c.latency, "corebank-latency", "", 5*time.Millisecond, "simulated core-banking latency")
	f.Float(&c.faults.TransientRate, "transient-rate", "", 0, "simulated core-banking 503s before posting (0-1)")
	f.Float(&c.faults.TransientAfterPostRate, "lost-response-rate", "", 0, "simulated lost responses after posting (0-1)")
	f.Float(&c.faults.TimeoutRate, "timeout-rate", "", 0, "simulated debits that never answer (0-1)")
	f.Duration(&c.bankTimeout, "corebank-timeout", "", 2*time.Second, "the consumer's timeout of one debit call")
	f.Float(&c.declineRate, "decline-rate", "", 0, "fraction of charges whose account the bank declines (recorded FAILED and dead-lettered, never debited)")
	c.hostile.Bind(f, "")
	f.Bool(&c.baseline, "baseline", "", false, "run WITHOUT the idempotency claim, to see what it prevents (the check then fails)")
	f.Bool(&c.secure, "secure", "", false, "run the bank over mutual TLS and OAuth2 client credentials: a CA, server and client certificates made at start (crypto/x509), tokens that expire every 2s")
	f.Bool(&c.reconcile, "reconcile", "", false, "after the check, export the simulator's ledger as a camt.053 statement of the run's period and reconcile it against the records (as chargerecovery reconcile --collection-account does): a break fails the demo")
	if err := f.Parse(args, false); err != nil {
		return err
	}
	var p cli.Problems
	c.bc.Check(&p)
	if c.charges < 1 || c.charges > 100000 {
		p.Add("--charges %d is outside 1-100000", c.charges)
	}
	if c.dupRatio < 0 || c.dupRatio > 1 {
		p.Add("--dup-ratio %v is outside 0-1", c.dupRatio)
	}
	if c.concurrency < 1 || c.concurrency > 1000 {
		p.Add("--concurrency %d is outside 1-1000", c.concurrency)
	}
	if c.timeout <= 0 || c.latency < 0 {
		p.Add("--timeout must be positive and --corebank-latency not negative")
	}
	c.hostile.Apply(&p, &c.faults)
	if c.declineRate < 0 || c.declineRate > 1 {
		p.Add("--decline-rate %v is outside 0-1", c.declineRate)
	}
	if existing := []string{c.existingQueue, c.existingDLQ, c.existingTable}; slices.Contains(existing, "") && slices.ContainsFunc(existing, func(s string) bool { return s != "" }) {
		p.Add("--existing-queue, --existing-dlq and --existing-table go together")
	} else if c.existingQueue != "" && (c.bc.Kind != backend.AWS || c.bc.Store != "") {
		p.Add("--existing-queue and the others are for --backend aws with its own store")
	} else if c.existingQueue != "" && c.keep {
		p.Add("--keep means nothing with --existing-queue: nothing is deleted")
	}
	if c.bankTimeout <= 0 {
		p.Add("--corebank-timeout must be positive")
	}
	for _, r := range []float64{c.faults.TransientRate, c.faults.TransientAfterPostRate, c.faults.TimeoutRate,
		c.faults.SlowRate, c.faults.BadGatewayAfterPostRate, c.faults.ResetAfterPostRate} {
		if r < 0 || r >= 1 {
			p.Add("fault rates must be within 0-1 (below 1, or nothing is ever debited)")
			break
		}
	}
	if err := p.Err(); err != nil {
		return err
	}
	rep, err := demo(ctx, env, c)
	if err != nil {
		return err
	}
	if c.asJSON {
		enc := json.NewEncoder(env.Stdout)
		if err := enc.Encode(rep); err != nil {
			return err
		}
	} else {
		printDemo(env.Stdout, rep)
	}
	if !rep.OK {
		return fmt.Errorf("exactly-once check failed: %s", rep.Problem)
	}
	if r := rep.Reconciliation; r != nil && r.Breaks > 0 {
		return fmt.Errorf("reconciliation found %d breaks (%s)", r.Breaks, breakKinds(r.Kinds))
	}
	return nil
}

// breakKinds lists the kinds found: "posted_not_recorded 1, …".
func breakKinds(m map[string]int) string {
	var w []string
	for _, k := range reconcile.Kinds {
		if n := m[string(k)]; n > 0 {
			w = append(w, fmt.Sprintf("%s %d", k, n))
		}
	}
	return strings.Join(w, ", ")
}

func printDemo(w io.Writer, r Report) {
	verdict := "OK: every charge was debited exactly once, and core banking never saw a debit request for a charge it had already confirmed"
	if !r.OK {
		verdict = "FAILED: " + r.Problem
	}
	fmt.Fprintf(w, `charge-recovery demo (%s)
  bank                %s
  charges             %d
  messages sent       %d (%d redeliveries of the same chargeId)
  debited once        %d
  double debits       %d (charges posted more than once)
  asked again         %d (posted once, but asked to debit again after core banking confirmed them: %d requests)
  not debited         %d
  declined            %d (FAILED and dead-lettered, never debited)
  duplicates dropped  %d (already DONE) + %d deferred while in progress
  retries             %d
  dead-lettered       %d
  elapsed             %s
%s
`, r.Backend, r.Bank, r.Charges, r.MessagesSent, r.MessagesSent-r.Charges, r.DebitedOnce, r.DoubleDebits, r.AskedAgain, r.DuplicateRequests, r.NotDebited, r.Declined,
		r.DuplicatesDropped, r.DuplicatesDeferred, r.Retries, r.DeadLettered,
		(time.Duration(r.ElapsedMS) * time.Millisecond).String(), verdict)
	if rc := r.Reconciliation; rc != nil {
		fmt.Fprintf(w, "reconciliation: %d postings, %d matched, %d breaks\n", rc.Postings, rc.Matched, rc.Breaks)
		fmt.Fprintf(w, "  statement         camt.053 of %s, %s to %s, from the simulator's ledger\n", rc.CollectionAccount, rc.PeriodFrom, rc.PeriodTo)
		fmt.Fprintf(w, "  matched           %d (%d by key only), %d reversals\n", rc.Matched, rc.Unverified, rc.Reversals)
		if rc.Breaks > 0 {
			fmt.Fprintf(w, "  breaks            %s\n", breakKinds(rc.Kinds))
			for _, b := range rc.Report.Breaks {
				fmt.Fprintf(w, "    %s %s: %s\n", b.Kind, b.ChargeID, b.Detail)
			}
			fmt.Fprintln(w, "FAILED: the bank's statement and the records disagree")
		} else {
			fmt.Fprintln(w, "OK: the bank's statement and the records agree")
		}
	}
}

// Workload makes n charges from rng: a seed gives the same accounts,
// amounts and types every time.
func Workload(rng *mrand.Rand, run string, n int) []charge.Charge {
	charges := make([]charge.Charge, n)
	fees := []struct {
		t     charge.Type
		minor int64
	}{{charge.SMSAlertFee, 2500}, {charge.ChequeBookFee, 15000}, {charge.LockerRent, 250000}}
	due := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	for i := range charges {
		fee := fees[rng.IntN(len(fees))]
		charges[i] = charge.Charge{
			ID: fmt.Sprintf("DEMO-%s-%05d", run, i+1), AccountID: fmt.Sprintf("%012d", rng.Int64N(1e12)),
			Amount: charge.Money{Minor: fee.minor, Currency: "INR"}, Type: fee.t, DueDate: due,
		}
	}
	return charges
}

// demo runs the whole proof: fresh state, simulator, consumer, workload,
// verification from the simulator's ledger.
func demo(ctx context.Context, env *cli.Env, c demoConfig) (Report, error) {
	logOut := io.Discard
	if c.verbose {
		logOut = env.Stderr
	}
	d := &demoRun{c: c, env: env, start: time.Now(), run: backend.RandomID(),
		log: slog.New(slog.NewTextHandler(logOut, &slog.HandlerOptions{Level: slog.LevelInfo}))}
	defer d.close()
	for _, step := range []func(context.Context) error{
		d.freshState,    // 1. fresh state of its own
		d.startBank,     // 2. the core-banking simulator, over real HTTP on loopback
		d.startConsumer, // 3. the consumer (or, with --baseline, the pipeline without the claim)
		d.sendWorkload,  // 4. N charges, about dupRatio of them sent twice
		d.drain,         // 5. every charge final and the queue empty
	} {
		if err := step(ctx); err != nil {
			return Report{}, err
		}
	}
	rep := d.verify() // 6. verify from the simulator's ledger
	if c.reconcile {
		r, err := d.reconcile(ctx) // 7. reconcile the bank's statement with the records
		if err != nil {
			return Report{}, fmt.Errorf("reconcile: %w", err)
		}
		rep.Reconciliation = r
		rep.ElapsedMS = time.Since(d.start).Milliseconds()
	}
	return rep, nil
}

// demoRun is one demo, built up by its steps in order.
type demoRun struct {
	c       demoConfig
	env     *cli.Env
	log     *slog.Logger
	start   time.Time
	run     string
	cleanup []func()

	b *backend.Backend // step 1

	faults  corebanksim.FaultsBody // step 2
	ledger  *corebanksim.Ledger
	tokens  *corebanksim.TokenIssuer   // with --secure
	keys    *idempotency.Fingerprinter // the pipeline's fingerprint keys
	bankURL string
	auth    pipeline.AuthFlags

	pl       *pipeline.Pipeline // step 3
	stop     func()             // stops the consumer and waits for it
	mu       sync.Mutex
	outcomes map[charge.Outcome]int

	charges  []charge.Charge // step 4
	declined map[string]bool
	sent     int
}

// The demo's queue visibility and claim lease: short, so that a retry or a
// reclaim happens within the demo's run.
const visibility, lease = 3 * time.Second, 3 * time.Second

// close stops what the steps started, last first.
func (d *demoRun) close() {
	for i := len(d.cleanup) - 1; i >= 0; i-- {
		d.cleanup[i]()
	}
}

// freshState opens a backend of the demo's own, or the existing AWS
// resources it was given (step 1).
func (d *demoRun) freshState(ctx context.Context) error {
	bc := d.c.bc
	bc.Wait, bc.MaxReceive, bc.Sync = time.Second, 20, "NORMAL"
	bc.Receivers = pipeline.ColocatedReceivers // as serve runs by default
	if d.c.existingQueue != "" {
		bc.Queue, bc.DLQ, bc.Table = d.c.existingQueue, d.c.existingDLQ, d.c.existingTable
		b, err := backend.Open(ctx, bc, visibility, false)
		if err != nil {
			return err
		}
		d.b = b
		d.cleanup = append(d.cleanup, b.Close)
		depth, err := b.Queue.Depth(ctx)
		if err != nil {
			return err
		}
		if depth.Waiting+depth.InFlight != 0 {
			return fmt.Errorf("the existing queue holds %d messages: the demo needs an empty one", depth.Waiting+depth.InFlight)
		}
		return nil
	}
	b, drop, err := backend.OpenFresh(ctx, d.env.Stderr, bc, "demo", "", visibility, d.c.keep)
	if err != nil {
		return err
	}
	d.b = b
	d.cleanup = append(d.cleanup, drop)
	return nil
}

// startBank serves the core-banking simulator on loopback, with mutual TLS
// and OAuth2 under --secure (step 2).
func (d *demoRun) startBank(context.Context) error {
	d.faults = d.c.faults
	d.faults.LatencyMS = d.c.latency.Milliseconds()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	d.ledger = corebanksim.NewLedger(d.faults.Faults(time.Now()))
	srv := &http.Server{Handler: corebanksim.Handler(d.ledger), ReadHeaderTimeout: 5 * time.Second}
	scheme := "http"
	if d.c.secure {
		var tlsConf *tls.Config
		d.tokens, tlsConf, d.auth, err = secureBank(&d.cleanup)
		if err != nil {
			_ = ln.Close()
			return fmt.Errorf("secure bank: %w", err)
		}
		srv.Handler, srv.TLSConfig, scheme = corebanksim.Secure(srv.Handler, d.tokens), tlsConf, "https"
		d.auth.TokenURL = "https://" + ln.Addr().String() + "/oauth/token"
		go func() { _ = srv.ServeTLS(ln, "", "") }()
	} else {
		go func() { _ = srv.Serve(ln) }()
	}
	d.cleanup = append(d.cleanup, func() { _ = srv.Close() })
	d.bankURL = scheme + "://" + ln.Addr().String()
	return nil
}

// startConsumer runs the pipeline serve runs, against the simulator, and
// counts the outcomes (step 3).
func (d *demoRun) startConsumer(ctx context.Context) error {
	d.outcomes = map[charge.Outcome]int{}
	d.keys = pipeline.RunKeys()
	cc := pipeline.Config{Concurrency: d.c.concurrency, Visibility: visibility, Lease: lease,
		Retention: idempotency.DefaultRetention, Skew: idempotency.DefaultSkewMargin, ShutdownTimeout: 10 * time.Second,
		CorebankURL: d.bankURL, CorebankTimeout: d.c.bankTimeout, Declines: "422:DECLINED", BankAuth: d.auth,
		Enquiry: true, HealthPath: "/healthz", CircuitAfter: 5, ProbeEvery: 200 * time.Millisecond, ProbeMax: time.Second,
		NotifyTimeout: time.Second, Fingerprints: d.keys}
	ports, err := pipeline.NewBank(cc, d.log)
	if err != nil {
		return err
	}
	d.pl, err = pipeline.New(pipeline.Ports{Source: d.b.Queue, Store: d.b.Store, Bank: ports, Notifier: notifysim.NewRecorder(0, d.log)}, cc,
		pipeline.Options{Logger: d.log, Baseline: d.c.baseline, OnResult: func(_ context.Context, _ queue.Message, _ charge.Charge, r charge.Result) {
			d.mu.Lock()
			d.outcomes[r.Outcome]++
			d.mu.Unlock()
		}})
	if err != nil {
		return err
	}
	rctx, stopConsumer := context.WithCancel(ctx)
	consumerDone := make(chan error, 1)
	go func() { consumerDone <- d.pl.Run(rctx) }()
	d.stop = sync.OnceFunc(func() { stopConsumer(); <-consumerDone })
	d.cleanup = append(d.cleanup, d.stop)
	return nil
}

// sendWorkload sends the charges, about dupRatio of them twice, shuffled;
// with --decline-rate the simulator declines some accounts (step 4).
func (d *demoRun) sendWorkload(ctx context.Context) error {
	seed := d.c.seed
	if seed == 0 {
		seed = mrand.Uint64()
	}
	rng := mrand.New(mrand.NewPCG(seed, 0x1dc0))
	d.charges = Workload(rng, d.run, d.c.charges)
	d.declined = map[string]bool{}
	if n := int(float64(d.c.charges)*d.c.declineRate + 0.5); n > 0 {
		d.faults.DeclineAccounts = map[string]string{}
		for _, i := range rng.Perm(d.c.charges)[:n] {
			d.faults.DeclineAccounts[d.charges[i].AccountID] = "ACCOUNT_CLOSED"
			d.declined[d.charges[i].ID] = true
		}
		d.ledger.SetFaults(d.faults.Faults(d.start))
	}
	var bodies [][]byte
	for _, ch := range d.charges {
		body, err := charge.MarshalEvent(ch)
		if err != nil {
			return err
		}
		bodies = append(bodies, body)
	}
	dups := int(float64(d.c.charges)*d.c.dupRatio + 0.5)
	for _, i := range rng.Perm(d.c.charges)[:dups] {
		bodies = append(bodies, bodies[i])
	}
	rng.Shuffle(len(bodies), func(i, j int) { bodies[i], bodies[j] = bodies[j], bodies[i] })
	for _, body := range bodies {
		if _, err := d.b.Queue.Send(ctx, body, nil); err != nil {
			return fmt.Errorf("send: %w", err)
		}
	}
	d.sent = len(bodies)
	return nil
}

// drain waits until every charge has a final record (baseline: nothing in
// flight) and the queue reads empty twice in a row (queue counts are
// approximate: SQS counts visible and in-flight messages one after the
// other, so a retry delay ending between the two reads as none); then it
// stops the consumer (step 5).
func (d *demoRun) drain(ctx context.Context) error {
	deadline := time.Now().Add(d.c.timeout)
	pending := d.charges
	for empty := 0; ; {
		var still []charge.Charge
		if !d.c.baseline {
			for _, ch := range pending {
				r, err := d.pl.Guard.Get(ctx, ch.ID)
				if err != nil || r.State == driver.StateInProgress {
					still = append(still, ch)
				}
			}
		}
		pending = still
		depth, err := d.b.Queue.Depth(ctx)
		mainDepth := depth.Waiting + depth.InFlight
		if err == nil && len(pending) == 0 && mainDepth == 0 && d.pl.Runtime.Stats().InFlight == 0 {
			if empty++; empty == 2 {
				break
			}
		} else {
			empty = 0
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			d.stop()
			return fmt.Errorf("the queue did not drain within %s (%d charges unfinished, %d messages left)", d.c.timeout, len(pending), mainDepth)
		}
		time.Sleep(100 * time.Millisecond)
	}
	d.stop()
	return nil
}

// verify reads the simulator's ledger: a charge is double-debited if it
// was posted twice, or if core banking was asked to debit it again after
// confirming it (only the idempotency key stopped that one, and a bank
// without one would have posted it) (step 6).
func (d *demoRun) verify() Report {
	c := d.c
	entries, dupRequests := d.ledger.Entries(), d.ledger.DuplicateRequests()
	posted := map[string]int{}
	for _, e := range entries {
		posted[e.IdempotencyKey]++
	}
	rep := Report{Backend: d.b.Desc, Charges: c.charges, MessagesSent: d.sent, Outcomes: map[string]int{}, Bank: "plain HTTP"}
	if d.tokens != nil {
		rep.Bank = fmt.Sprintf("mutual TLS + OAuth2 client credentials (%d tokens issued, each valid 2s)", d.tokens.Issued())
	}
	if c.baseline {
		rep.Backend += ", baseline: no idempotency claim"
	}
	for _, ch := range d.charges {
		dup := dupRequests[ch.ID]
		rep.DuplicateRequests += dup
		switch n := posted[ch.ID]; {
		case d.declined[ch.ID] && n == 0:
			rep.Declined++
		case n > 1:
			rep.DoubleDebits++
		case n == 1 && dup > 0:
			rep.AskedAgain++
		case n == 1:
			rep.DebitedOnce++
		default:
			rep.NotDebited++
		}
	}
	d.mu.Lock()
	for o, n := range d.outcomes {
		rep.Outcomes[o.String()] = n
	}
	rep.DuplicatesDropped = d.outcomes[charge.DuplicateDone]
	rep.DuplicatesDeferred = d.outcomes[charge.DuplicateInProgress]
	rep.Retries = d.outcomes[charge.RetryLater] + d.outcomes[charge.LeaseLost]
	rep.DeadLettered = d.outcomes[charge.DebitFailed] + d.outcomes[charge.DuplicateFailed] + d.outcomes[charge.Conflict] + d.outcomes[charge.Invalid]
	d.mu.Unlock()
	rep.ElapsedMS = time.Since(d.start).Milliseconds()
	rep.OK = rep.DebitedOnce+rep.Declined == c.charges && rep.Declined == len(d.declined) && rep.DoubleDebits == 0 && rep.AskedAgain == 0 && rep.NotDebited == 0
	if !rep.OK {
		var bad []string
		for _, ch := range d.charges {
			if n, dup := posted[ch.ID], dupRequests[ch.ID]; (n != 1 && !d.declined[ch.ID]) || (d.declined[ch.ID] && n != 0) || dup > 0 {
				what := fmt.Sprintf("%s posted %d times", ch.ID, n)
				if n == 1 && dup > 0 {
					what = fmt.Sprintf("%s posted once, but asked %d more time(s) after core banking confirmed it", ch.ID, dup)
				}
				bad = append(bad, what)
			}
		}
		sort.Strings(bad)
		rep.Problem = fmt.Sprintf("%d of %d charges not debited exactly once (e.g. %s)", len(bad), c.charges, bad[0])
	}
	return rep
}

// secureBank makes a CA, a server and a client certificate and a client
// secret in a private temporary directory, and returns the token issuer
// and TLS settings of a simulator that demands them, and the consumer's
// side of them.
func secureBank(cleanup *[]func()) (*corebanksim.TokenIssuer, *tls.Config, pipeline.AuthFlags, error) {
	dir, err := os.MkdirTemp("", "chargerecovery-demo-pki-")
	if err != nil {
		return nil, nil, pipeline.AuthFlags{}, err
	}
	*cleanup = append(*cleanup, func() { _ = os.RemoveAll(dir) })
	ca, err := pki.NewCA("demo bank CA")
	if err != nil {
		return nil, nil, pipeline.AuthFlags{}, err
	}
	now := time.Now()
	server, err := ca.Issue("corebank", true, now.Add(-time.Hour), now.Add(time.Hour))
	if err != nil {
		return nil, nil, pipeline.AuthFlags{}, err
	}
	client, err := ca.Issue("chargerecovery", false, now.Add(-time.Hour), now.Add(time.Hour))
	if err != nil {
		return nil, nil, pipeline.AuthFlags{}, err
	}
	certFile, keyFile, err := client.Write(dir, "client")
	if err != nil {
		return nil, nil, pipeline.AuthFlags{}, err
	}
	var secret [16]byte
	_, _ = rand.Read(secret[:])
	a := pipeline.AuthFlags{CA: filepath.Join(dir, "ca.pem"), Cert: certFile, Key: keyFile,
		ClientID: "chargerecovery-demo", SecretFile: filepath.Join(dir, "client-secret")}
	if err := pki.WriteFile(a.CA, ca.PEM); err != nil {
		return nil, nil, a, err
	}
	if err := pki.WriteFile(a.SecretFile, []byte(hex.EncodeToString(secret[:]))); err != nil {
		return nil, nil, a, err
	}
	pair, err := tls.X509KeyPair(server.Cert, server.Key)
	if err != nil {
		return nil, nil, a, err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.PEM)
	conf := &tls.Config{Certificates: []tls.Certificate{pair}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12}
	return corebanksim.NewTokenIssuer(a.ClientID, hex.EncodeToString(secret[:]), 2*time.Second), conf, a, nil
}

// reconcile exports the simulator's ledger as the camt.053 statement of the
// fee collection account for the run's period (whole seconds from its
// start to now), into a temporary directory of its own, and reconciles it
// against the demo's records with the pipeline's fingerprint keys, as
// chargerecovery reconcile --collection-account does (step 7).
func (d *demoRun) reconcile(ctx context.Context) (*Reconciliation, error) {
	dir, err := os.MkdirTemp("", "chargerecovery-demo-reconcile-")
	if err != nil {
		return nil, err
	}
	if !d.c.keep {
		d.cleanup = append(d.cleanup, func() { _ = os.RemoveAll(dir) })
	}
	now := time.Now()
	period := statement.Period{From: d.start.UTC().Truncate(time.Second), To: now.UTC().Truncate(time.Second).Add(time.Second)}
	account := corebanksim.DefaultCollectionAccount
	file := filepath.Join(dir, "statement-"+d.run+".xml")
	out, err := os.OpenFile(file, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, err
	}
	err = statement.WriteCamt053(out, statement.StatementInfo{ID: "DEMO-" + d.run, Account: account, Period: period, Created: now},
		d.ledger.Statement(period.From, period.To))
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("statement: %w", err)
	}
	read := func(fn func(statement.Posting) error) (statement.Period, error) {
		h, err := statement.ReadFile(file, statement.Options{CollectionAccount: account}, fn)
		return h.Period, err
	}
	rep, err := reconcile.Run(ctx, reconcile.Options{Store: d.b.Store, Fingerprints: d.keys, Period: period}, read)
	if err != nil {
		return nil, err
	}
	rep.Statements, rep.CollectionAccount = []string{file}, account
	return &Reconciliation{Statement: file, CollectionAccount: account,
		PeriodFrom: rep.Period.From, PeriodTo: rep.Period.To, Postings: rep.Postings, Reversals: rep.Reversals,
		Matched: rep.Matched, Unverified: rep.Unverified, Breaks: len(rep.Breaks), Kinds: rep.Counts(), Report: rep}, nil
}
