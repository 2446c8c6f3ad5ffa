package approval

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/app/reconcile"
	"github.com/finedge/idempotent-consumer/app/reconcile/statement"
	"github.com/finedge/idempotent-consumer/app/service/operate"
	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
	"github.com/finedge/idempotent-consumer/queue"
)

// FormatTotals is totals as a person reads them: "INR 1,250.00 (50)".
func FormatTotals(ts []Total) string {
	var w []string
	for _, t := range ts {
		if t.Currency == "" {
			w = append(w, fmt.Sprintf("%d without an amount", t.Count))
			continue
		}
		w = append(w, fmt.Sprintf("%s (%d)", charge.Money{Minor: t.Minor, Currency: charge.Currency(t.Currency)}, t.Count))
	}
	if len(w) == 0 {
		return "no amount"
	}
	return strings.Join(w, ", ")
}

// Backend is what proposals choose from and act on.
type Backend struct {
	Queue queue.Operator
	Store driver.Store
	// Retention is the records' retention (as serve's): a redrive holds
	// back entries older than it less a day, unless Force.
	Retention time.Duration
	// Renotifier sends missed notices (nil: Renotify proposals refused).
	Renotifier *operate.Renotifier
	// Guard writes a Reconcile proposal's adoption and resolution (the
	// store's, with serve's lease, retention and skew margin); nil: one is
	// made with Retention and the default lease and skew margin.
	Guard *idempotency.Guard
	// Fingerprints checks a posting's amount and account against the
	// charge (serve's fingerprint keys), and SkewMargin is serve's
	// (Reconcile).
	Fingerprints *idempotency.Fingerprinter
	SkewMargin   time.Duration
	// Now is the clock of the actions (the reopens' and redrives' times,
	// the records read); nil: time.Now. A simulator drives it.
	Now func() time.Time
}

func (be Backend) now() time.Time {
	if be.Now != nil {
		return be.Now()
	}
	return time.Now()
}

// guardClock is a Backend's clock as a Guard's.
type guardClock func() time.Time

func (c guardClock) Now() time.Time { return c() }

// Select chooses the targets of spec at now: the DLQ entries it names
// (Redrive, Reopen: dead-lettered before now, less OlderThan), or the
// records with a missed notice (Renotify). What the listing could not see
// is an error, never a quietly short proposal; named charges that match
// nothing are an error naming them.
func (be Backend) Select(ctx context.Context, spec Spec, now time.Time) ([]Target, error) {
	if err := spec.Check(); err != nil {
		return nil, err
	}
	if spec.Kind == Renotify {
		return be.selectNotices(ctx, spec, now)
	}
	if spec.Kind == Reconcile {
		return be.selectBreak(ctx, spec, now)
	}
	codes, err := operate.ParseCodes(strings.Join(spec.Codes, ","))
	if err != nil {
		return nil, err
	}
	if spec.Kind == Reopen && len(codes) == 0 {
		codes = []queue.Code{"debit_failed"} // a FAILED charge's entry
	}
	o := operate.ListOptions{Now: now, Codes: codes, Before: now.Add(-spec.OlderThan), Match: operate.ChargeMatch(spec.ChargeIDs)}
	l, err := operate.List(ctx, be.Queue, o)
	if err != nil {
		return nil, err
	}
	if note := l.Incomplete(); note != "" {
		return nil, fmt.Errorf("no proposal made: %s", note)
	}
	var out []Target
	seen := map[string]bool{}
	for _, e := range l.Entries {
		t := Target{ChargeID: e.ChargeID, DLQID: e.ID, Account: e.Account, Code: e.Code}
		t.Minor, t.Currency = e.Minor, e.Currency
		seen[e.ChargeID] = true
		out = append(out, t)
	}
	if missing := unmatched(spec.ChargeIDs, seen); len(missing) > 0 {
		return nil, fmt.Errorf("no proposal made: no DLQ entry%s for %s", codeNote(codes), strings.Join(missing, ", "))
	}
	if spec.Kind == Reopen || len(spec.DeclineCodes) > 0 {
		return be.readRecords(ctx, spec, out, now)
	}
	return out, nil
}

