package protosim

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/app/chargehandler"
	"github.com/finedge/idempotent-consumer/app/corebanksim"
	"github.com/finedge/idempotent-consumer/app/service/approval"
	"github.com/finedge/idempotent-consumer/consumer"
	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
	"github.com/finedge/idempotent-consumer/lambdasqs"
	"github.com/finedge/idempotent-consumer/memqueue"
	"github.com/finedge/idempotent-consumer/queue"
)

// Config is one simulation run: the seed draws everything else (how many
// charges, which accounts decline and how, the retry schedule, when the
// bank books a declined debit after all, which operators act and when).
type Config struct {
	Seed uint64
	// NewStore opens a fresh, empty store for the run (memstore.New,
	// SQLite in a temporary file, …) and a function that closes it.
	NewStore func() (driver.Store, func(), error)
	// Step is the mean time between two steps (default 300ms).
	Step time.Duration
	// CrashRate, FailRate and LoseRate are the chances, at every call of
	// the outside world, that the caller dies there, that the call fails,
	// and that it lands and its answer is lost (defaults 0.02, 0.03, 0.03;
	// negative: none).
	CrashRate, FailRate, LoseRate float64
	// MaxSteps bounds a run (default 20,000): a run that does not end is
	// a failure (a livelock, or a charge nothing moves).
	MaxSteps int
	// NoTrace keeps no trace (benchmarks).
	NoTrace bool
	// Dir, when set, is a directory for the files of the runs that bring
	// approvals in (a third of them: an audit trail and its proposals,
	// removed after the run); "" leaves approvals out.
	Dir string
	// Plant plants a defect, to show that an invariant catches it (""
	// none): PlantBankIgnoresKeys, PlantAnyNewAttempt, PlantAckOnRetry,
	// PlantMarkNotCollect, PlantLeaveClaim, PlantDropSummary, ….
	Plant string
}

// The planted defects, each caught by one invariant.
const (
	// PlantBankIgnoresKeys: the bank posts a request again under a key it
	// posted already (the last line of defence gone): (a).
	PlantBankIgnoresKeys = "bank-ignores-keys"
	// PlantAnyNewAttempt: reopen --new-attempt without its eligibility
	// rule: (b).
	PlantAnyNewAttempt = "any-new-attempt"
	// PlantAckOnRetry: the consumer deletes a message it should retry: (c).
	PlantAckOnRetry = "ack-on-retry"
	// PlantMarkNotCollect: resolve marks a break it says it collected: (f).
	PlantMarkNotCollect = "mark-not-collect"
	// PlantLeaveClaim: an operator's command claims a charge and returns
	// without finishing: (g).
	PlantLeaveClaim = "leave-claim"
	// PlantLambdaKeepsAge: the Lambda hides a waiting message 12 hours
	// at a time and never starts it over, so the message keeps its age
	// (its start comparing only the sum of the waits with the retention,
	// as the first fix of issue 50's defect 5 did): (c).
	PlantLambdaKeepsAge = "lambda-keeps-age"
	// PlantDropSummary: the claims write no summary (a claim path that
	// forgets the amount, currency and last four reconciliation compares
	// every posting with): (h).
	PlantDropSummary = "drop-summary"
	// PlantUnfencedApproval: an approval's run reopens its targets without
	// the record it froze (any FAILED record, a new attempt): (e).
	PlantUnfencedApproval = "unfenced-approval"
	// PlantRunWithoutBook: the bulk reopen is executed without the book
	// (no approval, no run line in the trail): (d).
	PlantRunWithoutBook = "run-without-book"
)

func (c *Config) defaults() {
	if c.Step == 0 {
		c.Step = 300 * time.Millisecond
	}
	for _, r := range []*float64{&c.CrashRate, &c.FailRate, &c.LoseRate} {
		if *r == 0 {
			*r = map[*float64]float64{&c.CrashRate: 0.02, &c.FailRate: 0.03, &c.LoseRate: 0.03}[r]
		}
		if *r < 0 {
			*r = 0
		}
	}
	if c.MaxSteps == 0 {
		c.MaxSteps = 20_000
	}
}

// The protocol's parameters, as serve's defaults.
const (
	lease      = 60 * time.Second
	skew       = 2 * time.Second
	retention  = 30 * 24 * time.Hour
	visibility = 30 * time.Second
)

