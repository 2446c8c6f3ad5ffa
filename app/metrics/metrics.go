// Package metrics exposes the consumer's Prometheus metrics. It instruments
// the pipeline from the outside, by wrapping the ports (driver.Store,
// charge.Debiter, charge.Notifier, consumer.Source) and by the runtime's
// decision hook, so the domain and the runtime stay free of it.
package metrics

import (
	"cmp"
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/circuit"
	"github.com/finedge/idempotent-consumer/consumer"
	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
	"github.com/finedge/idempotent-consumer/queue"
)

const ns = "chargerecovery"

// Metrics holds the collectors on a registry of their own.
type Metrics struct {
	reg             *prometheus.Registry
	received        prometheus.Counter
	queueCalls      *prometheus.CounterVec
	claims          *prometheus.CounterVec
	debits          *prometheus.CounterVec
	enquiries       *prometheus.CounterVec
	purged          prometheus.Counter
	expired         *prometheus.CounterVec
	notifications   *prometheus.CounterVec
	deadLetters     *prometheus.CounterVec
	decisions       *prometheus.CounterVec
	leaseLost       prometheus.Counter
	leaseExtensions prometheus.Counter
	processing      prometheus.Histogram
	storeLatency    *prometheus.HistogramVec
	debitLatency    *prometheus.HistogramVec
	waits           *prometheus.CounterVec
	advanceNotices  *prometheus.CounterVec
}

// New registers every metric (plus Go and process collectors).
func New() *Metrics {
	reg := prometheus.NewRegistry()
	f := func(c prometheus.Collector) { reg.MustRegister(c) }
	m := &Metrics{
		reg: reg,
		received: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "messages_received_total",
			Help: "Messages received from the queue."}),
		queueCalls: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "queue_calls_total",
			Help: "Calls to the queue by operation."}, []string{"op"}),
		claims: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "claim_outcomes_total",
			Help: "Claim results: acquired, reclaimed, duplicate_done, duplicate_in_progress, duplicate_failed, conflict."}, []string{"outcome"}),
		debits: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "debits_total",
			Help: "Core-banking debit calls by result: success, declined (final), transient (not final: outage, timeout, 409, lost answer), rejected (not final: 400/401/403/404..., our requests are wrong or unauthorised; alert)."}, []string{"result"}),
		purged: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "records_purged_total",
			Help: "Idempotency records deleted past retention by the sweeper (stores without TTL)."}),
		expired: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "messages_expired_total",
			Help: "Queue messages deleted past retention by the sweeper (embedded queue), by queue: main, dlq."}, []string{"queue"}),
		enquiries: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "enquiries_total",
			Help: "Status enquiries before re-posting a reclaimed charge, by answer: posted, in_progress, not_found, declined, failed."}, []string{"answer"}),
		notifications: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "notifications_total",
			Help: "Pre-debit notifications by channel (sns, webhook, log, sim) and result: sent, failed."}, []string{"channel", "result"}),
		deadLetters: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "dlq_forwards_total",
			Help: "Messages forwarded to the dead-letter queue, by reason (invalid, conflict, debit_failed, duplicate_failed, ...)."}, []string{"reason"}),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "decisions_total",
			Help: "What was done with each handled message: ack, retry, dead_letter."}, []string{"action"}),
		leaseLost: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "lease_lost_total",
			Help: "Writes refused because the claim was taken over (fencing)."}),
		leaseExtensions: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "lease_extensions_total",
			Help: "Heartbeat lease extensions that succeeded."}),
		processing: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Name: "processing_seconds",
			Help:    "Time to handle one message (parse, claim, debit, notify, record).",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}}),
		storeLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Name: "store_seconds",
			Help:    "Idempotency store call latency by operation.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, 1}}, []string{"op"}),
		debitLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Name: "debit_seconds",
			Help:    "Core-banking debit call latency by result (as debits_total).",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}}, []string{"result"}),
		waits: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "waits_total",
			Help: "Deliveries that left their charge waiting, by reason: retry_scheduled (a decline the retry schedule retries), notice_lead (the advance notice went out; the debit waits for its lead), waiting (another wait)."}, []string{"reason"}),
		advanceNotices: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "advance_notices_total",
			Help: "Advance (pre-debit) notices of notice-first mode by channel and result (sent, failed: no debit until it is sent)."}, []string{"channel", "result"}),
	}
	for _, c := range []prometheus.Collector{m.received, m.queueCalls, m.claims, m.debits, m.enquiries, m.purged, m.expired, m.notifications,
		m.deadLetters, m.decisions, m.leaseLost, m.leaseExtensions, m.processing, m.storeLatency, m.debitLatency, m.waits, m.advanceNotices} {
		f(c)
	}
	f(collectors.NewGoCollector())
	f(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	// Pre-create the label values an operator alerts on, so they read 0
	// rather than being absent.
	for _, o := range []string{"acquired", "reclaimed", "duplicate_done", "duplicate_in_progress", "duplicate_failed", "conflict"} {
		m.claims.WithLabelValues(o)
	}
	for _, r := range []string{"success", "declined", "transient", "rejected"} {
		m.debits.WithLabelValues(r)
	}
	m.expired.WithLabelValues("main")
	m.expired.WithLabelValues("dlq")
	// Every series an alert reads exists from the start: a consumer that
	// has handled nothing since it started reads 0, and rate() over it is
	// defined (an absent series makes "handled none while messages wait"
	// impossible to say).
	for _, a := range []consumer.Action{consumer.Ack, consumer.Retry, consumer.DeadLetter, consumer.Wait} {
		m.decisions.WithLabelValues(a.String())
	}
	for _, r := range waitLabels {
		m.waits.WithLabelValues(r)
	}
	for _, r := range reasonLabels {
		m.deadLetters.WithLabelValues(r)
	}
	for _, a := range []string{"posted", "in_progress", "not_found", "declined", "failed"} {
		m.enquiries.WithLabelValues(a)
	}
	for _, op := range []string{"receive", "ack", "change_visibility", "dead_letter", "send"} {
		m.queueCalls.WithLabelValues(op)
	}
	return m
}