// readRecords reads each target's record: its decline code (and whether
// it is a hard one) for every target, the targets kept to those declined
// with one of spec.DeclineCodes (if given), and for a Reopen the FAILED
// record frozen (its token, generation and state): the run reopens only
// that very record. A charge without a FAILED record is not proposable
// for a reopen (one the decline-code filter drops is not a target).
func (be Backend) readRecords(ctx context.Context, spec Spec, ts []Target, now time.Time) ([]Target, error) {
	want := map[string]bool{}
	for _, c := range spec.DeclineCodes {
		want[charge.NormalDeclineCode(c)] = true
	}
	var wrong, other []string
	out := ts[:0:0]
	for _, t := range ts {
		if t.ChargeID == "" {
			if len(want) == 0 {
				wrong = append(wrong, t.Name()+" (no charge id)")
			}
			continue
		}
		rec, err := be.Store.Get(ctx, t.ChargeID, now)
		if err != nil && !errors.Is(err, driver.ErrNotFound) {
			return nil, fmt.Errorf("no proposal made: reading %s's record: %w", t.ChargeID, err)
		}
		if err == nil && rec.State == driver.StateFailed {
			t.DeclineCode = charge.DeclineCode(rec.Detail)
			_, t.HardDecline = charge.HardDecline(t.DeclineCode)
		}
		if len(want) > 0 && !want[charge.NormalDeclineCode(t.DeclineCode)] {
			other = append(other, fmt.Sprintf("%s (%s)", t.ChargeID, cmp.Or(t.DeclineCode, "not declined")))
			continue
		}
		if spec.Kind == Reopen {
			switch {
			case errors.Is(err, driver.ErrNotFound):
				wrong = append(wrong, t.ChargeID+" (no record)")
				continue
			case rec.State != driver.StateFailed || rec.Token == "":
				wrong = append(wrong, fmt.Sprintf("%s (%s, generation %d)", t.ChargeID, rec.State, max(rec.Generation, 1)))
				continue
			}
			t.RecordToken, t.RecordGeneration, t.RecordState = rec.Token, max(rec.Generation, 1), string(rec.State)
		}
		out = append(out, t)
	}
	if len(wrong) > 0 {
		return nil, fmt.Errorf("no proposal made: only a charge with a FAILED record is reopened, not %s", strings.Join(wrong, ", "))
	}
	if len(spec.ChargeIDs) > 0 && len(other) > 0 {
		// A charge named by id that the filter drops is said, not dropped
		// quietly.
		return nil, fmt.Errorf("no proposal made: not declined %s: %s", strings.Join(spec.DeclineCodes, " or "), strings.Join(other, ", "))
	}
	return out, nil
}

// ReopenToken is the token the run of proposal proposalID writes when it
// reopens target t's record: derived from the proposal, the charge and the
// token frozen at the proposal, so that a resumed run recognises its own
// reopen (and nothing else) and one approval reopens a record at most
// once.
func ReopenToken(proposalID string, t Target) string {
	h := sha256.New()
	for _, s := range []string{"idempotent-consumer/approval/reopen/v1", proposalID, t.ChargeID, t.RecordToken} {
		fmt.Fprintf(h, "%d:%s;", len(s), s)
	}
	return hex.EncodeToString(h.Sum(nil))
}

func codeNote(codes []queue.Code) string {
	if len(codes) == 0 {
		return ""
	}
	var w []string
	for _, c := range codes {
		w = append(w, string(c))
	}
	return " with reason " + strings.Join(w, ", ")
}

func unmatched(ids []string, seen map[string]bool) []string {
	var out []string
	for _, id := range ids {
		if !seen[id] {
			out = append(out, id)
		}
	}
	return out
}

