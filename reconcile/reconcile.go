// Package reconcile matches the bank's books against the collector's
// records: every posting of a statement (package statement) to the
// record of its charge, by bank key across every key generation, and every
// record finished in the statement's period to its posting. What does not
// match is a Break of one of six kinds, each with what to do; an operator
// closes one with Resolve (a posting adopted, or the break marked resolved
// with a reason), and a resolved break does not come back on the next run
// of the same statement.
//
// The records hold no amount or account (only the charge's keyed
// fingerprint): a posting's account, amount and currency are checked
// against the fingerprint, with the charge type and due date read from the
// posting's narrative, which carries the debit's own ("SMS_ALERT_FEE
// 2026-12-01", charge.DebitRequest). A posting whose narrative does not
// say them is matched by key alone and counted as unverified.
package reconcile

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/finedge/idempotent-consumer/charge"
	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
	"github.com/finedge/idempotent-consumer/reconcile/statement"
)

// Kind is a kind of break.
type Kind string

// The kinds of break.
const (
	// PostedNotRecorded: the bank posted the charge's current key and the
	// record is not DONE (a crash between debit and DONE that nothing
	// retried, a bank with no status enquiry, a record reopened by
	// mistake). Resolve adopts the posting.
	PostedNotRecorded Kind = "posted_not_recorded"
	// RecordedNotPosted: the record is DONE, finished in the period, and
	// its key has no posting in the statement, or its posting was reversed.
	RecordedNotPosted Kind = "recorded_not_posted"
	// PostedTwice: more than one posting stands for the charge (twice
	// under one key, or under two generations).
	PostedTwice Kind = "posted_twice"
	// AmountMismatch: the posting's amount, currency or account is not the
	// charge's.
	AmountMismatch Kind = "amount_mismatch"
	// FailedButPosted: the record is FAILED, or the posting is under a
	// generation the bank declined, and the bank posted it.
	FailedButPosted Kind = "failed_but_posted"
	// UnknownPosting: a posting whose key matches no record.
	UnknownPosting Kind = "unknown_posting"
)

// Kinds lists every kind, in the order a report gives them.
var Kinds = []Kind{PostedNotRecorded, RecordedNotPosted, PostedTwice, AmountMismatch, FailedButPosted, UnknownPosting}

// Valid reports whether k is a kind.
func (k Kind) Valid() bool { return slices.Contains(Kinds, k) }

// Posted is one posting as a break shows it: never a full account.
type Posted struct {
	BankKey     string `json:"bankKey"`
	Account     string `json:"account"` // masked
	Minor       int64  `json:"amountMinor"`
	Currency    string `json:"currency"`
	Amount      string `json:"amount"` // "INR 25.00"
	BookingDate string `json:"bookingDate"`
	Reference   string `json:"reference,omitempty"`
	Reversal    bool   `json:"reversal,omitempty"`
	Where       string `json:"where"`
}

// Break is one thing the books and the records disagree on.
type Break struct {
	Kind     Kind     `json:"kind"`
	ChargeID string   `json:"chargeId"`
	BankKeys []string `json:"bankKeys"`
	Account  string   `json:"account,omitempty"` // masked
	Posted   []Posted `json:"posted,omitempty"`
	// The record as read: empty State when there is none.
	State      string `json:"state,omitempty"`
	Status     string `json:"status,omitempty"`
	Generation int    `json:"generation,omitempty"`
	Reference  string `json:"recordReference,omitempty"`
	UpdatedAt  string `json:"recordUpdatedAt,omitempty"`
	// Detail says what disagrees; Action what to do.
	Detail string `json:"detail"`
	Action string `json:"action"`
	// ID is the digest of the break's facts: a resolution closes this
	// break, not a later one of the same charge with other facts.
	ID string `json:"id"`
}