// Sim is one run.
type Sim struct {
	cfg      Config
	ctx      context.Context
	rng      *rand.Rand
	start    time.Time
	now      time.Time
	actors   []*actor
	ready    []*actor // scratch of run
	idle     []*actor
	steps    int
	pending  fault
	panicked string
	trace    []string
	quiet    bool // the final drain: no faults, no deaths
	final    bool
	respawn  func(*actor)

	storeAwayUntil time.Time
	// pausedUntil: no consumer receives before then (a posting window
	// closed, the bank's circuit open): messages age on the queue.
	pausedUntil time.Time
	again       int // PlantBankIgnoresKeys's postings
	closers     []func()
	book        *approval.Book
	trailPath   string

	inner   driver.Store
	store   *store
	ledger  *corebanksim.Ledger
	bank    *bank
	q       *memqueue.Queue
	fp      *idempotency.Fingerprinter
	guard   *idempotency.Guard // an operator's (serve's lease, retention, margin)
	svc     *charge.Service
	charges []charge.Charge
	waitCap time.Duration // the longest a wait hides a message at a time
	// lambda: the consumer is the Lambda (lambdasqs): a wait hides the
	// message at most lambdasqs.WaitVisibility at a time; keepsAge: it
	// never starts a waiting message over (PlantLambdaKeepsAge), so the
	// message keeps its age and its receive count.
	lambda, keepsAge bool

	w world // what happened, for the invariants
}

// world is what the run did, as the invariants need it.
type world struct {
	// tokens: who wrote each key's current token, and how.
	tokens map[string]tokenNote
	// requests: every debit request that reached the bank, in order.
	requests []request
	// latePosted: the keys the bank booked after declining them.
	latePosted map[string]bool
	// collected: when an operator's resolve first recorded a charge's
	// posting as collected (the charge must never be debited after it).
	collected map[string]time.Time
	// reopens by approval runs, by proposal and charge.
	approvalReopens map[string]*approvalMove
	// represent: the hard-declined charges an approved proposal marked
	// (under a policy with represent-hard-decline): each may be presented
	// again once, under one later generation.
	represent  map[string]string
	ops        []string // what the operators did, for the trace's end
	violations []string
	// kinds counts what happened, by kind: a run's coverage.
	kinds map[string]int
}

type tokenNote struct {
	actor string
	task  int
	op    string
	live  bool // a live lease was written (a reopen hands over one already passed)
}

type request struct {
	chargeID string
	key      string
	gen      int
	at       time.Time
	posted   bool
	declined string // the decline code, when declined
}

func (s *Sim) wrote(ctx context.Context, key, token, op string, leaseUntil time.Time) {
	a := actorOf(ctx)
	n := tokenNote{actor: "check", op: op, live: leaseUntil.After(s.now)}
	if a != nil {
		n.actor, n.task = a.name, a.task
	}
	s.w.tokens[key+"\x00"+token] = n
}

func (s *Sim) debited(ctx context.Context, req charge.DebitRequest, r charge.DebitReceipt, err error) {
	id, gen := splitKey(req.IdempotencyKey)
	rq := request{chargeID: id, key: req.IdempotencyKey, gen: gen, at: s.now, posted: err == nil}
	if d := (*charge.DeclineError)(nil); errors.As(err, &d) {
		rq.declined = d.Code
		s.saw("decline")
		if _, hard := charge.HardDecline(d.Code); hard {
			s.saw("hard decline")
		}
	}
	if err == nil && gen > 1 {
		s.saw("debit of a later generation")
	}
	s.w.requests = append(s.w.requests, rq)
	s.tracef("%s: bank %s → %s", who(ctx), req.IdempotencyKey, bankText(rq, err))
}

func bankText(rq request, err error) string {
	switch {
	case rq.declined != "":
		return "declined " + rq.declined
	case err != nil:
		return err.Error()
	}
	return "posted"
}

func splitKey(key string) (string, int) {
	key, _, _ = strings.Cut(key, "#again")
	id, g, ok := strings.Cut(key, charge.GenerationSeparator)
	if !ok {
		return key, 1
	}
	n := 0
	fmt.Sscanf(g, "%d", &n)
	return id, n
}

// saw counts one thing of a kind happening (Result.Kinds).
func (s *Sim) saw(kind string) { s.w.kinds[kind]++ }