// reasonLabels are the bounded values of the dead-letter reason label.
var reasonLabels = []string{"invalid", "conflict", "debit_failed", "duplicate_failed", "other"}

// Handler serves the registry in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

// RuntimeGauges registers the runtime's in-flight gauge and heartbeat count.
func (m *Metrics) RuntimeGauges(rt *consumer.Runtime) {
	m.reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: ns, Name: "in_flight",
			Help: "Messages being handled now."}, func() float64 { return float64(rt.Stats().InFlight) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: ns, Name: "heartbeats_total",
			Help: "Heartbeats (visibility extension plus registered beats) of in-flight messages."}, func() float64 { return float64(rt.Stats().Heartbeats) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: ns, Name: "parked",
			Help: "Messages kept in hand while the bank or the store is down, handled again without a new receive."}, func() float64 { return float64(rt.Stats().InHand) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: ns, Name: "parked_total",
			Help: "Retries kept in hand (parked) while a circuit was not closed."}, func() float64 { return float64(rt.Stats().Parked) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: ns, Name: "requeued_total",
			Help: "Waiting messages put back on the queue as a copy with a not-before (the original deleted), so that waiting never moves them toward the DLQ."},
			func() float64 { return float64(rt.Stats().Requeued) }),
	)
}

// Swept counts what one retention sweep deleted.
func (m *Metrics) Swept(records, messages, dlqMessages int) {
	m.purged.Add(float64(records))
	m.expired.WithLabelValues("main").Add(float64(messages))
	m.expired.WithLabelValues("dlq").Add(float64(dlqMessages))
}

// StoreCircuit exports the idempotency store's circuit (receiving pauses
// while it is open).
func (m *Metrics) StoreCircuit(status func() circuit.Status) {
	m.circuit("store_circuit", "Idempotency store circuit", "store calls that could not reach the idempotency store", status)
}

// Circuit registers the core-banking circuit breaker's gauges.
func (m *Metrics) Circuit(status func() circuit.Status) {
	m.circuit("circuit", "Core-banking circuit breaker", "failed core-banking calls", status)
}

// circuit registers NAME_state and NAME_consecutive_failures.
func (m *Metrics) circuit(name, what, failures string, status func() circuit.Status) {
	m.reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: ns, Name: name + "_state",
			Help: what + ": 0 closed, 1 half-open (one trial call), 2 open (not receiving)."},
			func() float64 { return float64(status().State) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: ns, Name: name + "_consecutive_failures",
			Help: "Consecutive " + failures + " (the circuit opens at the threshold)."},
			func() float64 { return float64(status().Failures) }),
	)
}