// Report is what a run found.
type Report struct {
	Period struct {
		From string `json:"from"`
		To   string `json:"to"`
	} `json:"period"`
	// Postings counts the postings of ours read (reversals apart), Matched
	// the charges whose posting matched a DONE record.
	Postings  int `json:"postings"`
	Reversals int `json:"reversals"`
	Matched   int `json:"matched"`
	// Unverified: matched by key, the amount not checked (no narrative, or
	// a fingerprint written under a key not given).
	Unverified int `json:"unverified"`
	// InFlight: posted, the record IN_PROGRESS under a live lease (a
	// consumer is finishing it now): not a break yet.
	InFlight int `json:"inFlight"`
	// Resolved counts the breaks found again and left out, resolved
	// earlier.
	Resolved int     `json:"resolved"`
	Breaks   []Break `json:"breaks"`
	// Notes are what a reader should know about the run as a whole.
	Notes []string `json:"notes,omitempty"`
	// Statements names what was read (set by the caller): the files and
	// the side they were read from, so that a report kept on disk can be
	// resolved against the same statement (the console does).
	Statements        []string `json:"statements,omitempty"`
	CollectionAccount string   `json:"collectionAccount,omitempty"`
	// RunAt is when the run finished.
	RunAt time.Time `json:"runAt"`
}

// Store is what a run reads: the records (Get, and driver.Walk of the DONE
// ones finished in the period) and the resolutions (records of their own,
// under driver.InternalKeyPrefix).
type Store = driver.Store

// Options configure a run.
type Options struct {
	Store Store
	// Fingerprints checks a posting's account, amount and currency
	// against the record's fingerprint (serve's fingerprint keys). Nil:
	// only unkeyed fingerprints can be checked; the others count as
	// unverified.
	Fingerprints *idempotency.Fingerprinter
	// Period: postings booked and records finished in [From, To). Both
	// required.
	Period statement.Period
	// Now is the time of the run (retention, live leases). Zero: time.Now.
	Now time.Time
	// Concurrency is how many records are read at once (default 16).
	Concurrency int
	// SkewMargin: an IN_PROGRESS record counts as in flight until this
	// long after its lease (serve's skew margin: no one may take it over
	// before then, so a posting of it is not yet a break).
	SkewMargin time.Duration
	// ChargeID, when set, limits the run to one charge (Resolve's).
	ChargeID string
}

// Postings streams a statement's postings to fn (statement.Read over one
// or more files) and returns the period the statement says it covers
// (zero when it does not say).
type Postings func(fn func(statement.Posting) error) (statement.Period, error)

// ErrNoPeriod: neither the statement nor the caller said which period.
var ErrNoPeriod = errors.New("reconcile: no period: the statement has no FrToDt; give --from and --to")

// keyPostings are the postings and reversals of one bank key.
type keyPostings struct {
	posted, reversed []statement.Posting
}

// net is how many postings of the key stand.
func (k *keyPostings) net() int { return len(k.posted) - len(k.reversed) }

// chargePostings are one charge's postings by bank key.
type chargePostings map[string]*keyPostings