// Result is what a run found.
type Result struct {
	Seed       uint64
	Steps      int
	Violations []string
	Trace      []string
	// Kinds counts what happened in the run by kind ("claim reclaimed",
	// "collect", "death of a consumer", …): what TestSimulate requires
	// its seeds to have covered.
	Kinds map[string]int
	// Err: the run could not be set up or did not end.
	Err error
}

// Failed reports whether the run found a violation or did not end.
func (r Result) Failed() bool { return r.Err != nil || len(r.Violations) > 0 }

// Classes are the invariants r violated ("(a)", "(f)", …; "no end" for
// a run that did not end), each once.
func (r Result) Classes() []string {
	var out []string
	if r.Err != nil {
		out = append(out, "no end")
	}
	for _, v := range r.Violations {
		c, _, _ := strings.Cut(v, " ")
		if !slices.Contains(out, c) {
			out = append(out, c)
		}
	}
	return out
}

// Report is r for a person: the seed, what broke, the trace.
func (r Result) Report() string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d (%d steps): replay with go test ./protosim -run TestSimulate -sim.seed=%d -v\n", r.Seed, r.Steps, r.Seed)
	if r.Err != nil {
		fmt.Fprintf(&b, "error: %v\n", r.Err)
	}
	for _, v := range r.Violations {
		fmt.Fprintf(&b, "VIOLATION: %s\n", v)
	}
	b.WriteString("trace:\n")
	for _, l := range r.Trace {
		b.WriteString("  " + l + "\n")
	}
	return b.String()
}

// Run runs one simulation.
func Run(ctx context.Context, cfg Config) Result {
	cfg.defaults()
	res := Result{Seed: cfg.Seed}
	s, closeStore, err := newSim(ctx, cfg)
	if err != nil {
		res.Err = err
		return res
	}
	defer closeStore()
	defer func() {
		for _, c := range s.closers {
			c()
		}
	}()
	if err := s.cast(); err != nil {
		res.Err = err
		return res
	}
	err = s.run()
	if err == nil {
		s.check(ctx)
	}
	res.Steps, res.Violations, res.Trace, res.Err, res.Kinds = s.steps, s.w.violations, s.trace, err, s.w.kinds
	if err != nil {
		s.abandon()
	}
	return res
}

// abandon lets every parked actor die so that no goroutine outlives a run
// that ended early.
func (s *Sim) abandon() {
	for _, a := range s.actors {
		if !a.done {
			a.resume <- true
			<-a.parked
		}
	}
}