// OnDecision is the runtime hook (consumer.Options.OnDecision).
func (m *Metrics) OnDecision(_ queue.Message, d consumer.Decision, took time.Duration) {
	if d.Action != consumer.Wait || d.Reason.Code != consumer.CodeNotBefore {
		// Not a message the runtime kept waiting without the handler.
		m.processing.Observe(took.Seconds())
	}
	m.decisions.WithLabelValues(d.Action.String()).Inc()
	switch d.Action {
	case consumer.DeadLetter:
		m.deadLetters.WithLabelValues(ReasonLabel(d.Reason.Code)).Inc()
	case consumer.Wait:
		label := "waiting"
		if c := string(d.Reason.Code); slices.Contains(waitLabels, c) {
			label = c
		}
		m.waits.WithLabelValues(label).Inc()
	}
}

// waitLabels are the bounded values of the wait reason label (the charge
// handler's wait codes).
var waitLabels = []string{"retry_scheduled", "notice_lead", "waiting"}

// ReasonLabel is the bounded label of a dead-letter reason code: the
// codes the charge handler dead-letters with, else "other".
func ReasonLabel(code queue.Code) string {
	if s := string(code); s != "other" && slices.Contains(reasonLabels, s) {
		return s
	}
	return "other"
}

// Store wraps s to count claim outcomes, lease losses, extensions and
// latency.
func (m *Metrics) Store(s driver.Store) driver.Store { return &store{Store: s, m: m} }

type store struct {
	driver.Store
	m *Metrics
}

// countClaim counts a claim taken by its outcome.
func (m *Metrics) countClaim(req driver.ClaimRequest, res driver.ClaimResult) {
	m.claims.WithLabelValues(idempotency.ClaimOf(req, res).Outcome.String()).Inc()
}

// countLost counts a lease lost (err is ErrLeaseLost).
func (m *Metrics) countLost(err error) {
	if errors.Is(err, idempotency.ErrLeaseLost) {
		m.leaseLost.Inc()
	}
}

func (s *store) observe(op string, start time.Time) {
	s.m.storeLatency.WithLabelValues(op).Observe(time.Since(start).Seconds())
}

func (s *store) Claim(ctx context.Context, req driver.ClaimRequest) (driver.ClaimResult, error) {
	defer s.observe("claim", time.Now())
	res, err := s.Store.Claim(ctx, req)
	if err == nil {
		s.m.countClaim(req, res)
	}
	return res, err
}

func (s *store) Finish(ctx context.Context, f driver.FinishRequest) error {
	defer s.observe("finish", time.Now())
	err := s.Store.Finish(ctx, f)
	s.m.countLost(err)
	return err
}

func (s *store) Extend(ctx context.Context, req driver.ExtendRequest) error {
	defer s.observe("extend", time.Now())
	err := s.Store.Extend(ctx, req)
	if err == nil {
		s.m.leaseExtensions.Inc()
	}
	s.m.countLost(err)
	return err
}

// Bound wraps a claim made in a queue's receive (driver.Bound) to count it
// as Store does its claims and finishes: the claim's outcome when it is
// taken, lost leases, and the latency of the write of the result with the
// message's delete (op "finish_settle").
func (m *Metrics) Bound(b driver.Bound) driver.Bound { return &bound{Bound: b, m: m} }

type bound struct {
	driver.Bound
	m *Metrics
}

func (b *bound) Claimed() (driver.ClaimRequest, driver.ClaimResult, bool) {
	req, res, ok := b.Bound.Claimed()
	if ok {
		b.m.countClaim(req, res)
	}
	return req, res, ok
}

func (b *bound) Finish(ctx context.Context, f driver.FinishRequest) error {
	start := time.Now()
	err := b.Bound.Finish(ctx, f)
	b.m.storeLatency.WithLabelValues("finish_settle").Observe(time.Since(start).Seconds())
	b.m.countLost(err)
	return err
}

// Debiter wraps d to count debits by result.
func (m *Metrics) Debiter(d charge.Debiter) charge.Debiter { return &debiter{Debiter: d, m: m} }

type debiter struct {
	charge.Debiter
	m *Metrics
}

func (d *debiter) Debit(ctx context.Context, req charge.DebitRequest) (charge.DebitReceipt, error) {
	start := time.Now()
	r, err := d.Debiter.Debit(ctx, req)
	took := time.Since(start)
	result := "success"
	switch {
	case err == nil:
	case charge.Classify(err) == charge.ClassPermanent:
		result = "declined"
	case charge.IsRejected(err):
		result = "rejected" // the bank refused our requests as wrong or unauthorised: alert
	default:
		result = "transient"
	}
	d.m.debits.WithLabelValues(result).Inc()
	d.m.debitLatency.WithLabelValues(result).Observe(took.Seconds())
	return r, err
}

// Enquirer wraps e to count status enquiries by answer.
func (m *Metrics) Enquirer(e charge.Enquirer) charge.Enquirer { return &enquirer{Enquirer: e, m: m} }