// Run reconciles the postings read against opts.Store.
func Run(ctx context.Context, opts Options, read Postings) (Report, error) {
	var rep Report
	if opts.Now.IsZero() {
		opts.Now = time.Now()
	}
	if opts.Concurrency <= 0 {
		opts.Concurrency = 16
	}
	byCharge := map[string]chargePostings{}
	said, err := read(func(p statement.Posting) error {
		id, _ := SplitBankKey(p.BankKey)
		if opts.ChargeID != "" && id != opts.ChargeID {
			return nil
		}
		cp := byCharge[id]
		if cp == nil {
			cp = chargePostings{}
			byCharge[id] = cp
		}
		kp := cp[p.BankKey]
		if kp == nil {
			kp = &keyPostings{}
			cp[p.BankKey] = kp
		}
		if p.Reversal {
			kp.reversed = append(kp.reversed, p)
		} else {
			kp.posted = append(kp.posted, p)
		}
		return nil
	})
	if err != nil {
		return rep, err
	}
	if opts.Period == (statement.Period{}) {
		opts.Period = said
	}
	if opts.Period.From.IsZero() || opts.Period.To.IsZero() || !opts.Period.From.Before(opts.Period.To) {
		return rep, ErrNoPeriod
	}
	rep.Period.From, rep.Period.To = opts.Period.From.UTC().Format(time.RFC3339), opts.Period.To.UTC().Format(time.RFC3339)
	outside := inPeriod(byCharge, opts.Period, &rep)
	if outside > 0 {
		rep.Notes = append(rep.Notes, fmt.Sprintf("%d posting(s) booked outside the period were left out", outside))
	}
	r := &run{opts: opts, rep: &rep}
	if err := r.postings(ctx, byCharge); err != nil {
		return rep, err
	}
	if err := r.finished(ctx, byCharge); err != nil {
		return rep, err
	}
	if rep, err = rep.Open(ctx, opts.Store, opts.Now); err != nil {
		return rep, err
	}
	slices.SortFunc(rep.Breaks, func(a, b Break) int {
		if c := slices.Index(Kinds, a.Kind) - slices.Index(Kinds, b.Kind); c != 0 {
			return c
		}
		return strings.Compare(a.ChargeID, b.ChargeID)
	})
	if rep.Breaks == nil {
		rep.Breaks = []Break{}
	}
	rep.RunAt = time.Now().UTC()
	if r.unknownKey > 0 {
		rep.Notes = append(rep.Notes, fmt.Sprintf("%d posting(s) matched by key only: their record's fingerprint was written under a key not given (--fingerprint-key-file, --fingerprint-previous-key-files)", r.unknownKey))
	}
	return rep, nil
}

// inPeriod drops the postings booked outside p (a booking date is a day:
// it is in p when the day overlaps it), counts the rest, and returns how
// many it dropped.
func inPeriod(byCharge map[string]chargePostings, p statement.Period, rep *Report) (outside int) {
	in := func(q statement.Posting) bool {
		return q.BookingDate.Add(24*time.Hour).After(p.From) && q.BookingDate.Before(p.To)
	}
	for id, cp := range byCharge {
		for key, kp := range cp {
			n := len(kp.posted) + len(kp.reversed)
			kp.posted = slices.DeleteFunc(kp.posted, func(q statement.Posting) bool { return !in(q) })
			kp.reversed = slices.DeleteFunc(kp.reversed, func(q statement.Posting) bool { return !in(q) })
			outside += n - len(kp.posted) - len(kp.reversed)
			rep.Postings += len(kp.posted)
			rep.Reversals += len(kp.reversed)
			if len(kp.posted)+len(kp.reversed) == 0 {
				delete(cp, key)
			}
		}
		if len(cp) == 0 {
			delete(byCharge, id)
		}
	}
	return outside
}

type run struct {
	opts Options
	rep  *Report

	mu         sync.Mutex
	unknownKey int
}

func (r *run) add(b Break) {
	r.mu.Lock()
	defer r.mu.Unlock()
	b.ID = b.digest()
	r.rep.Breaks = append(r.rep.Breaks, b)
}

// postings reads the record of every charge posted and judges it.
func (r *run) postings(ctx context.Context, byCharge map[string]chargePostings) error {
	ids := make(chan string)
	errs := make(chan error, r.opts.Concurrency)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	for range r.opts.Concurrency {
		wg.Go(func() {
			for id := range ids {
				if err := r.judge(ctx, id, byCharge[id]); err != nil {
					errs <- err
					cancel()
					return
				}
			}
		})
	}
	func() {
		defer close(ids)
		for id := range byCharge {
			select {
			case ids <- id:
			case <-ctx.Done():
				return
			}
		}
	}()
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return err
	}
	return ctx.Err()
}