func (be Backend) selectNotices(ctx context.Context, spec Spec, now time.Time) ([]Target, error) {
	recs, err := operate.Pending(ctx, be.Store, spec.ChargeIDs, len(spec.ChargeIDs) == 0, 100_000, now)
	if err != nil {
		return nil, err
	}
	var out []Target
	var wrong []string
	for _, rec := range recs {
		if rec.State != driver.StateDone || rec.Status != string(charge.DebitedNotificationFailed) {
			if rec.State == driver.StateAbsent {
				wrong = append(wrong, rec.Key+" (no record)")
			} else {
				wrong = append(wrong, fmt.Sprintf("%s (%s)", rec.Key, strings.TrimSpace(fmt.Sprintf("%s %s", rec.State, rec.Status))))
			}
			continue
		}
		t := Target{ChargeID: rec.Key, Code: rec.Status}
		if n, ok := charge.PendingNotice(rec.Status, rec.Detail); ok {
			t.Account, t.Minor, t.Currency = n.Account, n.Amount.Minor, string(n.Amount.Currency)
		}
		out = append(out, t)
	}
	if len(wrong) > 0 {
		return nil, fmt.Errorf("no proposal made: only DEBITED_NOTIFICATION_FAILED records are notified again, not %s", strings.Join(wrong, ", "))
	}
	return out, nil
}

// Execute acts on one batch.
func (be Backend) Execute(ctx context.Context, p Proposal, batch []Target, who Actor) map[string]Outcome {
	operator := who.Name + " (" + who.Via + ", " + p.ID + ")"
	switch p.Spec.Kind {
	case Redrive:
		return be.redrive(ctx, p, batch, p.Spec.Force)
	case Reopen:
		return be.reopen(ctx, p, batch, operator)
	case Renotify:
		return be.renotify(ctx, p, batch, operator)
	case Reconcile:
		return be.reconcile(ctx, p, batch, operator)
	}
	return nil
}

// redrive moves the batch's DLQ entries (by id, dead-lettered before the
// proposal was made) with the command line's hold-backs unless force.
func (be Backend) redrive(ctx context.Context, p Proposal, batch []Target, force bool) map[string]Outcome {
	want := map[string]Target{}
	for _, t := range batch {
		want[t.DLQID] = t
	}
	out := map[string]Outcome{}
	o := operate.RedriveAt(be.now(), be.Retention)
	o.Before = p.At.Add(time.Second) // what the proposal saw; nothing dead-lettered since
	o.Force = force
	o.Match = func(e queue.DLQEntry) bool { _, ok := want[e.ID]; return ok }
	o.Visit = func(e queue.DLQEntry, d queue.RedriveDecision) {
		t, ok := want[e.ID]
		if !ok {
			return
		}
		if d == queue.HoldBack {
			out[t.Key()] = Outcome{Result: "held back", Why: "a conflict or over the size limit: needs --force (or a purge)"}
		}
	}
	o.Moved = func(e queue.DLQEntry) {
		if t, ok := want[e.ID]; ok {
			out[t.Key()] = Outcome{Result: "moved"}
		}
	}
	rep, err := be.Queue.Redrive(ctx, o)
	for _, t := range batch {
		if _, ok := out[t.Key()]; ok {
			continue
		}
		switch {
		case err != nil:
			out[t.Key()] = Outcome{Result: "failed", Why: "the backend did not answer: " + charge.Clip(err.Error(), 200)}
		case rep.TooOld > 0:
			out[t.Key()] = Outcome{Result: "held back", Why: "older than the retention less a day, or gone: check it, then a proposal with --force"}
		default:
			out[t.Key()] = Outcome{Result: "failed", Why: "not on the DLQ any more (redriven, purged or expired meanwhile), or not seen by this pass"}
		}
	}
	return out
}

