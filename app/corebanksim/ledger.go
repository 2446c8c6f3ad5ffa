// Package corebanksim simulates the bank's core-banking debit API, for the
// demo, the bench and the tests: never wired into production. Ledger is the
// simulator's state: it honours an
// idempotency key the way a real core-banking API must (the same key and
// body replay the first result and post nothing; the same key with another
// body is refused), and injects latency and faults.
package corebanksim

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/app/reconcile/statement"
)

// ErrKeyReuse: an idempotency key was sent again with a different body
// (HTTP 422).
var ErrKeyReuse = errors.New("corebank: idempotency key reused with a different request")

// ErrUnknownKey: Reverse or Drop named a key with no posting (HTTP 404).
var ErrUnknownKey = errors.New("corebank: no posting under this idempotency key")

// ErrUnavailable is the simulator's injected transient failure (HTTP 503).
var ErrUnavailable = errors.New("corebank: service unavailable")

// ErrPending: the bank accepted the debit and will post it later (HTTP 202
// {"status":"PENDING"}); the status enquiry says IN_PROGRESS until then.
var ErrPending = errors.New("corebank: accepted, not yet posted")

// ErrInProgress: a request with the same key is still being processed
// (HTTP 409 REQUEST_IN_PROGRESS, as in the IETF Idempotency-Key draft).
var ErrInProgress = errors.New("corebank: a request with this idempotency key is still being processed")

// FaultError is an injected answer with a given HTTP status (an outage
// window's 401 or 503, a 502 after posting), or a connection reset.
type FaultError struct {
	Status int    // HTTP status to answer; 0 with Reset
	Code   string // the body's "error" field
	Reset  bool   // drop the connection instead of answering
	Posted bool   // the debit posted before the fault
}

func (e *FaultError) Error() string {
	if e.Reset {
		return "corebank: connection reset (injected)"
	}
	return fmt.Sprintf("corebank: HTTP %d %s (injected)", e.Status, e.Code)
}

// Entry is one posting in the ledger.
type Entry struct {
	Seq            int64     `json:"seq"`
	IdempotencyKey string    `json:"idempotencyKey"`
	AccountID      string    `json:"accountId"`
	AmountMinor    int64     `json:"amountMinor"`
	Currency       string    `json:"currency"`
	ChargeType     string    `json:"chargeType"`
	Narrative      string    `json:"narrative"`
	Reference      string    `json:"reference"`
	PostedAt       time.Time `json:"postedAt"`
	// ReversedAt is when the bank reversed the posting (Reverse): the
	// statement then carries a reversal booked at that time. The entry
	// stays a posting of Entries and PostingsByKey.
	ReversedAt *time.Time `json:"reversedAt,omitempty"`
	// Dropped: the bank lost the posting (Drop); the statement leaves it
	// out. It stays in Entries and PostingsByKey.
	Dropped bool `json:"dropped,omitempty"`
}