// judge is one charge's postings against its record.
func (r *run) judge(ctx context.Context, id string, cp chargePostings) error {
	rec, err := r.opts.Store.Get(ctx, id, r.opts.Now)
	found := err == nil
	if err != nil && !errors.Is(err, driver.ErrNotFound) {
		return fmt.Errorf("record %s: %w", id, err)
	}
	b := Break{ChargeID: id}
	standing := 0 // postings that stand, over every key
	var posted []statement.Posting
	for _, key := range slices.Sorted(maps.Keys(cp)) {
		kp := cp[key]
		b.BankKeys = append(b.BankKeys, key)
		for _, p := range kp.posted {
			b.Posted = append(b.Posted, shown(p))
		}
		for _, p := range kp.reversed {
			b.Posted = append(b.Posted, shown(p))
		}
		if n := kp.net(); n > 0 {
			standing += n
			posted = append(posted, kp.posted[len(kp.posted)-n:]...)
		}
	}
	if len(b.Posted) > 0 {
		b.Account = b.Posted[0].Account
	}
	if found {
		b.State, b.Status, b.Generation = string(rec.State), rec.Status, max(rec.Generation, 1)
		b.UpdatedAt = rec.UpdatedAt.UTC().Format(time.RFC3339)
		if rec.State == driver.StateDone {
			b.Reference = charge.ReferenceOf(rec.Status, rec.Detail)
		}
	}
	current := charge.BankKey(id, max(rec.Generation, 1))
	switch {
	case !found && standing == 0:
		if reversedOnly(cp) {
			b.Kind, b.Detail = UnknownPosting, "a reversal under a key that matches no record (past its retention, or never ours)"
			b.Action = "ask the bank which debit it reverses; close it with reconcile resolve --reason"
			r.add(b)
		}
		return nil
	case !found:
		b.Kind = UnknownPosting
		b.Detail = fmt.Sprintf("%d posting(s) under a key that matches no record: a charge the collector never saw (or one past its retention)", standing)
		b.Action = "ask the bank who sent the debit; refund it if it is not ours, then reconcile resolve --reason"
		r.add(b)
		return nil
	case standing >= 2:
		b.Kind = PostedTwice
		b.Detail = fmt.Sprintf("%d postings stand for one charge (keys %s); the record is %s", standing, strings.Join(b.BankKeys, ", "), stateText(rec))
		b.Action = "have the bank refund every posting but one (their references are listed), then reconcile resolve --reason"
		r.add(b)
		return nil
	case standing == 0:
		// Every posting of the period was reversed.
		if rec.State == driver.StateDone {
			b.Kind = RecordedNotPosted
			b.Detail = fmt.Sprintf("recorded %s but the bank reversed its posting", rec.Status)
			b.Action = "ask the bank why it reversed the debit; if the money is truly back with the customer, recover the charge again (reopen with a new attempt) and reconcile resolve --reason"
			r.add(b)
		}
		return nil
	}
	p := posted[0]
	switch {
	case p.BankKey != current:
		b.Kind = FailedButPosted
		_, gen := SplitBankKey(p.BankKey)
		b.Detail = fmt.Sprintf("the bank posted generation %d (key %s), which it had declined; the record is at generation %d and %s", gen, p.BankKey, max(rec.Generation, 1), stateText(rec))
		b.Action = "have the bank refund the posting under the declined key (or, if the later generation never posts, keep it), then reconcile resolve --reason"
		r.add(b)
	case rec.State == driver.StateFailed:
		b.Kind = FailedButPosted
		b.Detail = fmt.Sprintf("recorded FAILED (%s) but the bank posted it", charge.Clip(rec.Detail, 160))
		b.Action = "the money moved: have the bank refund it, or record it as recovered; then reconcile resolve --reason"
		r.add(b)
	case rec.State == driver.StateInProgress && rec.LeaseLive(r.opts.Now.Add(-r.opts.SkewMargin)):
		r.mu.Lock()
		r.rep.InFlight++
		r.mu.Unlock()
	case rec.State == driver.StateInProgress:
		b.Kind = PostedNotRecorded
		b.Detail = fmt.Sprintf("the bank posted it (reference %s) and the record is IN_PROGRESS with its lease passed (attempt %d): no consumer finished it", p.Reference, rec.Attempt)
		b.Action = fmt.Sprintf("adopt the posting: chargerecovery reconcile resolve %s --statement FILE --reason TEXT (records DONE with the bank's reference; no debit, no notice)", id)
		r.add(b)
	default: // DONE, posted once under its own key
		ok, checked, err := r.verify(rec, p)
		if err != nil {
			return err
		}
		switch {
		case !checked:
			r.mu.Lock()
			r.rep.Matched++
			r.rep.Unverified++
			r.mu.Unlock()
		case ok:
			r.mu.Lock()
			r.rep.Matched++
			r.mu.Unlock()
		default:
			b.Kind = AmountMismatch
			b.Detail = fmt.Sprintf("the bank posted %s to %s; that is not the charge's amount, currency or account (the record's fingerprint does not match)",
				p.Amount, charge.MaskAccount(p.Account))
			b.Action = "compare with the billing system's charge; have the bank correct the posting (refund and post again, or adjust), then reconcile resolve --reason"
			r.add(b)
		}
	}
	return nil
}

