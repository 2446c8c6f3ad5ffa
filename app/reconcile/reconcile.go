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
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/app/reconcile/statement"
	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
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
	// Return: the reversal is the debit returned (camt RtrInf), with its
	// ISO 20022 reason code (AC04, AM04, MD06, …; empty when none given).
	Return       bool   `json:"return,omitempty"`
	ReturnReason string `json:"returnReason,omitempty"`
	Where        string `json:"where"`
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
	// Unverified: the posting of a posted_not_recorded break could not be
	// checked against the charge (no narrative, or no fingerprint key):
	// adopting it needs the operator's word (ResolveRequest.Unverified).
	Unverified bool `json:"unverified,omitempty"`
	// judged is the posting the run judged (the one that stands), which an
	// adoption records; facts digests every posting's full account and
	// narrative (never shown) into the break's ID.
	judged statement.Posting
	facts  string
	// key is the charge's record key as read (ChargeID is as shown:
	// masked when it is not ours, or looks like an account number);
	// accounts are the postings' full accounts, masked wherever a value
	// of the break equals one.
	key      string
	accounts []string
	// open: the posting stands while the record is not DONE (a
	// posted_twice or amount_mismatch break): resolve collects it, or
	// refuses; mismatch: it is not the charge's (amount_mismatch), never
	// collected.
	open, mismatch bool
	// collectable: the record is FAILED (or WAITING for a retry after
	// the decline) and one posting stands for it, which Resolve records
	// as collected.
	collectable bool
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
	// Unverified: matched by key only, the amount not checked — a record
	// written before summaries (driver.Record.Summary) that keeps no
	// notice, and no narrative on the posting (or a fingerprint written
	// under a key not given). KeyOnly names them (at most MaxKeyOnly).
	Unverified int      `json:"unverified"`
	KeyOnly    []string `json:"keyOnly,omitempty"`
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

// MaxKeyOnly bounds Report.KeyOnly (the count is whole): the first in
// order, whatever order the records were read in.
const MaxKeyOnly = 50

// keepFirst is sorted list with s inserted, cut to its first n: the same
// n whichever order they come in (the charges are judged concurrently).
func keepFirst(list []string, s string, n int) []string {
	i, _ := slices.BinarySearch(list, s)
	if i >= n {
		return list
	}
	list = slices.Insert(list, i, s)
	if len(list) > n {
		list = list[:n]
	}
	return list
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
	key              string
	posted, reversed []statement.Posting
}

// add files p, unless the same posting (same key, bank reference, day,
// amount and direction) was read already from another file: the same
// statement given twice, or a camt.054 beside the camt.053 that repeats
// it. Within one file two transactions are two postings, whatever their
// references say (a batch's transactions without references of their own
// all carry the entry's; a bank may reuse an instruction's reference on
// two entries). It reports whether p was new.
func (k *keyPostings) add(p statement.Posting) bool {
	list := &k.posted
	if p.Reversal {
		list = &k.reversed
	}
	if p.Reference != "" {
		for _, q := range *list {
			if q.Reference == p.Reference && q.BookingDate.Equal(p.BookingDate) && q.Amount == p.Amount && (p.File == "" || q.File != p.File) {
				return false
			}
		}
	}
	*list = append(*list, p)
	return true
}

// pair cancels each reversal (or return) with the posting it reverses:
// the one with its bank reference; else — banks give a reversal or a
// return a reference of its own — a posting of its amount and currency
// (under its key, the same end-to-end id) booked on or before it; a
// reversal without a reference, a posting of its amount. Reversals
// naming a posting's reference are paired first. standing is what stands
// after it; partial the reversals of a posting here of another amount (or,
// without a reference, of no amount here); earlier the reversals of a
// posting of no statement read here (a reference no posting has, and no
// posting of its amount booked before it; or the reference of the posting
// recorded, which an earlier statement had: a correction reverses it and
// posts again). k is left as read.
func (k *keyPostings) pair(recorded string) (standing, partial, earlier []statement.Posting) {
	posted, reversed := sameDayOnce(k.posted), sameDayOnce(k.reversed)
	if len(reversed) == 0 {
		return posted, nil, nil
	}
	standing = slices.Clone(posted)
	var own []statement.Posting // reversals whose reference no posting has
	for _, rv := range reversed {
		if rv.Reference == "" {
			continue
		}
		at := slices.IndexFunc(standing, func(p statement.Posting) bool { return p.Reference == rv.Reference })
		switch {
		case at < 0 && recorded != "" && (rv.Reference == recorded || charge.MaskText(rv.Reference, rv.Account) == recorded || charge.ShowRef(rv.Reference, rv.Account) == recorded):
			earlier = append(earlier, rv) // the recorded posting's, of an earlier statement
		case at < 0:
			own = append(own, rv)
		case standing[at].Amount != rv.Amount:
			partial = append(partial, rv)
		default:
			standing = slices.Delete(standing, at, at+1)
		}
	}
	for _, rv := range own {
		at := slices.IndexFunc(standing, func(p statement.Posting) bool {
			return p.Amount == rv.Amount && !p.BookingDate.After(rv.BookingDate)
		})
		if at < 0 {
			// A reversal of its own reference beside a posting of another
			// amount booked before it is a partial reversal (or a return
			// less the bank's fee): never nothing.
			if slices.ContainsFunc(standing, func(p statement.Posting) bool { return !p.BookingDate.After(rv.BookingDate) }) {
				partial = append(partial, rv)
			} else {
				earlier = append(earlier, rv)
			}
			continue
		}
		standing = slices.Delete(standing, at, at+1)
	}
	for _, rv := range reversed {
		if rv.Reference != "" {
			continue
		}
		at := slices.IndexFunc(standing, func(p statement.Posting) bool { return p.Amount == rv.Amount })
		if at < 0 {
			if len(standing) > 0 {
				partial = append(partial, rv)
			} else {
				earlier = append(earlier, rv)
			}
			continue
		}
		standing = slices.Delete(standing, at, at+1)
	}
	return standing, partial, earlier
}