type enquirer struct {
	charge.Enquirer
	m *Metrics
}

func (e *enquirer) Enquire(ctx context.Context, key string) (charge.Enquiry, error) {
	r, err := e.Enquirer.Enquire(ctx, key)
	answer := "failed"
	if err == nil {
		answer = strings.ToLower(r.State.String())
	}
	e.m.enquiries.WithLabelValues(answer).Inc()
	return r, err
}

// Notifier wraps n to count notifications by result.
func (m *Metrics) Notifier(n charge.Notifier, channel string) charge.Notifier {
	if channel == "" {
		channel = "unknown"
	}
	// Both series exist from the start, so that a rate over them is defined
	// before the first failure.
	m.notifications.WithLabelValues(channel, "sent")
	m.notifications.WithLabelValues(channel, "failed")
	return &notifier{Notifier: n, m: m, channel: channel}
}

type notifier struct {
	charge.Notifier
	m       *Metrics
	channel string
}

func (n *notifier) NotifyPreDebit(ctx context.Context, c charge.Charge, r charge.DebitReceipt) error {
	err := n.Notifier.NotifyPreDebit(ctx, c, r)
	if err != nil {
		n.m.notifications.WithLabelValues(n.channel, "failed").Inc()
	} else {
		n.m.notifications.WithLabelValues(n.channel, "sent").Inc()
	}
	return err
}

// PostingWindow registers the posting calendar's gauges, read on every
// scrape: whether the window is open now, and when it next closes (open)
// or opens (closed).
func (m *Metrics) PostingWindow(status func() (open bool, until time.Time)) {
	m.reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: ns, Name: "posting_window_open",
			Help: "1 while the posting window is open (debits are posted), 0 outside it (nothing is received)."}, func() float64 {
			if open, _ := status(); open {
				return 1
			}
			return 0
		}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: ns, Name: "posting_window_change_timestamp_seconds",
			Help: "When the posting window next closes (open) or opens (closed), Unix time; 0 when not within 400 days."}, func() float64 {
			_, until := status()
			if until.IsZero() {
				return 0
			}
			return float64(until.UnixMilli()) / 1000
		}))
}

// AdvanceNotifier wraps n to count advance notices by channel and result.
func (m *Metrics) AdvanceNotifier(n charge.AdvanceNotifier, channel string) charge.AdvanceNotifier {
	channel = cmp.Or(channel, "unknown")
	m.advanceNotices.WithLabelValues(channel, "sent")
	m.advanceNotices.WithLabelValues(channel, "failed")
	return advanceNotifier{n: n, m: m, channel: channel}
}

type advanceNotifier struct {
	n       charge.AdvanceNotifier
	m       *Metrics
	channel string
}

func (a advanceNotifier) NotifyAdvance(ctx context.Context, n charge.AdvanceNotice) error {
	err := a.n.NotifyAdvance(ctx, n)
	result := "sent"
	if err != nil {
		result = "failed"
	}
	a.m.advanceNotices.WithLabelValues(a.channel, result).Inc()
	return err
}

// Source wraps s to count received messages and queue calls.
func (m *Metrics) Source(s consumer.Source) consumer.Source { return &source{Source: s, m: m} }

type source struct {
	consumer.Source
	m *Metrics
}

func (s *source) Receive(ctx context.Context, max int) ([]queue.Message, error) {
	s.m.queueCalls.WithLabelValues("receive").Inc()
	msgs, err := s.Source.Receive(ctx, max)
	s.m.received.Add(float64(len(msgs)))
	return msgs, err
}

func (s *source) Ack(ctx context.Context, msgs []queue.Message) error {
	s.m.queueCalls.WithLabelValues("ack").Inc()
	return s.Source.Ack(ctx, msgs)
}

func (s *source) ChangeVisibility(ctx context.Context, msg queue.Message, d time.Duration) error {
	s.m.queueCalls.WithLabelValues("change_visibility").Inc()
	return s.Source.ChangeVisibility(ctx, msg, d)
}

func (s *source) DeadLetter(ctx context.Context, msg queue.Message, reason queue.Reason) error {
	s.m.queueCalls.WithLabelValues("dead_letter").Inc()
	return s.Source.DeadLetter(ctx, msg, reason)
}

// Send forwards consumer.Sender (the runtime's requeue of a waiting
// message), counted when the wrapped source can send.
func (s *source) Send(ctx context.Context, body []byte, attrs map[string]string) (string, error) {
	if _, ok := s.Source.(consumer.Sender); ok {
		s.m.queueCalls.WithLabelValues("send").Inc()
	}
	return consumer.Send(ctx, s.Source, body, attrs)
}