// verify checks p against rec's fingerprint: ok when it is the charge's
// account, amount and currency; checked false when it cannot be told.
func (r *run) verify(rec driver.Record, p statement.Posting) (ok, checked bool, err error) {
	typ, due, found := NarrativeParts(p.Narrative)
	if !found {
		return false, false, nil
	}
	parts := []string{p.Account, strconv.FormatInt(p.Amount.Minor, 10), string(p.Amount.Currency), string(typ), due}
	ok, err = r.opts.Fingerprints.Match(rec.Fingerprint, parts...)
	if errors.Is(err, idempotency.ErrUnknownFingerprintKey) {
		r.mu.Lock()
		r.unknownKey++
		r.mu.Unlock()
		return false, false, nil
	}
	if err != nil {
		return false, false, err
	}
	return ok, true, nil
}

// finished finds the records DONE in the period whose key has no posting
// standing in the statement.
func (r *run) finished(ctx context.Context, byCharge map[string]chargePostings) error {
	req := driver.WalkRequest{State: driver.StateDone, From: r.opts.Period.From, To: r.opts.Period.To, Now: r.opts.Now}
	check := func(rec driver.Record) error {
		if r.opts.ChargeID != "" && rec.Key != r.opts.ChargeID {
			return nil
		}
		if _, judged := byCharge[rec.Key]; judged {
			return nil // its postings were judged against it
		}
		r.add(Break{Kind: RecordedNotPosted, ChargeID: rec.Key, BankKeys: []string{charge.BankKey(rec.Key, max(rec.Generation, 1))},
			Account: noticeAccount(rec), State: string(rec.State), Status: rec.Status, Generation: max(rec.Generation, 1),
			Reference: charge.ReferenceOf(rec.Status, rec.Detail), UpdatedAt: rec.UpdatedAt.UTC().Format(time.RFC3339),
			Detail: fmt.Sprintf("recorded %s (bank reference %s) in the period, and the statement has no posting under its key",
				rec.Status, charge.ReferenceOf(rec.Status, rec.Detail)),
			Action: "check the next day's statement (a posting booked after the cut-off); else ask the bank about the reference; reconcile resolve --reason once settled"})
		return nil
	}
	if r.opts.ChargeID != "" {
		// One charge: its record, not a walk of the period.
		rec, err := r.opts.Store.Get(ctx, r.opts.ChargeID, r.opts.Now)
		if errors.Is(err, driver.ErrNotFound) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("record %s: %w", r.opts.ChargeID, err)
		}
		if req.Walked(rec) {
			return check(rec)
		}
		return nil
	}
	err := driver.Walk(ctx, r.opts.Store, req, check)
	if errors.Is(err, driver.ErrNotIndexed) {
		return fmt.Errorf("the store cannot list the records finished in a period (%w): reconciliation needs it", err)
	}
	return err
}