// Faults are injected into debits. The zero value injects nothing.
type Faults struct {
	// Latency is added to every debit (before it posts).
	Latency time.Duration
	// DeclineAccounts declines every debit of these accounts with the
	// given code (e.g. INSUFFICIENT_FUNDS, ACCOUNT_CLOSED): permanent. A
	// code ending in *N (INSUFFICIENT_FUNDS*2) declines only the account's
	// first N debits (each a new idempotency key: a retry under a new key
	// generation); after them the account is funded and debits post.
	DeclineAccounts map[string]string
	// TransientRate is the chance (0-1) that a debit fails with
	// ErrUnavailable before posting.
	TransientRate float64
	// TransientAfterPostRate is the chance (0-1) that a debit posts and then
	// answers ErrUnavailable anyway: the caller sees a failure although the
	// money moved (a lost response), the case idempotency keys exist for.
	TransientAfterPostRate float64
	// TimeoutRate is the chance (0-1) that a debit never answers: it waits
	// until the caller gives up (its context ends), posting nothing.
	TimeoutRate float64
	// FailFirst makes the first N calls for a key fail with ErrUnavailable.
	FailFirst map[string]int
	// InProgress409 answers 409 REQUEST_IN_PROGRESS to a request whose key
	// has an earlier request still being processed.
	InProgress409 bool
	// SlowRate is the chance (0-1) that a debit takes SlowLatency and goes
	// on after the caller gave up: it posts all the same.
	SlowRate    float64
	SlowLatency time.Duration
	// BadGatewayAfterPostRate is the chance (0-1) that a debit posts and the
	// answer is 502 (a gateway lost the bank's answer).
	BadGatewayAfterPostRate float64
	// ResetAfterPostRate is the chance (0-1) that a debit posts and the
	// connection is dropped without an answer.
	ResetAfterPostRate float64
	// OutageStatus and OutageUntil: until then every call, the status
	// enquiry and the health check answer OutageStatus (401: an expired
	// gateway token; 503: an end-of-day window), posting nothing.
	OutageStatus int
	OutageUntil  time.Time
	// OutageHealthy keeps the health check answering 200 through the outage
	// window: a gateway that is up while the bank behind it is not.
	OutageHealthy bool
	// PendingRate is the chance (0-1) that a debit is accepted and answered
	// 202 PENDING, and posts PendingLatency later (replays meanwhile answer
	// PENDING again; the status enquiry says IN_PROGRESS).
	PendingRate    float64
	PendingLatency time.Duration
}

// outage returns the injected outage answer now, or nil. Caller holds mu.
func (l *Ledger) outage() error {
	f := l.faults
	if f.OutageStatus == 0 || !l.now().Before(f.OutageUntil) {
		return nil
	}
	code := "UNAVAILABLE"
	switch f.OutageStatus {
	case 401:
		code = "UNAUTHORIZED"
	case 403:
		code = "FORBIDDEN"
	}
	return &FaultError{Status: f.OutageStatus, Code: code}
}

// Ledger is safe for concurrent use.
type Ledger struct {
	mu      sync.Mutex
	faults  Faults
	seq     int64
	byKey   map[string]*posting
	entries []Entry
	calls   map[string]int
	// confirmed keys got a success answer; dupRequests counts requests
	// that arrived for a key after that: a double debit at any bank that
	// did not honour the idempotency key.
	confirmed   map[string]bool
	dupRequests map[string]int
	// inflight counts requests per key being processed now.
	inflight map[string]int
	// declined counts the declines per account (for a code's *N).
	declined map[string]int
	rng      *rand.Rand
	now      func() time.Time
}

type posting struct {
	req     charge.DebitRequest
	entry   Entry
	err     error // a recorded decline replays too
	pending bool  // accepted, posts later
}

var _ charge.Debiter = (*Ledger)(nil)

// NewLedger returns an empty ledger with faults.
func NewLedger(f Faults) *Ledger {
	return &Ledger{
		faults: f, byKey: map[string]*posting{}, calls: map[string]int{},
		confirmed: map[string]bool{}, dupRequests: map[string]int{}, inflight: map[string]int{}, declined: map[string]int{},
		rng: rand.New(rand.NewPCG(1, 2)), now: time.Now,
	}
}

// SetFaults replaces the injected faults.
func (l *Ledger) SetFaults(f Faults) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.faults = f
}

// SetClock replaces the ledger's clock (default time.Now): the times its
// postings, reversals and outages are at. A simulation with a clock of its
// own sets it before the first debit.
func (l *Ledger) SetClock(now func() time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.now = now
}

// PostDeclined has the bank book, now, a debit it answered with a decline
// (the declined generation posted after all: the statement carries it,
// while a replay of the request still answers the decline). A key that was
// not declined, or is booked already, is an error.
func (l *Ledger) PostDeclined(key string) (Entry, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	p, ok := l.byKey[key]
	if !ok || p.err == nil {
		return Entry{}, fmt.Errorf("corebank: %q was not declined", key)
	}
	if p.entry.Seq != 0 {
		return Entry{}, fmt.Errorf("corebank: declined %q is booked already", key)
	}
	p.entry = l.post(p.req)
	return p.entry, nil
}