func newSim(ctx context.Context, cfg Config) (*Sim, func(), error) {
	inner, closeStore, err := cfg.NewStore()
	if err != nil {
		return nil, nil, err
	}
	start := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	s := &Sim{cfg: cfg, ctx: ctx, rng: newRand(cfg.Seed), start: start, now: start, inner: inner,
		w: world{tokens: map[string]tokenNote{}, latePosted: map[string]bool{}, collected: map[string]time.Time{}, approvalReopens: map[string]*approvalMove{}, represent: map[string]string{}, kinds: map[string]int{}}}
	s.store = &store{s: s, inner: inner}
	s.ledger = corebanksim.NewLedger(corebanksim.Faults{})
	s.ledger.SetClock(func() time.Time { return s.now })
	s.bank = &bank{s: s, ledger: s.ledger}
	s.waitCap = consumer.MaxVisibility
	s.fp, err = idempotency.NewFingerprinter([]byte("protosim fingerprint key, 32 bytes or more"))
	if err != nil {
		closeStore()
		return nil, nil, err
	}
	tok := func() (string, error) { return fmt.Sprintf("t%016x", s.rng.Uint64()), nil }
	s.guard, err = idempotency.NewGuard(s.store, idempotency.Options{Lease: lease, Retention: retention, SkewMargin: skew, Clock: clock{s}, NewToken: tok})
	if err != nil {
		closeStore()
		return nil, nil, err
	}
	// The accounts: most pay; some are short of funds for a while (a
	// decline the schedule retries), some are closed (a hard decline).
	n := 2 + s.rng.IntN(4)
	declines := map[string]string{}
	for i := range n {
		c := charge.Charge{ID: fmt.Sprintf("CHG-%d", i+1), AccountID: fmt.Sprintf("ACC%04d", 1000+i),
			Amount: charge.Money{Minor: int64(1000 + 500*s.rng.IntN(4)), Currency: "INR"}, Type: "SMS_ALERT_FEE", DueDate: start.Truncate(24 * time.Hour)}
		switch r := s.rng.Float64(); {
		case r < 0.45:
			declines[c.AccountID] = fmt.Sprintf("INSUFFICIENT_FUNDS*%d", 1+s.rng.IntN(3))
		case r < 0.55:
			declines[c.AccountID] = "ACCOUNT_CLOSED"
		}
		s.charges = append(s.charges, c)
	}
	s.ledger.SetFaults(corebanksim.Faults{DeclineAccounts: declines})
	delay := time.Duration(2+s.rng.IntN(46)) * time.Hour
	rules, err := charge.ParseRetryRules(fmt.Sprintf("INSUFFICIENT_FUNDS=%s×%d", delay, 1+s.rng.IntN(2)))
	if err != nil {
		closeStore()
		return nil, nil, err
	}
	var lead time.Duration
	if s.rng.IntN(4) == 0 {
		lead = time.Duration(1+s.rng.IntN(24)) * time.Hour // notice-first
	}
	policy := &charge.RetryPolicy{Rules: rules, Jitter: charge.NoJitter}
	s.svc, err = charge.NewService(charge.Options{Guard: s.guard, Debiter: s.bank, Notifier: notifier{s}, Fingerprints: s.fp,
		Retry: policy, FinishAttempts: 2, Logger: discard, NoticeLead: lead})
	if err != nil {
		closeStore()
		return nil, nil, err
	}
	// The queue: serve's consumer or the Lambda, a retention and a redrive
	// policy as a deployment sets them; the consumer's start refuses a
	// recovery policy whose waits the queue cannot keep, and the operator
	// then raises the retention (SQS's most, 14 days).
	s.lambda = s.rng.IntN(2) == 0
	keep := []time.Duration{2 * 24 * time.Hour, 4 * 24 * time.Hour, 14 * 24 * time.Hour}[s.rng.IntN(3)]
	const maxReceives = 10
	var waits []time.Duration // as the consumers' starts count them: the notice's lead, then the retries
	if lead > 0 {
		waits = append(waits, lead)
	}
	waits = append(waits, policy.LongestWaits()...)
	s.keepsAge = s.lambda && cfg.Plant == PlantLambdaKeepsAge
	if err := queue.CheckWaitWithinQueue(waits, keep, maxReceives, queue.MaxVisibility, !s.keepsAge); err != nil {
		s.tracef("setup: the consumer refuses to start (%v); the queue's retention is raised to 14 days", err)
		keep = 14 * 24 * time.Hour
	}
	dlq := memqueue.New(memqueue.Options{Now: s.clock, WaitTime: time.Nanosecond})
	s.q = memqueue.New(memqueue.Options{Now: s.clock, WaitTime: time.Nanosecond, VisibilityTimeout: visibility, MaxReceiveCount: maxReceives, DLQ: dlq,
		Retention: keep})
	consumerName := "serve"
	if s.lambda {
		consumerName = "the Lambda"
	}
	s.tracef("setup: %d charges, retry %s, notice lead %s, accounts %s; %s on a queue keeping messages %s", n, rules[0], lead, declineText(declines), consumerName, keep)
	return s, closeStore, nil
}

func (s *Sim) clock() time.Time { return s.now }

// cast starts the actors: the producer, two deliverers, the bank's late
// bookings, and the operators the seed draws.
func (s *Sim) cast() error {
	s.spawn("producer", kindProducer, s.producer)
	deliverers := 0
	newDeliverer := func() {
		deliverers++
		s.spawn(fmt.Sprintf("deliverer-%d", deliverers), kindDeliverer, s.deliverer)
	}
	newDeliverer()
	newDeliverer()
	s.spawn("bank", kindBank, s.lateBookings)
	s.spawn("weather", kindBank, s.outages)
	var ops []*opScript
	for i := range 1 + s.rng.IntN(2) {
		ops = append(ops, s.resolverScript(fmt.Sprintf("resolver-%d", i+1)))
	}
	if s.rng.IntN(2) == 0 {
		ops = append(ops, s.reopenerScript("reopener"))
	}
	if s.cfg.Dir != "" && s.rng.IntN(3) == 0 {
		dir := filepath.Join(s.cfg.Dir, fmt.Sprintf("run-%d", s.cfg.Seed))
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return err
		}
		s.closers = append(s.closers, func() { os.RemoveAll(dir) })
		o, err := s.approvalsScript(dir)
		if err != nil {
			return err
		}
		ops = append(ops, o)
	}
	for _, o := range ops {
		s.spawnOperator(o)
	}
	s.respawn = func(a *actor) {
		if a.kind == kindDeliverer {
			newDeliverer()
			return
		}
		for _, o := range ops {
			if o.actor == a {
				o.lives++
				s.spawnOperator(o)
			}
		}
	}
	return nil
}