// sameDayOnce is ps with what two files say of one day counted once:
// for each booking day and amount, the postings of the file that has the
// most of them (a camt.054 notifying one by one what the camt.053 booked
// as a batch, under other references, says it again; it does not add to
// it). Postings of one file, or of different days, all stand.
func sameDayOnce(ps []statement.Posting) []statement.Posting {
	if len(ps) < 2 {
		return ps
	}
	type day struct {
		at  time.Time
		amt charge.Money
	}
	count := map[day]map[string]int{}
	for _, p := range ps {
		d := day{p.BookingDate, p.Amount}
		if count[d] == nil {
			count[d] = map[string]int{}
		}
		count[d][p.File]++
	}
	keep := map[day]string{}
	for d, byFile := range count {
		best, n := "", -1
		for _, f := range slices.Sorted(maps.Keys(byFile)) {
			if byFile[f] > n {
				best, n = f, byFile[f]
			}
		}
		keep[d] = best
	}
	out := make([]statement.Posting, 0, len(ps))
	for _, p := range ps {
		if keep[day{p.BookingDate, p.Amount}] == p.File {
			out = append(out, p)
		}
	}
	return out
}

// chargePostings are one charge's postings by bank key (nearly always
// one key: a slice, not a map, for a million of them).
type chargePostings []*keyPostings

// of is the postings of key, nil when there are none.
func (cp chargePostings) of(key string) *keyPostings {
	for _, kp := range cp {
		if kp.key == key {
			return kp
		}
	}
	return nil
}

// sorted is cp by bank key.
func (cp chargePostings) sorted() chargePostings {
	slices.SortFunc(cp, func(a, b *keyPostings) int { return strings.Compare(a.key, b.key) })
	return cp
}