// Open is r without the breaks resolved since (or before) it was made:
// each break's resolution is looked up in store, as a run does, and those
// found are counted in Resolved. The console shows a kept report this way.
func (r Report) Open(ctx context.Context, store driver.Store, now time.Time) (Report, error) {
	kept := make([]Break, 0, len(r.Breaks))
	for _, b := range r.Breaks {
		_, err := store.Get(ctx, b.resolutionKey(), now)
		switch {
		case err == nil:
			r.Resolved++
		case errors.Is(err, driver.ErrNotFound):
			kept = append(kept, b)
		default:
			return r, fmt.Errorf("resolution of %s: %w", b.ChargeID, err)
		}
	}
	r.Breaks = kept
	return r, nil
}

// ResolutionPrefix begins the keys of resolutions.
const ResolutionPrefix = driver.InternalKeyPrefix + "reconcile/"

// resolutionKey is where the resolution of exactly this break is kept.
func (b Break) resolutionKey() string {
	return ResolutionPrefix + b.ChargeID + "/" + string(b.Kind) + "/" + b.ID
}

// digest is the break's id: its kind, charge, record and postings.
func (b Break) digest() string {
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00%s\x00%s\x00%d\x00%s\x00", b.Kind, b.ChargeID, b.State, b.Status, b.Generation, b.Reference)
	for _, p := range b.Posted {
		fmt.Fprintf(h, "%s\x00%d\x00%s\x00%s\x00%s\x00%t\x00", p.BankKey, p.Minor, p.Currency, p.BookingDate, p.Reference, p.Reversal)
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// SplitBankKey is the charge id and key generation of a bank key
// ("CHG-1~3" → "CHG-1", 3; "CHG-1" → "CHG-1", 1). A suffix that is not a
// generation leaves the key as the id, generation 0.
func SplitBankKey(key string) (chargeID string, gen int) {
	id, g, ok := strings.Cut(key, charge.GenerationSeparator)
	if !ok {
		return key, 1
	}
	n, err := strconv.Atoi(g)
	if err != nil || n < 2 || strconv.Itoa(n) != g {
		return id, 0
	}
	return id, n
}

// NarrativeParts reads the charge type and due date (YYYY-MM-DD) from a
// posting's narrative, as the debit sent them ("LOCKER_RENT 2026-12-01").
func NarrativeParts(narrative string) (charge.Type, string, bool) {
	var typ charge.Type
	var due string
	for _, w := range strings.Fields(narrative) {
		if t := charge.Type(w); t.Valid() {
			typ = t
		} else if _, err := time.Parse(time.DateOnly, w); err == nil {
			due = w
		}
	}
	return typ, due, typ != "" && due != ""
}

func shown(p statement.Posting) Posted {
	return Posted{BankKey: p.BankKey, Account: charge.MaskAccount(p.Account), Minor: p.Amount.Minor, Currency: string(p.Amount.Currency),
		Amount: p.Amount.String(), BookingDate: p.BookingDate.Format(time.DateOnly), Reference: p.Reference, Reversal: p.Reversal, Where: p.Where}
}

func reversedOnly(cp chargePostings) bool {
	for _, kp := range cp {
		if len(kp.posted) > 0 {
			return false
		}
	}
	return true
}

func stateText(rec driver.Record) string {
	if rec.Status != "" {
		return string(rec.State) + " " + rec.Status
	}
	return string(rec.State)
}

// noticeAccount is the masked account a DONE record's kept notice names.
func noticeAccount(rec driver.Record) string {
	if n, ok := charge.PendingNotice(rec.Status, rec.Detail); ok {
		return n.Account
	}
	return ""
}