// producer sends every charge's event once, and some twice (a duplicate
// delivery from upstream), spread over the first hour.
func (s *Sim) producer(ctx context.Context, a *actor) {
	type send struct {
		at time.Time
		c  charge.Charge
	}
	var sends []send
	for _, c := range s.charges {
		sends = append(sends, send{s.now.Add(time.Duration(s.rng.IntN(3600)) * time.Second), c})
		if s.rng.Float64() < 0.3 {
			sends = append(sends, send{s.now.Add(time.Duration(s.rng.IntN(7200)) * time.Second), c})
		}
	}
	slices.SortStableFunc(sends, func(x, y send) int { return x.at.Compare(y.at) })
	for _, sd := range sends {
		if err := s.sleep(ctx, sd.at); err != nil {
			return
		}
		body, err := charge.MarshalEvent(sd.c)
		if err != nil {
			panic(err)
		}
		if _, err := s.gate(ctx, "queue.Send "+sd.c.ID); err != nil {
			return
		}
		if _, err := s.q.Send(ctx, body, nil); err != nil {
			panic(err)
		}
		s.nudge()
		s.tracef("producer: sent %s", sd.c.ID)
	}
}

// deliverer is one consumer process: receive, charge.Service, then the
// queue action the handler's table gives (chargehandler.Decide), waits as
// the consumer runtime applies them.
func (s *Sim) deliverer(ctx context.Context, a *actor) {
	var err error
	for {
		if s.final && s.q.Len() == 0 {
			return
		}
		if _, err := s.gate(ctx, "queue.Receive"); err != nil {
			return
		}
		if s.now.Before(s.pausedUntil) && !s.final {
			if err := s.sleep(ctx, s.pausedUntil); err != nil {
				return
			}
			continue
		}
		var msgs []queue.Message
		next, ok := s.q.NextVisible()
		if ok && !next.After(s.now) {
			if msgs, err = s.q.Receive(ctx, 1); err != nil {
				panic(err)
			}
		}
		if len(msgs) == 0 {
			if !ok || !next.After(s.now) {
				// Nothing held: asleep until a send or a redrive wakes it
				// (nudge), or a day.
				next = s.now.Add(24 * time.Hour)
			}
			if err := s.sleep(ctx, next); err != nil {
				return
			}
			continue
		}
		m := msgs[0]
		if nb, ok := m.Attributes[queue.NotBeforeAttribute]; ok {
			if t, err := time.Parse(time.RFC3339Nano, nb); err == nil && t.After(s.now) {
				s.wait(ctx, m, t)
				continue
			}
		}
		c, err := charge.ParseEvent(m.Body)
		var res charge.Result
		if err != nil {
			res = charge.Result{Outcome: charge.Invalid, Reason: err.Error()}
		} else {
			res = s.svc.ProcessDelivery(ctx, c, charge.Delivery{})
		}
		dec := chargehandler.Decide(res, time.Second)
		s.tracef("%s: %s (receive %d) → %s %s", a.name, c.ID, m.ReceiveCount, res.Outcome, dec.Action)
		s.settle(ctx, m, dec)
	}
}

func (s *Sim) settle(ctx context.Context, m queue.Message, dec consumer.Decision) {
	if _, err := s.gate(ctx, "queue."+dec.Action.String()); err != nil {
		return
	}
	switch dec.Action {
	case consumer.Ack:
		_ = s.q.Ack(ctx, []queue.Message{m})
	case consumer.DeadLetter:
		_ = s.q.DeadLetter(ctx, m, dec.Reason)
	case consumer.Wait:
		s.wait(ctx, m, dec.Until)
	case consumer.Retry:
		if s.cfg.Plant == PlantAckOnRetry {
			_ = s.q.Ack(ctx, []queue.Message{m})
			return
		}
		fallthrough
	default:
		d := dec.RetryAfter
		if d <= 0 {
			d = time.Duration(m.ReceiveCount) * 10 * time.Second
		}
		_ = s.q.ChangeVisibility(ctx, m, d)
	}
}