// reopen reopens each charge's FAILED record, the very one the proposal
// froze (its token and generation), then redrives its entry. The reopen
// writes ReopenToken: a run resumed after one that stopped (or died)
// between the reopen and saving its outcome finds the record still under
// that token and only redrives; a record under any other token (a
// delivery claimed it since, debited, declined…) is skipped, nothing
// written: one approval reopens a record at most once.
func (be Backend) reopen(ctx context.Context, p Proposal, batch []Target, operator string) map[string]Outcome {
	guard, err := idempotency.NewGuard(be.Store, idempotency.Options{Retention: be.Retention, Clock: guardClock(be.now)})
	out := map[string]Outcome{}
	if err != nil {
		for _, t := range batch {
			out[t.Key()] = Outcome{Result: "failed", Why: err.Error()}
		}
		return out
	}
	changed := func(rec driver.Record) Outcome {
		why := fmt.Sprintf("changed since the proposal (state %s, generation %d): not reopened", rec.State, max(rec.Generation, 1))
		if slices.ContainsFunc(rec.History, func(h string) bool { return strings.Contains(h, ", "+p.ID+")") }) {
			why += "; this proposal reopened it in a run that stopped before saving its outcome, and it was delivered since"
		}
		return Outcome{Result: "skipped", Why: why}
	}
	var toMove []Target
	resumed := map[string]bool{} // reopened by an earlier run of this proposal
	for _, t := range batch {
		if ctx.Err() != nil {
			break
		}
		if t.RecordToken == "" {
			out[t.Key()] = Outcome{Result: "skipped", Why: "proposed before a reopen proposal froze the record's token and generation: not acted on; propose it again"}
			continue
		}
		mine := ReopenToken(p.ID, t)
		rec, err := be.Store.Get(ctx, t.ChargeID, be.now())
		switch {
		case errors.Is(err, driver.ErrNotFound):
			out[t.Key()] = Outcome{Result: "skipped", Why: "no record any more (past its retention, or purged): not reopened"}
			continue
		case err != nil:
			out[t.Key()] = Outcome{Result: "failed", Why: charge.Clip(err.Error(), 300)}
			continue
		case rec.Token == mine && rec.State == driver.StateInProgress && !rec.LeaseUntil.After(be.now()):
			toMove = append(toMove, t) // reopened by an earlier run of this proposal that stopped before its outcome was saved
			resumed[t.Key()] = true
			continue
		case rec.Token != t.RecordToken || rec.State != driver.StateFailed || max(rec.Generation, 1) != max(t.RecordGeneration, 1):
			out[t.Key()] = changed(rec)
			continue
		}
		hard := false
		if code := charge.DeclineCode(rec.Detail); p.Spec.NewAttempt {
			why, isHard := charge.HardDecline(code)
			switch {
			case isHard && !p.representHard:
				out[t.Key()] = Outcome{Result: "held back", Why: fmt.Sprintf("a hard decline, %s (%s): never presented again under a new key (the four-eyes policy has no represent-hard-decline)", charge.Printable(code), why)}
				continue
			case isHard && (!t.HardDecline || charge.NormalDeclineCode(t.DeclineCode) != charge.NormalDeclineCode(code)):
				out[t.Key()] = Outcome{Result: "held back", Why: fmt.Sprintf("a hard decline, %s (%s), that the approver was not shown on the proposal: not presented again; propose it again", charge.Printable(code), why)}
				continue
			}
			hard = isHard
		}
		if hard {
			rec, err = operate.ReopenFencedHardDecline(ctx, guard, t.ChargeID, p.Spec.Reason, operator, t.RecordToken, mine)
		} else {
			rec, err = operate.ReopenFenced(ctx, guard, t.ChargeID, p.Spec.Reason, p.Spec.NewAttempt, operator, t.RecordToken, mine)
		}
		switch {
		case errors.Is(err, idempotency.ErrNotFailed):
			out[t.Key()] = changed(rec)
		case err != nil:
			out[t.Key()] = Outcome{Result: "failed", Why: charge.Clip(err.Error(), 300)}
		default:
			toMove = append(toMove, t)
		}
	}
	for k, o := range be.redrive(ctx, p, toMove, false) {
		// Said as it happened: a record this run found reopened by an
		// earlier run of the proposal is not "reopened" again by it.
		did := "reopened"
		if resumed[k] {
			did = "reopened by an earlier run of this proposal that stopped before saving its outcome"
		}
		switch {
		case o.Result == "moved" && resumed[k]:
			o.Result, o.Why = "reopened", did+"; its message redriven now"
		case o.Result == "moved":
			o.Result = "reopened"
		default:
			o.Why = did + ", but not redriven: " + o.Why
		}
		out[k] = o
	}
	return out
}