// Debit implements charge.Debiter against the simulated ledger.
func (l *Ledger) Debit(ctx context.Context, req charge.DebitRequest) (charge.DebitReceipt, error) {
	r, _, err := l.debit(ctx, req)
	return r, err
}

// debit also reports whether the answer replays an earlier posting.
func (l *Ledger) debit(ctx context.Context, req charge.DebitRequest) (_ charge.DebitReceipt, replayed bool, _ error) {
	if req.IdempotencyKey == "" {
		return charge.DebitReceipt{}, false, charge.Permanent(errors.New("corebank: missing idempotency key"))
	}
	l.mu.Lock()
	l.calls[req.IdempotencyKey]++
	call := l.calls[req.IdempotencyKey]
	f := l.faults
	if err := l.outage(); err != nil {
		l.mu.Unlock()
		return charge.DebitReceipt{}, false, err
	}
	if f.InProgress409 && l.inflight[req.IdempotencyKey] > 0 {
		l.mu.Unlock()
		return charge.DebitReceipt{}, false, ErrInProgress
	}
	l.inflight[req.IdempotencyKey]++
	failPre := call <= f.FailFirst[req.IdempotencyKey] || (f.TransientRate > 0 && l.rng.Float64() < f.TransientRate)
	failPost := f.TransientAfterPostRate > 0 && l.rng.Float64() < f.TransientAfterPostRate
	hang := f.TimeoutRate > 0 && l.rng.Float64() < f.TimeoutRate
	slow := f.SlowRate > 0 && l.rng.Float64() < f.SlowRate
	badGateway := f.BadGatewayAfterPostRate > 0 && l.rng.Float64() < f.BadGatewayAfterPostRate
	reset := f.ResetAfterPostRate > 0 && l.rng.Float64() < f.ResetAfterPostRate
	pending := f.PendingRate > 0 && l.rng.Float64() < f.PendingRate
	l.mu.Unlock()
	defer func() {
		l.mu.Lock()
		l.inflight[req.IdempotencyKey]--
		l.mu.Unlock()
	}()

	if hang {
		<-ctx.Done()
		return charge.DebitReceipt{}, false, ctx.Err()
	}
	latency := f.Latency
	if slow {
		// A slow post outlasts the caller and posts all the same: the bank
		// does not stop processing because a client hung up.
		ctx = context.WithoutCancel(ctx)
		latency = max(latency, f.SlowLatency)
	}
	if latency > 0 {
		t := time.NewTimer(latency)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return charge.DebitReceipt{}, false, ctx.Err()
		}
	}
	if failPre {
		return charge.DebitReceipt{}, false, ErrUnavailable
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if p, ok := l.byKey[req.IdempotencyKey]; ok {
		if p.req != req {
			// What a bank answers (422 IDEMPOTENCY_KEY_REUSED): a rejection of
			// our request, never a decline of the charge; nothing is final.
			return charge.DebitReceipt{}, false, &charge.BankError{Kind: charge.BankRejected, Status: 422, Code: "IDEMPOTENCY_KEY_REUSED", Err: ErrKeyReuse}
		}
		if p.err != nil {
			return charge.DebitReceipt{}, true, p.err
		}
		if p.pending {
			return charge.DebitReceipt{}, true, ErrPending
		}
		// A replay of a debit already confirmed to someone: a double debit
		// had the key not been honoured. (A replay after a lost response is
		// the retry the key exists for, and is not counted.)
		if l.confirmed[req.IdempotencyKey] {
			l.dupRequests[req.IdempotencyKey]++
		}
		l.confirmed[req.IdempotencyKey] = true
		return charge.DebitReceipt{Reference: p.entry.Reference}, true, nil
	}
	if code, ok := declineCode(f.DeclineAccounts[req.AccountID], l.declined[req.AccountID]); ok {
		l.declined[req.AccountID]++
		// Like real banks, the message names the account: the consumer
		// must mask it before it reaches a record, a DLQ reason or a log.
		err := &charge.DeclineError{Code: code, Message: "declined by core banking: account " + req.AccountID}
		l.byKey[req.IdempotencyKey] = &posting{req: req, err: err}
		return charge.DebitReceipt{}, false, err
	}
	if pending {
		p := &posting{req: req, pending: true}
		l.byKey[req.IdempotencyKey] = p
		go func() {
			time.Sleep(f.PendingLatency)
			l.mu.Lock()
			defer l.mu.Unlock()
			if l.byKey[req.IdempotencyKey] == p { // not reset meanwhile
				p.entry, p.pending = l.post(req), false
			}
		}()
		return charge.DebitReceipt{}, false, ErrPending
	}
	e := l.post(req)
	l.byKey[req.IdempotencyKey] = &posting{req: req, entry: e}
	switch {
	case failPost:
		return charge.DebitReceipt{}, false, ErrUnavailable
	case badGateway:
		return charge.DebitReceipt{}, false, &FaultError{Status: 502, Code: "BAD_GATEWAY", Posted: true}
	case reset:
		return charge.DebitReceipt{}, false, &FaultError{Reset: true, Posted: true}
	}
	l.confirmed[req.IdempotencyKey] = true
	return charge.DebitReceipt{Reference: e.Reference}, false, nil
}