// wait is the consumer runtime's (consumer.Runtime.wait), and the
// Lambda's (lambdasqs: StartsOver, WaitVisibility): on a first receive
// the message is made invisible until due, at most the 12 hours of SQS;
// received before, a copy carrying the not-before is sent and the
// original deleted (the copy starts a new age and receive count) — but
// for PlantLambdaKeepsAge, the Lambda before issue 50, which only hid it.
func (s *Sim) wait(ctx context.Context, m queue.Message, until time.Time) {
	startsOver := m.ReceiveCount > 1 // consumer.Runtime.wait
	if s.lambda {
		s.waitCap = lambdasqs.WaitVisibility(s.now.Add(queue.MaxVisibility), s.now, s.now)
		startsOver = lambdasqs.StartsOver(m.ReceiveCount) && !s.keepsAge
	}
	if s.lambda {
		s.saw("wait on the Lambda")
	}
	if startsOver {
		s.saw("wait started over (a copy sent)")
		attrs := queue.OriginalAttributes(m.Attributes)
		if attrs == nil {
			attrs = map[string]string{}
		}
		attrs[queue.NotBeforeAttribute] = until.UTC().Format(time.RFC3339Nano)
		if _, err := s.q.Send(ctx, m.Body, attrs); err == nil {
			if _, err := s.gate(ctx, "queue.Ack (requeued)"); err != nil {
				return
			}
			_ = s.q.Ack(ctx, []queue.Message{m})
			return
		}
	}
	_ = s.q.ChangeVisibility(ctx, m, max(min(until.Sub(s.now), s.waitCap), 0))
}

// lateBookings is the bank booking, some time later, a debit it had
// declined: the statement then shows the declined generation posted.
func (s *Sim) lateBookings(ctx context.Context, a *actor) {
	for range 3 {
		if err := s.sleep(ctx, s.now.Add(time.Duration(1+s.rng.IntN(36))*time.Hour)); err != nil {
			return
		}
		var declined []string
		booked := map[string]bool{}
		for key := range s.w.latePosted {
			id, _ := splitKey(key)
			booked[id] = true
		}
		for _, r := range s.w.requests {
			// One declined generation of a charge booked late, at most:
			// two would be the bank posting twice, a break of its own.
			if r.declined != "" && !booked[r.chargeID] && !slices.Contains(declined, r.key) {
				declined = append(declined, r.key)
			}
		}
		if len(declined) == 0 || s.rng.Float64() < 0.3 {
			continue
		}
		key := declined[s.rng.IntN(len(declined))]
		if _, err := s.ledger.PostDeclined(key); err == nil {
			s.saw("a declined debit booked late")
			s.w.latePosted[key] = true
			s.tracef("bank: books %s, which it had declined", key)
		}
	}
}

var discard = slog.New(slog.DiscardHandler)

func declineText(m map[string]string) string {
	var out []string
	for acc, rule := range m {
		out = append(out, acc+"="+rule)
	}
	sort.Strings(out)
	if len(out) == 0 {
		return "none declines"
	}
	return strings.Join(out, ", ")
}

// outages take the store away for a while (every call fails until it is
// back), or pause the consumers (a posting window closed, the bank's
// circuit open: nothing is received, messages age): a few times a run.
func (s *Sim) outages(ctx context.Context, a *actor) {
	for range s.rng.IntN(4) {
		if err := s.sleep(ctx, s.now.Add(time.Duration(s.rng.IntN(48*60))*time.Minute)); err != nil {
			return
		}
		if s.rng.IntN(2) == 0 {
			s.saw("store outage")
			s.storeAwayUntil = s.now.Add(time.Duration(10+s.rng.IntN(900)) * time.Second)
			s.tracef("weather: the store is away until %s", s.storeAwayUntil.Sub(s.start))
			continue
		}
		s.saw("consumers paused")
		s.pausedUntil = s.now.Add(time.Duration(2+s.rng.IntN(19)) * time.Hour)
		s.tracef("weather: no consumer receives until %s", s.pausedUntil.Sub(s.start))
	}
}

// nudge wakes the idle deliverers: a message was sent or redriven (a
// consumer long-polling the queue sees it at once).
func (s *Sim) nudge() {
	for _, a := range s.actors {
		if a.kind == kindDeliverer && a.idle && a.wake.After(s.now) {
			a.wake = s.now
		}
	}
}