// renotify sends each missed notice again (claimed once, as the command
// line's renotify).
func (be Backend) renotify(ctx context.Context, p Proposal, batch []Target, operator string) map[string]Outcome {
	out := map[string]Outcome{}
	for _, t := range batch {
		if ctx.Err() != nil {
			break
		}
		if be.Renotifier == nil {
			out[t.Key()] = Outcome{Result: "failed", Why: "no notification channel here (--notify)"}
			continue
		}
		rec, err := be.Store.Get(ctx, t.ChargeID, be.now())
		if err != nil {
			out[t.Key()] = Outcome{Result: "failed", Why: charge.Clip(err.Error(), 300)}
			continue
		}
		r := be.Renotifier.One(ctx, rec, operator, p.Spec.Reason, false, be.now())
		res := r.Result
		if res != "sent" && res != "failed" {
			res = "skipped"
		}
		out[t.Key()] = Outcome{Result: res, Why: charge.Clip(charge.MaskText(r.Why), 300)}
	}
	return out
}

// statementOf is what a Reconcile spec reads, and how.
func (be Backend) statementOf(spec Spec, now time.Time) (reconcile.Options, reconcile.Postings) {
	o := reconcile.Options{Store: be.Store, Fingerprints: be.Fingerprints, Period: statement.Period{From: spec.From, To: spec.To},
		Now: now, SkewMargin: max(be.SkewMargin, 0), ChargeID: spec.ChargeIDs[0]}
	loc, err := spec.location()
	if err != nil {
		// Fails closed: a zone that cannot be loaded reads nothing.
		return o, func(func(statement.Posting) error) (statement.Period, error) { return statement.Period{}, err }
	}
	return o, reconcile.ReadFiles(spec.Statements, statement.Options{CollectionAccount: strings.TrimSpace(spec.CollectionAccount), Location: loc})
}