// declineCode is the code a debit of an account declined `before` times
// already is declined with under rule (CODE, or CODE*N: only the first N
// debits); ok is false when it posts.
func declineCode(rule string, before int) (string, bool) {
	if rule == "" {
		return "", false
	}
	code, times, capped := strings.Cut(rule, "*")
	if !capped {
		return rule, true
	}
	n, err := strconv.Atoi(times)
	if err != nil || n < 0 {
		return rule, true // a rule it cannot read declines, as a plain code would
	}
	return code, before < n
}

// post adds a posting to the ledger. Caller holds mu.
func (l *Ledger) post(req charge.DebitRequest) Entry {
	l.seq++
	e := Entry{
		Seq: l.seq, IdempotencyKey: req.IdempotencyKey, AccountID: req.AccountID,
		AmountMinor: req.Amount.Minor, Currency: string(req.Amount.Currency),
		ChargeType: string(req.ChargeType), Narrative: req.Narrative,
		Reference: fmt.Sprintf("CBS%010d", l.seq), PostedAt: l.now().UTC(),
	}
	l.entries = append(l.entries, e)
	return e
}

// Status answers a status enquiry for key: what the bank knows of it. An
// answer of POSTED confirms the debit to the caller.
func (l *Ledger) Status(key string) (charge.Enquiry, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.outage(); err != nil {
		return charge.Enquiry{}, err
	}
	if p, ok := l.byKey[key]; ok {
		var d *charge.DeclineError
		if errors.As(p.err, &d) {
			return charge.Enquiry{State: charge.DebitDeclined, Decline: d}, nil
		}
		if p.pending {
			return charge.Enquiry{State: charge.DebitInProgress}, nil
		}
		if p.err == nil {
			l.confirmed[key] = true
			return charge.Enquiry{State: charge.DebitPosted, Reference: p.entry.Reference}, nil
		}
	}
	if l.inflight[key] > 0 {
		return charge.Enquiry{State: charge.DebitInProgress}, nil
	}
	return charge.Enquiry{State: charge.DebitNotFound}, nil
}

// Health is the answer of the health check: the outage's, or nil (also
// during an outage with OutageHealthy: the health check lies).
func (l *Ledger) Health() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.faults.OutageHealthy {
		return nil
	}
	return l.outage()
}