// fill puts cp's postings, as read, on b (masked), and b's account.
func (cp chargePostings) fill(b Break) Break {
	for _, kp := range cp.sorted() {
		b.BankKeys = append(b.BankKeys, kp.key)
		for _, p := range kp.posted {
			b.Posted = append(b.Posted, shown(p))
		}
		for _, p := range kp.reversed {
			b.Posted = append(b.Posted, shown(p))
		}
	}
	if len(b.Posted) > 0 {
		b.Account = b.Posted[0].Account
	}
	h := sha256.New()
	for _, kp := range cp {
		for _, p := range append(slices.Clone(kp.posted), kp.reversed...) {
			fmt.Fprintf(h, "%s\x00%s\x00", p.Account, p.Narrative)
			if p.Account != "" && !slices.Contains(b.accounts, p.Account) {
				b.accounts = append(b.accounts, p.Account)
			}
		}
	}
	b.facts = hex.EncodeToString(h.Sum(nil))
	return b
}

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
	// odd holds the postings under keys no charge of ours can have (a
	// tool's internal key, a generation suffix we never send): unknown
	// postings, judged without reading any record.
	odd := map[string]chargePostings{}
	repeated := 0
	// days are the booking days with a posting or a reversal of ours, of
	// any charge (also when one charge is judged).
	days := map[time.Time]bool{}
	// unkeyed are the reversals without a bank key (a bank's storno
	// naming the posting it reverses by its reference), paired once
	// every posting is read.
	var unkeyed []statement.Posting
	// others are the postings of the charges a one-charge run leaves
	// out, kept for that pairing only: a storno pairs (or does not) as it
	// does in the whole run.
	others := map[string]chargePostings{}
	said, err := read(func(p statement.Posting) error {
		if p.BankKey == "" && p.Reversal {
			unkeyed = append(unkeyed, p)
			return nil
		}
		days[p.BookingDate] = true
		id, ok := ChargeOf(p.BankKey)
		to := byCharge
		if !ok {
			// Not a charge of ours: reported under its whole key.
			id, to = p.BankKey, odd
		}
		if !opts.wants(id) {
			if p.Reversal {
				return nil
			}
			to = others
		}
		cp := to[id]
		kp := cp.of(p.BankKey)
		if kp == nil {
			kp = &keyPostings{key: p.BankKey}
			to[id] = append(cp, kp)
		}
		if !kp.add(p) && opts.wants(id) {
			repeated++
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
	unpaired := pairUnkeyed(unkeyed, days, &repeated, byCharge, odd, others)
	clear(others)
	outside := inPeriod(byCharge, opts.Period, &rep) + inPeriod(odd, opts.Period, &rep)
	unpaired = slices.DeleteFunc(unpaired, func(rv statement.Posting) bool {
		if inDays(rv, opts.Period) {
			return false
		}
		outside++
		return true
	})
	if opts.ChargeID == "" {
		// One charge's run (resolve's) judges that charge alone: a
		// reversal that pairs with none of its postings is the whole
		// run's to note.
		rep.Notes = append(rep.Notes, unpairedNotes(unpaired)...)
	}
	if repeated > 0 {
		rep.Notes = append(rep.Notes, fmt.Sprintf("%d posting(s) read twice (the same bank reference, day and amount: a statement given twice, or a notification repeating it) were counted once", repeated))
	}
	if outside > 0 {
		rep.Notes = append(rep.Notes, fmt.Sprintf("%d posting(s) booked outside the period were left out", outside))
	}
	r := &run{opts: opts, rep: &rep, days: days, empty: map[time.Time]int{}}
	for id, cp := range odd {
		r.unknownKeys(id, cp)
	}
	if err := r.postings(ctx, byCharge); err != nil {
		return rep, err
	}
	if err := r.finished(ctx, byCharge); err != nil {
		return rep, err
	}
	for _, d := range slices.SortedFunc(maps.Keys(r.empty), time.Time.Compare) {
		rep.Notes = append(rep.Notes, fmt.Sprintf("warning: the statement has no entry of ours on %s, and %d record(s) were DONE that day: not reported as recorded_not_posted (a day missing from the statement, or read from the wrong side?); reconcile again with that day's statement",
			d.Format(time.DateOnly), r.empty[d]))
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
	if rep.Unverified > 0 {
		slices.Sort(rep.KeyOnly)
		more := ""
		if n := rep.Unverified - len(rep.KeyOnly); n > 0 {
			more = fmt.Sprintf(" and %d more", n)
		}
		rep.Notes = append(rep.Notes, fmt.Sprintf("%d charge(s) matched by key only, their amount and account NOT compared (records written before summaries, posted without our narrative): %s%s; check them against the billing system",
			rep.Unverified, strings.Join(rep.KeyOnly, ", "), more))
	}
	if r.unknownKey > 0 {
		rep.Notes = append(rep.Notes, fmt.Sprintf("%d posting(s) matched by key only: their record's fingerprint was written under a key not given (--fingerprint-key-file, --fingerprint-previous-key-files)", r.unknownKey))
	}
	return rep, nil
}

// inPeriod drops the postings booked outside p (a booking date is a day:
// it is in p when the day overlaps it), counts the rest, and returns how
// many it dropped.
func inPeriod(byCharge map[string]chargePostings, p statement.Period, rep *Report) (outside int) {
	in := func(q statement.Posting) bool { return inDays(q, p) }
	for id, cp := range byCharge {
		kept := cp[:0]
		for _, kp := range cp {
			n := len(kp.posted) + len(kp.reversed)
			kp.posted = slices.DeleteFunc(kp.posted, func(q statement.Posting) bool { return !in(q) })
			kp.reversed = slices.DeleteFunc(kp.reversed, func(q statement.Posting) bool { return !in(q) })
			outside += n - len(kp.posted) - len(kp.reversed)
			rep.Postings += len(kp.posted)
			rep.Reversals += len(kp.reversed)
			if len(kp.posted)+len(kp.reversed) > 0 {
				kept = append(kept, kp)
			}
		}
		if len(kept) == 0 {
			delete(byCharge, id)
		} else {
			byCharge[id] = kept
		}
	}
	return outside
}

// inDays reports whether q's booking day overlaps p.
func inDays(q statement.Posting, p statement.Period) bool {
	return q.BookingDate.Add(24*time.Hour).After(p.From) && q.BookingDate.Before(p.To)
}

// pairUnkeyed gives each reversal without a bank key (a bank's own
// storno, EndToEndId NOTPROVIDED) the key of the posting it names by its
// bank reference — the one posting read (of any key) with that reference,
// booked on or before it, of its currency (and account, when both say
// one); of several, the one of its amount — and files it among that
// key's reversals, where pair cancels it (or finds it partial) as any
// reversal of that reference. It returns those it could not pair.
func pairUnkeyed(unkeyed []statement.Posting, days map[time.Time]bool, repeated *int, sets ...map[string]chargePostings) (unpaired []statement.Posting) {
	if len(unkeyed) == 0 {
		return nil
	}
	type hit struct {
		kp *keyPostings
		p  statement.Posting
	}
	// The postings of the references named, in one pass over them all.
	byRef := map[string][]hit{}
	for _, rv := range unkeyed {
		if rv.Reference != "" {
			byRef[rv.Reference] = nil
		}
	}
	for _, m := range sets {
		for _, cp := range m {
			for _, kp := range cp {
				for _, p := range kp.posted {
					if hs, ok := byRef[p.Reference]; ok {
						byRef[p.Reference] = append(hs, hit{kp, p})
					}
				}
			}
		}
	}
	type seen struct {
		ref string
		day time.Time
		amt charge.Money
	}
	noted := map[seen]string{} // the file of each unpaired storno noted
	for _, rv := range unkeyed {
		var hits []hit
		if rv.Reference != "" { // else it names nothing to pair with
			for _, h := range byRef[rv.Reference] {
				if !h.p.BookingDate.After(rv.BookingDate) && h.p.Amount.Currency == rv.Amount.Currency &&
					(rv.Account == "" || h.p.Account == "" || h.p.Account == rv.Account) {
					hits = append(hits, h)
				}
			}
		}
		if len(hits) > 1 {
			hits = slices.DeleteFunc(hits, func(h hit) bool { return h.p.Amount != rv.Amount })
		}
		// One posting, or one key's (the same posting read from two files).
		if len(hits) == 0 || slices.ContainsFunc(hits, func(h hit) bool { return h.kp != hits[0].kp }) {
			// The same storno read from two files is noted once (two of
			// one file are two).
			k := seen{rv.Reference, rv.BookingDate, rv.Amount}
			if f, ok := noted[k]; ok && rv.Reference != "" && (rv.File == "" || f != rv.File) {
				*repeated++
				continue
			}
			if _, ok := noted[k]; !ok {
				noted[k] = rv.File
			}
			unpaired = append(unpaired, rv)
			continue
		}
		rv.BankKey = hits[0].kp.key
		if rv.Account == "" {
			rv.Account = hits[0].p.Account
		}
		days[rv.BookingDate] = true
		if !hits[0].kp.add(rv) {
			*repeated++
		}
	}
	return unpaired
}

// unpairedNotes say, with its amount, each reversal without a bank key
// that pairs with no posting read (at most 10 one by one, then the rest
// summed by currency): money back out of the account that no charge's
// report shows.
func unpairedNotes(unpaired []statement.Posting) []string {
	var notes []string
	rest := map[charge.Currency]int64{}
	for i, rv := range unpaired {
		if i >= 10 {
			rest[rv.Amount.Currency] = min(rest[rv.Amount.Currency], math.MaxInt64-rv.Amount.Minor) + rv.Amount.Minor // at most MaxInt64
			continue
		}
		what := "reversal"
		if rv.Return {
			what = "return (" + statement.ReturnReasonText(charge.MaskText(rv.ReturnReason, rv.Account)) + ")"
		}
		ref := "no bank reference"
		if rv.Reference != "" {
			ref = "bank reference " + clip(charge.ShowRef(rv.Reference, rv.Account))
		}
		notes = append(notes, fmt.Sprintf("warning: a %s of %s booked %s without a bank key (EndToEndId NOTPROVIDED or none), %s (%s), pairs with no posting of ours in the statements read: "+
			"it is in no break; reconcile it together with the statement of the posting it reverses (--statement each), or ask the bank which debit it reverses",
			what, rv.Amount, rv.BookingDate.Format(time.DateOnly), ref, clip(charge.MaskText(rv.Where, rv.Account))))
	}
	if n := len(unpaired) - 10; n > 0 {
		var sums []string
		for _, c := range slices.Sorted(maps.Keys(rest)) {
			sums = append(sums, charge.Money{Minor: rest[c], Currency: c}.String())
		}
		notes = append(notes, fmt.Sprintf("warning: %d more reversal(s) without a bank key pair with no posting read, %s in all: see the statement's entries with EndToEndId NOTPROVIDED", n, strings.Join(sums, " + ")))
	}
	return notes
}

type run struct {
	opts Options
	rep  *Report

	mu         sync.Mutex
	unknownKey int
	// days: the booking days with an entry of ours; empty counts, by the
	// bank's day, the records DONE on a day of the period without one.
	days  map[time.Time]bool
	empty map[time.Time]int
}

// bankDay is the booking date (the bank's day, at midnight UTC) of the
// day of the period that at falls in: the period's days run from its From,
// whose day is From rounded to the nearest midnight (a bank's zone is
// within 12 hours of UTC either way, nearly always).
func (r *run) bankDay(at time.Time) time.Time {
	from := r.opts.Period.From.UTC()
	k := int(at.Sub(from) / (24 * time.Hour))
	return from.Round(24*time.Hour).AddDate(0, 0, k)
}

func (r *run) add(b Break) {
	r.mu.Lock()
	defer r.mu.Unlock()
	b.ID = b.digest() // of the values as read: a break keeps its id
	r.rep.Breaks = append(r.rep.Breaks, b.masked())
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
		// In key order: a run reads the records in the same order every
		// time (a simulation replays its seed).
		for _, id := range slices.Sorted(maps.Keys(byCharge)) {
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

// unknownKeys reports the postings under keys no charge of ours has.
func (r *run) unknownKeys(id string, cp chargePostings) {
	b := cp.fill(Break{ChargeID: id, Kind: UnknownPosting})
	if len(b.Posted) == 0 {
		return
	}
	b.Detail = "posting(s) under a bank key that is no charge's of ours (a charge id starts with a letter or a digit, and a generation suffix is ~2 or more): the collector never sent it; no record was read"
	b.Action = "ask the bank who sent the debit; have it refunded if it is not ours"
	r.add(b)
}

// judge is one charge's postings against its record.
func (r *run) judge(ctx context.Context, id string, cp chargePostings) error {
	rec, err := r.opts.Store.Get(ctx, id, r.opts.Now)
	found := err == nil
	if err != nil && !errors.Is(err, driver.ErrNotFound) {
		return fmt.Errorf("record %s: %w", id, err)
	}
	b := Break{ChargeID: id, key: id}
	if found {
		b.State, b.Status, b.Generation = string(rec.State), rec.Status, max(rec.Generation, 1)
		b.UpdatedAt = rec.UpdatedAt.UTC().Format(time.RFC3339)
		if rec.State == driver.StateDone {
			b.Reference = charge.ReferenceOf(rec.Status, rec.Detail)
		}
	}
	var posted, partial, earlier []statement.Posting
	for _, kp := range cp.sorted() {
		st, pa, ea := kp.pair(b.Reference)
		posted = append(posted, st...)
		partial = append(partial, pa...)
		earlier = append(earlier, ea...)
	}
	standing := len(posted)
	if standing == 1 {
		b.judged = posted[0]
	}
	current := charge.BankKey(id, max(rec.Generation, 1))
	if k, ok := collectedKey(rec); ok {
		// Collected by reconciliation: the record's posting is the one it
		// collected (a record collected before collect wrote the posted
		// generation is DONE at a later one), and a posting under any
		// other key is a second debit.
		current = k
	}
	switch {
	case !found && standing == 0:
		if len(partial)+len(earlier) > 0 {
			b.Kind, b.Detail = UnknownPosting, "a reversal under a key that matches no record (past its retention, or never ours)"
			b.Action = "ask the bank which debit it reverses"
			r.add(cp.fill(b))
		}
		return nil
	case !found:
		b.Kind = UnknownPosting
		b.Detail = fmt.Sprintf("%d posting(s) under a key that matches no record: a charge the collector never saw (or one past its retention)", standing)
		b.Action = "ask the bank who sent the debit; have it refunded if it is not ours"
		r.add(cp.fill(b))
		return nil
	case len(partial) > 0:
		b.Kind = AmountMismatch
		b.Detail = fmt.Sprintf("a reversal of %s stands beside %d posting(s) of another amount under its key (a partial reversal): the customer paid another amount than the charge's",
			partial[0].Amount, standing)
		b.Action = "ask the bank what the customer was charged in the end; have it corrected"
		r.add(cp.fill(b))
		return nil
	case standing >= 2:
		b.Kind = PostedTwice
		b.Detail = fmt.Sprintf("%d postings stand for one charge (keys %s); the record is %s", standing, strings.Join(keysOf(cp), ", "), stateText(rec))
		b.Action = "have the bank refund every posting but one (their references are listed)"
		if rec.State != driver.StateDone {
			// The record is still open to a debit: resolving records one
			// posting as collected — the first that is the charge's — so
			// that none follows; the others are refunded.
			keep, unverified, found, err := r.keepable(rec, posted)
			if err != nil {
				return err
			}
			b.open, b.collectable = true, found && r.collectable(rec)
			if found {
				b.judged, b.Unverified = keep, unverified
				b.Action = fmt.Sprintf("the record is %s: resolve records the posting under %s as collected (DONE: never debited again), then have the bank refund the other(s)", rec.State, keep.BankKey)
			} else {
				b.Action += fmt.Sprintf("; none of them is the charge's amount and account, and the record is %s: once the bank has refunded them, resolve --refunded", rec.State)
			}
		}
		r.add(cp.fill(b))
		return nil
	case standing == 0 && rec.State != driver.StateDone:
		return nil // reversed, and never recorded as collected
	case standing == 0 && len(earlier) > 0 && !reversesRecorded(earlier, b.Reference):
		// The reversal of another posting than the one recorded (a
		// duplicate refunded, as a posted_twice break advised): nothing
		// is owed either way.
		r.mu.Lock()
		r.rep.Notes = append(r.rep.Notes, fmt.Sprintf("%s: the bank reversed a posting of an earlier statement (reference %s), not the one recorded (%s): a refunded duplicate; nothing to do if an earlier report had it posted_twice (else the reversal may carry a reference of its own: reconcile the two days' statements together, --statement each, to pair it)",
			ShowKey(id, earlier[0].Account), clip(charge.ShowRef(earlier[0].Reference, earlier[0].Account)), clip(charge.ShowRef(b.Reference))))
		r.mu.Unlock()
		return nil
	case standing == 0:
		b.Kind = RecordedNotPosted
		b.Detail = fmt.Sprintf("recorded %s but the bank reversed the posting recorded (reference %s): the money is back with the customer", rec.Status, charge.ShowRef(b.Reference))
		b.Action = "ask the bank why it reversed the debit; the record stays DONE (a charge id is never debited twice), so if the fee is still owed the billing system raises it again under a new charge id"
		if rt, ok := returned(cp); ok {
			b.Detail = fmt.Sprintf("recorded %s but the debit was returned, reason %s (reference %s): the money is back with the customer",
				rec.Status, clip(statement.ReturnReasonText(charge.MaskText(rt.ReturnReason, rt.Account))), charge.ShowRef(b.Reference))
			b.Action = "the debit came back (" + returnAction(rt.ReturnReason) + "); the record stays DONE (a charge id is never debited twice), so if the fee is still owed the billing system raises it again under a new charge id"
		}
		r.add(cp.fill(b))
		return nil
	}
	p := posted[0]
	if p.BankKey != current {
		// Checked against the charge as any posting is: an amount that is
		// not the charge's is never collected as if it were.
		ok, checked, err := r.verify(rec, p)
		if err != nil {
			return err
		}
		_, gen := SplitBankKey(p.BankKey)
		switch {
		case rec.State == driver.StateDone && !ownReversed(cp, current):
			// The record's own posting stands (in an earlier statement):
			// any other posting is a second debit, whatever its amount.
			b.Kind = PostedTwice
			b.Detail = fmt.Sprintf("the record is DONE with its posting under key %s (reference %s); the bank posted key %s too: a second debit", current, charge.ShowRef(b.Reference), p.BankKey)
			b.Action = "have the bank refund the posting under " + p.BankKey + " (the record's own stands)"
			r.add(cp.fill(b))
			return nil
		case rec.State == driver.StateDone:
			// The record's own posting is reversed in this statement and
			// another key's stands: the charge is paid once, under
			// another key than recorded. Nothing to refund.
			b.Kind = RecordedNotPosted
			b.Detail = fmt.Sprintf("the bank reversed the record's posting (key %s, reference %s) and a posting under key %s stands: the charge is paid once, under another key than recorded",
				current, charge.ShowRef(b.Reference), p.BankKey)
			b.Action = "nothing to refund (one posting stands); check the amount with the bank, then resolve --reason to close it"
			r.add(cp.fill(b))
			return nil
		case checked && !ok:
			b.Kind = AmountMismatch
			b.Detail = fmt.Sprintf("the bank posted %s to %s under key %s; that is not the charge's amount, currency or account (%s); the record is %s",
				p.Amount, charge.MaskAccount(p.Account), p.BankKey, differs(rec), stateText(rec))
			b.Action = "compare with the billing system's charge; have the bank correct the posting (refund and post again, or adjust)"
			r.openMoney(&b, rec, p)
			if rec.State == driver.StateWaiting && gen >= 1 && gen < max(rec.Generation, 1) {
				// A generation the bank declined, booked late of another
				// amount, while the schedule waits to debit the next: the
				// customer was debited under our key, and the bank's
				// correction (an adjustment) keeps the money under it.
				// Resolve records it as collected, so that the schedule
				// does not debit again on top; the amount stays a break
				// (the DONE record's amount_mismatch) until the bank's
				// correction matches the charge.
				b.mismatch, b.collectable, b.judged = false, true, p
				b.Action = fmt.Sprintf("the record is WAITING: its next attempt (generation %d, on or after %s) debits the customer again on top of this posting. "+
					"resolve records the posting as collected (DONE, the schedule ends; the amount stays a break until the bank corrects it to the charge's), then have the bank adjust it; "+
					"only if the bank refunds it instead, resolve --refunded (the schedule goes on)",
					max(rec.Generation, 1), rec.LeaseUntil.UTC().Format(time.RFC3339))
			}
			r.add(cp.fill(b))
			return nil
		case gen < 1 || gen >= max(rec.Generation, 1):
			b.Kind = UnknownPosting
			b.Detail = fmt.Sprintf("the bank posted key %s, a generation the collector never presented (the record is at generation %d and %s): not a declined debit of ours booked late",
				p.BankKey, max(rec.Generation, 1), stateText(rec))
			b.Action = "ask the bank who sent the debit; have it refunded if it is not ours"
			r.add(cp.fill(b))
			return nil
		}
		b.Unverified = !checked
	}
	switch {
	case p.BankKey != current:
		b.Kind = FailedButPosted
		// A WAITING record (a retry scheduled after the decline) debits
		// again at its next attempt unless it is collected now.
		b.collectable = r.collectable(rec)
		_, gen := SplitBankKey(p.BankKey)
		b.Detail = fmt.Sprintf("the bank posted generation %d (key %s), which it had declined; the record is at generation %d and %s", gen, p.BankKey, max(rec.Generation, 1), stateText(rec))
		switch {
		case b.collectable:
			b.Action = "the money moved under the declined key: resolve records it as collected (DONE at the generation posted, never debited again); if the bank refunds it instead, resolve --refunded"
		case rec.State == driver.StateInProgress:
			b.Action = fmt.Sprintf("a delivery holds the record under a live lease and is debiting generation %d now: resolve refuses until it is done; run reconcile again then (a second posting shows as posted_twice: have one refunded); if the bank refunds this posting, resolve --refunded",
				max(rec.Generation, 1))
		default:
			b.Action = fmt.Sprintf("the record is %s under generation %d: if that generation was debited too, have the bank refund one posting; once the bank refunds this one, resolve --refunded", rec.State, max(rec.Generation, 1))
		}
		if rec.State == driver.StateWaiting {
			b.Action = fmt.Sprintf("the money moved under the declined key, and the record is WAITING: its next attempt (generation %d, on or after %s) debits the customer again. resolve records the posting as collected (DONE, the schedule ends, never debited again); only if the bank refunds it, resolve --refunded (the schedule goes on)",
				max(rec.Generation, 1), rec.LeaseUntil.UTC().Format(time.RFC3339))
		}
		r.add(cp.fill(b))
		return nil
	case rec.State == driver.StateInProgress && rec.LeaseLive(r.opts.Now.Add(-r.opts.SkewMargin)):
		r.mu.Lock()
		r.rep.InFlight++
		r.mu.Unlock()
		return nil
	}
	ok, checked, err := r.verify(rec, p)
	if err != nil {
		return err
	}
	if checked && !ok {
		b.Kind = AmountMismatch
		b.Detail = fmt.Sprintf("the bank posted %s to %s; that is not the charge's amount, currency or account (%s); the record is %s",
			p.Amount, charge.MaskAccount(p.Account), differs(rec), stateText(rec))
		b.Action = "compare with the billing system's charge; have the bank correct the posting (refund and post again, or adjust)"
		r.openMoney(&b, rec, p)
		r.add(cp.fill(b))
		return nil
	}
	if rec.State == driver.StateWaiting {
		// A waiting record has not presented its generation yet (it
		// waits to): a posting under it is none of the collector's.
		b.Kind = UnknownPosting
		b.Detail = fmt.Sprintf("the bank posted key %s, which the collector has not presented yet (the record waits for its attempt under it: %s)", p.BankKey, stateText(rec))
		b.Action = "ask the bank who sent the debit; have it refunded if it is not ours"
		r.add(cp.fill(b))
		return nil
	}
	if unpresented(rec) {
		// Reopened into this generation, and no delivery has claimed it
		// since: the collector never sent the key. Adopting the posting
		// would close the charge on a debit nobody of ours made.
		b.Kind = UnknownPosting
		b.Detail = fmt.Sprintf("the bank posted key %s, a generation a reopen made (%s) and no delivery has presented yet (the record is %s, never claimed since): not a debit of ours",
			p.BankKey, rec.ReopenedAt.UTC().Format(time.RFC3339), stateText(rec))
		b.Action = "ask the bank who sent the debit; have it refunded if it is not ours (the record's next delivery debits the charge under this key: hold it back until the bank answers)"
		r.add(cp.fill(b))
		return nil
	}
	switch rec.State {
	case driver.StateFailed:
		b.Kind = FailedButPosted
		b.collectable = true
		b.Unverified = !checked
		b.Detail = fmt.Sprintf("recorded FAILED (%s) but the bank posted it", charge.Clip(rec.Detail, 160))
		b.Action = "the money moved: resolve records it as collected (DONE, so it is never debited again); if the bank refunds it instead, resolve --refunded"
		r.add(cp.fill(b))
	case driver.StateInProgress:
		b.Kind = PostedNotRecorded
		b.collectable = r.collectable(rec)
		how := "its account, amount and currency checked against the charge"
		b.Unverified = !checked
		if !checked {
			how = "NOT checked against the charge (a record written before summaries, posted without our narrative or under a fingerprint key not given): check the amount by hand, then resolve --unverified"
		}
		b.Detail = fmt.Sprintf("the bank posted it (reference %s, %s) and the record is IN_PROGRESS with its lease passed (attempt %d): no consumer finished it", clip(charge.ShowRef(p.Reference, p.Account)), how, rec.Attempt)
		b.Action = fmt.Sprintf("adopt the posting: chargerecovery reconcile resolve %s (records DONE with the bank's reference and keeps the notice for renotify; no debit)", id)
		r.add(cp.fill(b))
	default: // DONE, posted once under its own key
		r.mu.Lock()
		r.rep.Matched++
		if !checked {
			r.rep.Unverified++
			r.rep.KeyOnly = keepFirst(r.rep.KeyOnly, ShowKey(id, p.Account), MaxKeyOnly)
		}
		r.mu.Unlock()
	}
	return nil
}

// unpresented reports whether rec's generation is one a reopen moved it
// to (Guard.Reopen with a new generation: the history's last line is the
// reopen's, naming the generation before) that no delivery has presented
// yet: IN_PROGRESS as the reopen left it, its lease never taken since (a
// claim leases it past the reopen; the reopen leaves it passed).
func unpresented(rec driver.Record) bool {
	gen := max(rec.Generation, 1)
	if rec.State != driver.StateInProgress || gen < 2 || rec.ReopenedAt.IsZero() || len(rec.History) == 0 {
		return false
	}
	last := rec.History[len(rec.History)-1]
	return strings.HasPrefix(last, "generation "+strconv.Itoa(gen-1)+": ") && strings.Contains(last, "; reopened ") &&
		!rec.LeaseUntil.After(rec.ReopenedAt.Add(time.Millisecond)) // a store's clock rounding
}

// collectable reports whether rec can be recorded as collected now (one
// driver.Collector write): FAILED, WAITING, or IN_PROGRESS with its lease
// passed by the skew margin (no delivery holds it).
func (r *run) collectable(rec driver.Record) bool {
	switch rec.State {
	case driver.StateFailed, driver.StateWaiting:
		return true
	case driver.StateInProgress:
		return !rec.LeaseLive(r.opts.Now.Add(-r.opts.SkewMargin))
	}
	return false
}

// recordedKey is the bank key a record's result is under: the one a
// reconciliation collected it under (its adoption line), else its
// generation's.
func recordedKey(rec driver.Record) string {
	if k, ok := collectedKey(rec); ok {
		return k
	}
	return charge.BankKey(rec.Key, max(rec.Generation, 1))
}

// collectedKey is the bank key a DONE record's adoption line names (the
// posting reconciliation recorded as collected), and whether it has one.
// A collection writes the posted generation as the record's, so the key is
// the generation's; collections made before it did left the record at a
// later generation, and the line is what says which posting it holds.
func collectedKey(rec driver.Record) (string, bool) {
	if rec.State != driver.StateDone {
		return "", false
	}
	for _, line := range slices.Backward(rec.History) {
		if !strings.HasPrefix(line, AdoptedLine) {
			continue
		}
		_, rest, ok := strings.Cut(line, ": posted ")
		if !ok {
			continue
		}
		if _, rest, ok = strings.Cut(rest, " under "); !ok {
			continue
		}
		if key, _, ok := strings.Cut(rest, ", booked "); ok && key != "" {
			return key, true
		}
	}
	return "", false
}

// returned is the first return among cp's reversals.
func returned(cp chargePostings) (statement.Posting, bool) {
	for _, kp := range cp {
		for _, rv := range kp.reversed {
			if rv.Return {
				return rv, true
			}
		}
	}
	return statement.Posting{}, false
}

// returnAction is what to do about a return of reason code.
func returnAction(code string) string {
	switch code {
	case "AC01", "AC04", "AC06", "AC13", "MD07", "RR01":
		return "the account cannot be debited: billing updates the customer's account before any new charge"
	case "AM04":
		return "insufficient funds: billing decides whether to raise it again"
	case "MD01", "MD02", "MD06":
		return "the customer disputes the debit or its mandate: billing settles it with the customer"
	}
	return "ask the bank about the reason if it is not clear"
}

// reversesRecorded reports whether one of the reversals undoes the posting
// the record holds the reference of (or says no reference: then it may).
func reversesRecorded(reversals []statement.Posting, recorded string) bool {
	for _, rv := range reversals {
		// A collection keeps the reference masked as it is shown (an
		// account number in it masked): the reversal's is compared both ways.
		if rv.Reference == "" || recorded == "" || rv.Reference == recorded || charge.MaskText(rv.Reference, rv.Account) == recorded || charge.ShowRef(rv.Reference, rv.Account) == recorded {
			return true
		}
	}
	return false
}

func clip(s string) string { return charge.Clip(s, 80) }

// verify checks p against rec: the amount, currency and account's last
// four the record keeps (charge.RecordSummary), and, where p carries our
// narrative, the record's keyed fingerprint as a second check. ok when
// every check that can be made agrees; checked false when none can (a
// record written before summaries, with no kept notice, and no narrative or
// no fingerprint key: matched by key only).
func (r *run) verify(rec driver.Record, p statement.Posting) (ok, checked bool, err error) {
	sum, hasSum := charge.RecordSummary(rec)
	ok = !hasSum || (p.Amount == sum.Amount && sum.SameAccount(p.Account))
	typ, due, found := NarrativeParts(p.Narrative)
	if !found {
		return ok, hasSum, nil
	}
	parts := []string{p.Account, strconv.FormatInt(p.Amount.Minor, 10), string(p.Amount.Currency), string(typ), due}
	fpOK, err := r.opts.Fingerprints.Match(rec.Fingerprint, parts...)
	if errors.Is(err, idempotency.ErrUnknownFingerprintKey) {
		if !hasSum {
			r.mu.Lock()
			r.unknownKey++
			r.mu.Unlock()
		}
		return ok, hasSum, nil
	}
	if err != nil {
		return false, false, err
	}
	return ok && fpOK, true, nil
}

// differs says, for an amount_mismatch, what the posting was checked
// against: the record's summary, else its fingerprint.
func differs(rec driver.Record) string {
	if s, ok := charge.RecordSummary(rec); ok {
		if acct := s.Account(); acct != "" {
			return fmt.Sprintf("the charge is %s to %s", s.Amount, acct)
		}
		return fmt.Sprintf("the charge is %s", s.Amount)
	}
	return "the record's fingerprint does not match"
}

// finished finds the records DONE in the period whose key has no posting
// standing in the statement.
func (r *run) finished(ctx context.Context, byCharge map[string]chargePostings) error {
	// Walked up to now, not to the period's end: a record amended since
	// (a notice sent again, a posting adopted) has a later UpdatedAt than
	// its debit, which is the time that counts (DebitTime).
	req := driver.WalkRequest{State: driver.StateDone, From: r.opts.Period.From, To: maxTime(r.opts.Period.To, r.opts.Now.Add(time.Millisecond)), Now: r.opts.Now}
	check := func(rec driver.Record) error {
		if !r.opts.wants(rec.Key) {
			return nil
		}
		if rec.Status != string(charge.Debited) && rec.Status != string(charge.DebitedNotificationFailed) {
			return nil // not a charge's debit (a library user's record sharing the store)
		}
		if _, judged := byCharge[rec.Key]; judged {
			return nil // its postings were judged against it
		}
		at := DebitTime(rec)
		if at.Before(r.opts.Period.From) || !at.Before(r.opts.Period.To) {
			return nil // debited in another period
		}
		if d := r.bankDay(at); !r.days[d] {
			// No entry of ours at all on that day: the statement lacks
			// the day (or was read from the wrong side), not every
			// charge of it unposted. A warning, not N breaks.
			r.mu.Lock()
			r.empty[d]++
			r.mu.Unlock()
			return nil
		}
		r.add(Break{Kind: RecordedNotPosted, ChargeID: rec.Key, key: rec.Key, BankKeys: []string{recordedKey(rec)},
			Account: noticeAccount(rec), State: string(rec.State), Status: rec.Status, Generation: max(rec.Generation, 1),
			Reference: charge.ReferenceOf(rec.Status, rec.Detail), UpdatedAt: rec.UpdatedAt.UTC().Format(time.RFC3339),
			Detail: fmt.Sprintf("recorded %s (bank reference %s) in the period, and the statement has no posting under its key",
				rec.Status, charge.ShowRef(charge.ReferenceOf(rec.Status, rec.Detail))),
			Action: "check the next day's statement (a posting booked after the cut-off); else ask the bank about the reference; reconcile resolve --reason once settled"})
		return nil
	}
	if r.opts.ChargeID != "" && !masked(r.opts.ChargeID) {
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
		res, err := store.Get(ctx, b.resolutionKey(), now)
		switch {
		case err == nil && res.State != driver.StateDone:
			// A resolve under way, or one that died before it wrote its
			// reason: not resolved.
			kept = append(kept, b)
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
	// Not the status: a missed notice sent later (DEBITED_NOTIFICATION_FAILED
	// → DEBITED) is the same debit, the same break.
	fmt.Fprintf(h, "%s\x00%s\x00%s\x00%d\x00%s\x00", b.Kind, b.ChargeID, b.State, b.Generation, b.Reference)
	for _, p := range b.Posted {
		fmt.Fprintf(h, "%s\x00%d\x00%s\x00%s\x00%s\x00%t\x00", p.BankKey, p.Minor, p.Currency, p.BookingDate, p.Reference, p.Reversal)
		if p.Return {
			fmt.Fprintf(h, "return\x00%s\x00", p.ReturnReason)
		}
	}
	// The full accounts and narratives (never shown), and whether the
	// posting could be checked: another customer's posting under the same
	// key, amount, day and reference is another break.
	fmt.Fprintf(h, "%s\x00%t\x00", b.facts, b.Unverified)
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

// ChargeOf is the charge id of a bank key, and whether the key is one the
// collector sends: a charge id (it starts with an ASCII letter or digit,
// never with driver.InternalKeyPrefix, and holds no control character),
// alone or with a generation suffix of 2 or more. For any other key the
// id is the key without what follows its last generation separator.
func ChargeOf(key string) (string, bool) {
	id, gen := SplitBankKey(key)
	return id, gen > 0 && validID(id)
}

func validID(id string) bool {
	if id == "" || !utf8.ValidString(id) {
		return false
	}
	c := id[0]
	if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9') {
		return false
	}
	return strings.IndexFunc(id, unicode.IsControl) < 0
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
	// A bank's reference is text from outside, and may hold the account
	// ("UPI/<account>/…"): masked as any such text is.
	return Posted{BankKey: p.BankKey, Account: charge.MaskAccount(p.Account), Minor: p.Amount.Minor, Currency: string(p.Amount.Currency),
		Amount: p.Amount.String(), BookingDate: p.BookingDate.Format(time.DateOnly), Reference: charge.ShowRef(p.Reference, p.Account),
		Reversal: p.Reversal, Return: p.Return, ReturnReason: charge.MaskText(p.ReturnReason, p.Account), Where: charge.MaskText(p.Where, p.Account)}
}

func keysOf(cp chargePostings) []string {
	var ks []string
	for _, kp := range cp.sorted() {
		ks = append(ks, kp.key)
	}
	return ks
}

func stateText(rec driver.Record) string {
	if rec.Status != "" {
		return string(rec.State) + " " + rec.Status
	}
	return string(rec.State)
}

// DebitTime is when a DONE record's debit was recorded: its last write,
// unless that was an operator's amendment — a posting adopted (the day it
// was booked, from the history line), a notice sent again (the debit's
// time the line names, else the first claim's: a renotify line written
// before it named one).
func DebitTime(rec driver.Record) time.Time {
	if len(rec.History) == 0 {
		return rec.UpdatedAt
	}
	last := rec.History[len(rec.History)-1]
	switch {
	case strings.HasPrefix(last, AdoptedLine):
		if _, rest, ok := strings.Cut(last, ", booked "); ok && len(rest) >= len(time.DateOnly) {
			if d, err := time.Parse(time.DateOnly, rest[:len(time.DateOnly)]); err == nil {
				return d
			}
		}
		return rec.CreatedAt
	case strings.HasPrefix(last, "renotified "):
		if _, rest, ok := strings.Cut(last, "; debited "); ok {
			if end := strings.IndexAny(rest, ";, "); end > 0 {
				rest = rest[:end]
			}
			if t, err := time.Parse(time.RFC3339, rest); err == nil {
				return t
			}
		}
		return rec.CreatedAt
	}
	return rec.UpdatedAt
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// noticeAccount is the masked account a DONE record's kept notice names.
func noticeAccount(rec driver.Record) string {
	if n, ok := charge.PendingNotice(rec.Status, rec.Detail); ok {
		return n.Account
	}
	return ""
}

// ownReversed reports whether the statement reverses a posting under the
// record's own key (current).
func ownReversed(cp chargePostings, current string) bool {
	kp := cp.of(current)
	return kp != nil && len(kp.reversed) > 0
}

// openMoney marks b, a break whose posting p stands while rec is still
// open to a debit (not DONE), as one that resolve closes by collecting p,
// so that the schedule or a reopen does not debit again on top of it.
func (r *run) openMoney(b *Break, rec driver.Record, p statement.Posting) {
	if rec.State == driver.StateDone {
		return
	}
	// Never collected as the charge's (it is not): resolve refuses it
	// until the bank has refunded it (--refunded) or corrected it (the
	// next statement's posting then matches and is collected).
	b.open, b.mismatch = true, true
	b.Action += fmt.Sprintf("; the record is %s and still debits the charge at its next attempt: once the bank refunds this posting, resolve --refunded; if the bank corrects it to the charge's amount instead, the next statement's posting is collected", rec.State)
}

// keepable is the posting of posted to record as collected: the first
// that is the charge's (checked), else the first that cannot be checked
// (unverified); found is false when every one is of another amount or
// account.
func (r *run) keepable(rec driver.Record, posted []statement.Posting) (keep statement.Posting, unverified, found bool, err error) {
	for _, p := range posted {
		ok, checked, err := r.verify(rec, p)
		if err != nil {
			return p, false, false, err
		}
		if checked && ok {
			return p, false, true, nil
		}
		if !checked && !found {
			keep, unverified, found = p, true, true
		}
	}
	return keep, unverified, found, nil
}