// selectBreak freezes the one open break of the charge a Reconcile spec
// names, as reconcile.Resolve would find it now (the reconciliation run
// for that charge alone; nothing written): its kind, id, bank keys and
// what was posted. Its errors say what Resolve's would.
func (be Backend) selectBreak(ctx context.Context, spec Spec, now time.Time) ([]Target, error) {
	id := spec.ChargeIDs[0]
	o, read := be.statementOf(spec, now)
	rep, err := reconcile.Run(ctx, o, read)
	if err != nil {
		return nil, err
	}
	var open []reconcile.Break
	for _, b := range rep.Breaks {
		if b.ChargeID == id && (spec.BreakKind == "" || b.Kind == spec.BreakKind) {
			open = append(open, b)
		}
	}
	switch {
	case len(open) == 0 && rep.Resolved > 0:
		return nil, fmt.Errorf("%w: %s's break is resolved already", reconcile.ErrNoBreak, id)
	case len(open) == 0 && spec.BreakKind != "":
		return nil, fmt.Errorf("%w: %s has no %s break in this statement", reconcile.ErrNoBreak, id, spec.BreakKind)
	case len(open) == 0:
		return nil, fmt.Errorf("%w: %s matches the statement", reconcile.ErrNoBreak, id)
	case len(open) > 1:
		var kinds []string
		for _, b := range open {
			kinds = append(kinds, string(b.Kind))
		}
		return nil, fmt.Errorf("%w: %s has %s: give --kind", reconcile.ErrAmbiguous, id, strings.Join(kinds, ", "))
	}
	b := open[0]
	if b.Collects(spec.Refunded) && b.Unverified && !spec.Unverified {
		return nil, fmt.Errorf("%w: %s's posting could not be checked against the charge (no narrative in the statement, or no fingerprint key given): check its amount and account by hand, then propose with --unverified", reconcile.ErrUnchecked, id)
	}
	t := Target{ChargeID: id, Account: b.Account, Code: string(b.Kind), BreakID: b.ID, BankKeys: b.BankKeys, Collects: b.Collects(spec.Refunded)}
	for _, p := range b.Posted {
		if p.Reversal {
			continue
		}
		if t.Currency == "" {
			t.Currency = p.Currency
		}
		if p.Currency == t.Currency {
			t.Minor += p.Minor
		}
		if t.Account == "" {
			t.Account = p.Account
		}
	}
	t.Account = charge.MaskAccount(t.Account)
	return []Target{t}, nil
}

// reconcile resolves the frozen break (reconcile.Resolve, as the command
// line's): only a break with the same id as the proposal froze; one that
// changed since (the record finished, another posting came) is held back,
// nothing written.
func (be Backend) reconcile(ctx context.Context, p Proposal, batch []Target, operator string) map[string]Outcome {
	out := map[string]Outcome{}
	guard := be.Guard
	if guard == nil {
		var err error
		if guard, err = idempotency.NewGuard(be.Store, idempotency.Options{Retention: be.Retention, Clock: guardClock(be.now)}); err != nil {
			for _, t := range batch {
				out[t.Key()] = Outcome{Result: "failed", Why: err.Error()}
			}
			return out
		}
	}
	for _, t := range batch {
		if ctx.Err() != nil {
			break
		}
		spec := p.Spec
		spec.ChargeIDs = []string{t.ChargeID}
		o, read := be.statementOf(spec, be.now())
		res, err := reconcile.Resolve(ctx, o, read, reconcile.ResolveRequest{ChargeID: t.ChargeID, Kind: reconcile.Kind(t.Code),
			Reason: p.Spec.Reason, Operator: operator, Guard: guard, BreakID: t.BreakID,
			Unverified: p.Spec.Unverified, NoticeSent: p.Spec.NoticeSent, Refunded: p.Spec.Refunded})
		switch {
		case res.Action == "adopted":
			o := Outcome{Result: "adopted"}
			if res.Record != nil {
				o.Why = "DONE " + res.Record.Status + " with the bank's reference " + charge.ReferenceOf(res.Record.Status, res.Record.Detail) + " (no debit)"
			}
			if err != nil {
				o.Why += "; " + charge.Clip(charge.MaskText(err.Error()), 200)
			}
			out[t.Key()] = o
		case err == nil:
			out[t.Key()] = Outcome{Result: "resolved", Why: "the " + string(res.Break.Kind) + " break is marked resolved"}
		case errors.Is(err, reconcile.ErrBreakChanged), errors.Is(err, reconcile.ErrNoBreak), errors.Is(err, reconcile.ErrAmbiguous),
			errors.Is(err, reconcile.ErrChanged), errors.Is(err, reconcile.ErrNotCollectable):
			out[t.Key()] = Outcome{Result: "held back", Why: "the break changed since it was proposed: " + charge.Clip(charge.MaskText(err.Error()), 250)}
		default:
			out[t.Key()] = Outcome{Result: "failed", Why: charge.Clip(charge.MaskText(err.Error()), 300)}
		}
	}
	return out
}