// Entries returns every posting, in order.
func (l *Ledger) Entries() []Entry {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]Entry(nil), l.entries...)
}

// PostingsByKey counts postings per idempotency key (the exactly-once check:
// every value must be 1).
func (l *Ledger) PostingsByKey() map[string]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[string]int, len(l.entries))
	for _, e := range l.entries {
		out[e.IdempotencyKey]++
	}
	return out
}

// DuplicateRequests returns, per key, the debit requests that arrived after
// the bank had already confirmed that key's debit: what the idempotency key
// absorbed, and what a bank without one would have posted twice.
func (l *Ledger) DuplicateRequests() map[string]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[string]int, len(l.dupRequests))
	for k, v := range l.dupRequests {
		out[k] = v
	}
	return out
}

// Calls returns how many debit calls arrived for key (postings or not).
func (l *Ledger) Calls(key string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.calls[key]
}

// Reset forgets every posting and call (for a hermetic demo).
func (l *Ledger) Reset() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.seq = 0
	l.byKey, l.calls, l.entries = map[string]*posting{}, map[string]int{}, nil
	l.confirmed, l.dupRequests, l.declined = map[string]bool{}, map[string]int{}, map[string]int{}
	l.faults.OutageStatus, l.faults.OutageUntil = 0, time.Time{}
}

// entryIndex returns the index in l.entries of key's posting, or an error.
// Caller holds mu.
func (l *Ledger) entryIndex(key string) (int, error) {
	for i := range l.entries {
		if l.entries[i].IdempotencyKey == key {
			return i, nil
		}
	}
	return -1, fmt.Errorf("%w: %q", ErrUnknownKey, key)
}

// Reverse has the bank reverse key's posting now: the statement of a
// period holding now carries a reversal of it. The entry stays in Entries
// (and PostingsByKey), with ReversedAt set. Reversing twice is an error.
func (l *Ledger) Reverse(key string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	i, err := l.entryIndex(key)
	if err != nil {
		return err
	}
	if l.entries[i].ReversedAt != nil {
		return fmt.Errorf("corebank: posting %q already reversed", key)
	}
	t := l.now().UTC()
	l.entries[i].ReversedAt = &t
	return nil
}

// Drop has the bank lose key's posting: the statement leaves it (and any
// reversal of it) out. The entry stays in Entries (and PostingsByKey),
// with Dropped set.
func (l *Ledger) Drop(key string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	i, err := l.entryIndex(key)
	if err != nil {
		return err
	}
	l.entries[i].Dropped = true
	return nil
}

// Statement returns the ledger as a bank statement of [from, to): a
// posting per entry posted in the period (BankKey the idempotency key,
// booked on PostedAt's UTC date), then a reversal per entry reversed in
// the period (booked on ReversedAt's UTC date), each in ledger order.
// Dropped entries are left out.
func (l *Ledger) Statement(from, to time.Time) []statement.Posting {
	l.mu.Lock()
	defer l.mu.Unlock()
	in := func(t time.Time) bool { return !t.Before(from) && t.Before(to) }
	day := func(t time.Time) time.Time {
		y, m, d := t.UTC().Date()
		return time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
	}
	posting := func(e Entry) statement.Posting {
		return statement.Posting{
			BankKey: e.IdempotencyKey, Account: e.AccountID,
			Amount:      charge.Money{Minor: e.AmountMinor, Currency: charge.Currency(e.Currency)},
			BookingDate: day(e.PostedAt), Reference: e.Reference, Narrative: e.Narrative,
		}
	}
	var out []statement.Posting
	for _, e := range l.entries {
		if !e.Dropped && in(e.PostedAt) {
			out = append(out, posting(e))
		}
	}
	for _, e := range l.entries {
		if !e.Dropped && e.ReversedAt != nil && in(*e.ReversedAt) {
			p := posting(e)
			p.Reversal, p.BookingDate = true, day(*e.ReversedAt)
			out = append(out, p)
		}
	}
	return out
}