// Counts is a snapshot of the call counters, by label value.
type Counts struct {
	Received      int64
	ClaimOutcomes map[string]int64 // acquired, reclaimed, duplicate_done, ...
	StoreCalls    map[string]int64 // claim, finish, extend, reopen
	QueueCalls    map[string]int64 // receive, ack, change_visibility, dead_letter, send
}

// Counts reads the counters (the bench reports them).
func (m *Metrics) Counts() (Counts, error) {
	fams, err := m.reg.Gather()
	if err != nil {
		return Counts{}, err
	}
	c := Counts{ClaimOutcomes: map[string]int64{}, StoreCalls: map[string]int64{}, QueueCalls: map[string]int64{}}
	for _, f := range fams {
		for _, mt := range f.GetMetric() {
			label := ""
			if l := mt.GetLabel(); len(l) > 0 {
				label = l[0].GetValue()
			}
			switch f.GetName() {
			case ns + "_messages_received_total":
				c.Received = int64(mt.GetCounter().GetValue())
			case ns + "_claim_outcomes_total":
				c.ClaimOutcomes[label] = int64(mt.GetCounter().GetValue())
			case ns + "_store_seconds":
				c.StoreCalls[label] = int64(mt.GetHistogram().GetSampleCount())
			case ns + "_queue_calls_total":
				c.QueueCalls[label] = int64(mt.GetCounter().GetValue())
			}
		}
	}
	return c, nil
}

// QueueDepth registers the queue depth gauges and samples depth every
// interval until ctx ends (never on a scrape: a scrape reads the last
// sample). The age gauge is left out where the queue cannot tell the
// oldest message's age (SQS: CloudWatch's ApproximateAgeOfOldestMessage).
func (m *Metrics) QueueDepth(ctx context.Context, interval time.Duration, depth func(context.Context) (queue.Depth, error), onError func(error)) {
	messages := prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: "queue_messages",
		Help: "Messages on the queue by state (waiting, in_flight) and on the DLQ (dlq), sampled in the background."}, []string{"state"})
	age := prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Name: "queue_oldest_message_age_seconds",
		Help: "Age of the oldest message on the queue (waiting or in flight; not one a SQL queue holds for its charge's wait), sampled; absent on SQS (see CloudWatch ApproximateAgeOfOldestMessage)."})
	sampled := prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Name: "queue_depth_sampled_timestamp_seconds",
		Help: "When the queue depth was last sampled successfully (Unix time)."})
	errs := prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "queue_depth_errors_total",
		Help: "Queue depth samples that failed."})
	m.reg.MustRegister(messages, sampled, errs)
	ageRegistered := false
	every(ctx, interval, func(ctx context.Context) error {
		d, err := depth(ctx)
		if err != nil {
			errs.Inc()
			return err
		}
		messages.WithLabelValues("waiting").Set(float64(d.Waiting))
		messages.WithLabelValues("in_flight").Set(float64(d.InFlight))
		messages.WithLabelValues("dlq").Set(float64(d.DLQ))
		if d.OldestKnown {
			if !ageRegistered {
				m.reg.MustRegister(age)
				ageRegistered = true
			}
			age.Set(d.OldestAge.Seconds())
		}
		sampled.Set(float64(time.Now().UnixMilli()) / 1000)
		return nil
	}, onError)
}

// StuckClaims registers the stuck-claims gauge and samples it every
// interval until ctx ends. Wire it only where the store counts cheaply
// (an index, not a scan).
func (m *Metrics) StuckClaims(ctx context.Context, interval time.Duration, count func(context.Context) (int, error), onError func(error)) {
	stuck := prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Name: "stuck_claims",
		Help: "Claims IN_PROGRESS past their lease (their worker died and no redelivery reclaimed them yet), sampled."})
	m.reg.MustRegister(stuck)
	every(ctx, interval, func(ctx context.Context) error {
		n, err := count(ctx)
		if err == nil {
			stuck.Set(float64(n))
		}
		return err
	}, onError)
}

// every runs sample now and then every interval until ctx ends, each
// under a timeout of the interval (at least 1s).
func every(ctx context.Context, interval time.Duration, sample func(context.Context) error, onError func(error)) {
	run := func() {
		sctx, cancel := context.WithTimeout(ctx, max(interval, time.Second))
		err := sample(sctx)
		cancel()
		if err != nil && onError != nil && ctx.Err() == nil {
			onError(err)
		}
	}
	run()
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			run()
		}
	}
}
