package console

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"time"

	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/app/chargehandler"
	"github.com/finedge/idempotent-consumer/app/service/approval"
	"github.com/finedge/idempotent-consumer/app/service/operate"
	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
	"github.com/finedge/idempotent-consumer/queue"
)

// What a month-end operator needs per charge, on every page that lists
// charges (Records, Stuck, DLQ, a proposal's sample): the decline code or
// reason, the amount and currency, the masked account, the generation,
// what happens next and the action that does it.

// none is what a column shows for what the record does not keep.
const none = "—"

// nextStep is what happens next to a charge and the action that makes it
// happen: a link to the action's confirmation page (never a GET that
// moves money: the confirmation page posts, with the CSRF token).
type nextStep struct {
	Next string
	// Action and Href: the action's name and its confirmation page; ""
	// for none.
	Action, Href string
}

// summaryColumns are the amount and masked account a record keeps in
// clear (charge.RecordSummary), "—" for a record that keeps neither.
func summaryColumns(rec driver.Record) (amount, account string) {
	s, ok := charge.RecordSummary(rec)
	if !ok {
		return none, none
	}
	return s.Amount.String(), cmpOr(s.Account(), none)
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// declineOrReason is a record's decline code (a FAILED record the bank
// declined), else the reason it is where it is: the failure's detail, a
// reopen's reason, a missed notice. The record's text was masked before
// it was written; it is shown printable and clipped.
func declineOrReason(r driver.Record) string {
	switch r.State {
	case driver.StateFailed:
		if code := charge.DeclineCode(r.Detail); code != "" {
			if why, hard := charge.HardDecline(code); hard {
				return charge.Printable(code) + " (hard decline: " + why + ")"
			}
			return charge.Printable(code)
		}
		return cmpOr(charge.Clip(charge.Printable(r.Detail), 120), none)
	case driver.StateInProgress:
		if r.Reopens > 0 {
			why := "reopened: " + charge.Clip(charge.Printable(r.ReopenReason), 80)
			if code := charge.DeclineCode(r.PrevDetail); code != "" {
				why += " (was declined " + charge.Printable(code) + ")"
			}
			return why
		}
		return "being debited"
	case driver.StateDone:
		if r.Status == string(charge.DebitedNotificationFailed) {
			return "debited; the customer's notice was not sent"
		}
		return "debited"
	}
	return cmpOr(charge.Clip(charge.Printable(r.Status), 80), none)
}

// dlqLook is what a bounded read of the DLQ found for some charges: the
// DLQ entry of each charge id found there; Problem, when the read could
// not look at all of the DLQ, says so (the page shows it).
type dlqLook struct {
	Entries map[string]string
	// Blocked are the charges whose only DLQ entries cannot deliver
	// them (a conflict, an entry over the size limit, a body that is not
	// a charge event): the code of one, by charge id.
	Blocked map[string]string
	// Old are the charges whose message is on the DLQ only as an entry
	// older than the retention less a day, which the console holds back
	// (the command line's redrive --force moves it): its id, by charge.
	Old     map[string]string
	Problem string
	Looked  bool
}

// tooOld says whether the console's redrive holds e back: older than the
// records' retention less a day (operate.RedriveAt's MaxAge), when the
// record that stops a second debit may be gone.
func (c *Console) tooOld(e operate.Entry, now time.Time) bool {
	return !e.At.IsZero() && now.Sub(e.At) > c.o.Retention-24*time.Hour
}

// tooOldNext is what happens next to a charge whose message is a DLQ
// entry the console holds back.
const tooOldNext = "its message is on the DLQ, older than the retention less a day: the console does not redrive it (the record that stops a second debit may be gone); check the charge, then the command line's redrive --force"

// delivers says whether a redrive of e delivers its charge: the console
// never redrives what chargehandler.HoldBack holds (a conflict: another
// payload under the charge's id; an entry over the size limit), and a
// body that is not a charge event is dead-lettered again.
func delivers(e operate.Entry) bool {
	return e.Unreadable == "" && !slices.Contains(chargehandler.HoldBack, queue.Code(e.Code))
}

// dlqLookTimeout bounds the DLQ read a page makes for its charges.
const dlqLookTimeout = 5 * time.Second

// lookInDLQ reads the DLQ (bounded by dlqLookTimeout) for the entries of
// ids.
func (c *Console) lookInDLQ(ctx context.Context, ids []string) dlqLook {
	if len(ids) == 0 {
		return dlqLook{}
	}
	ctx, cancel := context.WithTimeout(ctx, dlqLookTimeout)
	defer cancel()
	l, err := operate.List(ctx, c.o.Queue, operate.ListOptions{Now: c.o.Now(), Match: operate.ChargeMatch(ids)})
	if err != nil {
		c.o.Logger.Warn("console: read the DLQ for the stuck claims", "error", err)
		return dlqLook{Looked: true, Problem: "the DLQ could not be read (the console's log says why): whether a charge's message waits there is not known"}
	}
	out := dlqLook{Looked: true, Entries: map[string]string{}, Blocked: map[string]string{}, Old: map[string]string{}}
	now := c.o.Now()
	for _, e := range l.Entries {
		// The entry to offer is the charge's own message, the oldest
		// that a redrive delivers; never a conflict or a garbled body
		// that merely names the charge.
		if !delivers(e) {
			if _, ok := out.Blocked[e.Key]; !ok {
				out.Blocked[e.Key] = e.Code
			}
			continue
		}
		if c.tooOld(e, now) {
			if _, ok := out.Old[e.Key]; !ok {
				out.Old[e.Key] = e.ID
			}
			continue
		}
		if _, ok := out.Entries[e.Key]; !ok {
			out.Entries[e.Key] = e.ID
		}
	}
	for id := range out.Entries {
		delete(out.Blocked, id)
		delete(out.Old, id)
	}
	for id := range out.Old {
		delete(out.Blocked, id)
	}
	if inc := l.Incomplete(); inc != "" {
		out.Problem = "the DLQ was read in part (" + inc + "): a charge not marked as on the DLQ may still be there"
	}
	return out
}

// expiredClaims are the ids of the records IN_PROGRESS past their lease:
// those whose next delivery may never come (their message on the DLQ).
func expiredClaims(recs []recordFields, now time.Time) []string {
	var ids []string
	for _, r := range recs {
		if driver.State(r.State) == driver.StateInProgress && !r.LeaseUntil.After(now) {
			ids = append(ids, r.ChargeID)
		}
	}
	return ids
}

// next says what happens next to the record and which action does it;
// dlq is what a read of the DLQ found (nil: not looked).
func (c *Console) next(r recordFields, now time.Time, dlq *dlqLook) nextStep {
	q := "?id=" + urlQuery(r.ChargeID)
	switch driver.State(r.State) {
	case driver.StateDone:
		if r.Renotifiable {
			s := nextStep{Next: "debited; nothing more until the missed notice is sent again"}
			if c.o.Renotifier != nil {
				s.Action, s.Href = "Renotify…", "/charge/renotify"+q
			}
			return s
		}
		return nextStep{Next: "nothing: debited, redeliveries are dropped"}
	case driver.StateFailed:
		if r.HardDecline != "" {
			if c.o.Approvals != nil && c.o.Approvals.Policy().RepresentHardDecline {
				return nextStep{Next: "nothing: a hard decline; presented again only by a proposal another operator approves", Action: "Propose…", Href: "/charge/reopen" + q}
			}
			return nextStep{Next: "nothing: a hard decline is never presented again"}
		}
		if r.NewAttemptOK {
			return nextStep{Next: "nothing until an operator reopens it with a new attempt (the next bank key) and its message is redriven", Action: "Reopen…", Href: "/charge/reopen" + q}
		}
		return nextStep{Next: "nothing until an operator reopens it and its message is redriven", Action: "Reopen…", Href: "/charge/reopen" + q}
	case driver.StateWaiting:
		return nextStep{Next: r.WaitText}
	case driver.StateInProgress:
		if r.LeaseUntil.After(now) {
			return nextStep{Next: "a consumer holds it: " + r.LeaseText}
		}
		expired := "lease expired " + now.Sub(r.LeaseUntil).Round(time.Second).String() + " ago"
		if dlq != nil {
			if id, ok := dlq.Entries[r.ChargeID]; ok {
				return nextStep{Next: "its message is on the DLQ: no delivery comes until it is redriven (" + expired + ")", Action: "Redrive…", Href: "/dlq/redrive?id=" + urlQuery(id)}
			}
			if _, ok := dlq.Old[r.ChargeID]; ok {
				return nextStep{Next: tooOldNext + " (" + expired + ")"}
			}
			if code, ok := dlq.Blocked[r.ChargeID]; ok {
				return nextStep{Next: expired + ": the next delivery reclaims it, if its message is on the queue; the DLQ entry naming it (" + code + ") cannot deliver it", Action: "See the charge…", Href: "/charge" + q}
			}
			if dlq.Problem != "" {
				return nextStep{Next: expired + ": the next delivery reclaims it, if its message is on the queue (the DLQ could not all be read)"}
			}
		}
		return nextStep{Next: expired + ": the next delivery reclaims it"}
	}
	return nextStep{Next: none}
}

// cockpit fills in the month-end columns of recs; dlq as for next.
func (c *Console) cockpit(recs []recordFields, now time.Time, dlq *dlqLook) {
	for i := range recs {
		recs[i].Step = c.next(recs[i], now, dlq)
	}
}

// entryStep is what happens next to a DLQ entry, given its charge's
// record (nil: none), and the action that does it.
func (c *Console) entryStep(e operate.Entry, rec *recordFields, now time.Time) nextStep {
	redrive := nextStep{Action: "Redrive…", Href: "/dlq/redrive?id=" + urlQuery(e.ID)}
	switch {
	case e.Code == string(queue.CodeTooLarge):
		return nextStep{Next: "nothing: over the size limit, it can only be purged (chargerecovery dlq purge)"}
	case e.Code == string(chargehandler.Code(charge.Conflict)):
		return nextStep{Next: "nothing: the charge id was reused with another payload; decide with the producer (redrive --force on the command line)"}
	case e.Unreadable != "":
		return nextStep{Next: "nothing: not a charge event the consumer can read (a redrive is dead-lettered again); the producer sends it again, then purge this entry"}
	case c.tooOld(e, now):
		// Held back by the console's redrive: it must not be offered, nor
		// what it would do said as if it would happen.
		switch {
		case rec != nil && (driver.State(rec.State) == driver.StateFailed || rec.Renotifiable):
			return c.next(*rec, now, nil)
		case rec != nil && driver.State(rec.State) == driver.StateDone:
			return nextStep{Next: "nothing: the charge is DONE, redeliveries are dropped (older than the retention less a day, the console does not redrive it)"}
		}
		return nextStep{Next: tooOldNext}
	case rec == nil:
		redrive.Next = "nothing until redriven: a redrive debits it as a new charge (no record)"
		return redrive
	}
	switch driver.State(rec.State) {
	case driver.StateDone:
		redrive.Next = "nothing: the charge is DONE (a redrive is dropped, never debited again)"
		if rec.Renotifiable {
			return c.next(*rec, now, nil)
		}
		return redrive
	case driver.StateFailed:
		return c.next(*rec, now, nil)
	case driver.StateInProgress:
		if rec.LeaseUntil.After(now) {
			// A delivery (a copy of this message) is being processed:
			// a redriven copy finds it claimed and is not debited twice.
			return nextStep{Next: "a consumer holds it now (" + rec.LeaseText + "): no redrive is needed; a redriven copy finds it claimed"}
		}
		if rec.Reopens > 0 {
			redrive.Next = "reopened: no delivery comes until it is redriven, then it is debited under bank key " + rec.BankKey
		} else {
			redrive.Next = "its record is IN_PROGRESS: no delivery comes until it is redriven"
		}
		return redrive
	}
	redrive.Next = "nothing until redriven: its record (" + rec.State + ") then decides"
	return redrive
}

// dlqRow is a DLQ entry as the DLQ page lists it, with its charge's
// record as the month-end columns show it.
type dlqRow struct {
	operate.Entry
	Generation string
	Why        string
	Step       nextStep
}

// dlqRecordLookups bounds the records the DLQ page reads (one read each).
const dlqRecordLookups = 100

// dlqRows are entries with their records (the first dlqRecordLookups);
// looked is how many records were read for, when fewer than entries.
func (c *Console) dlqRows(ctx context.Context, entries []operate.Entry, now time.Time) ([]dlqRow, int) {
	rows := make([]dlqRow, len(entries))
	looked := 0
	for i, e := range entries {
		rows[i] = dlqRow{Entry: e, Generation: none, Why: none}
		// The reason's detail has its own column: this one is the
		// decline code, or what the record says.
		if code := charge.DeclineCode(e.Detail); code != "" {
			rows[i].Why = charge.Printable(code)
		}
		var rec *recordFields
		readable := e.Key != "" && e.Unreadable == ""
		if readable && looked >= dlqRecordLookups {
			rows[i].Step = nextStep{Next: "see the charge (records read for the first " + strconv.Itoa(dlqRecordLookups) + " entries)"}
			continue
		}
		if readable {
			looked++
			got, err := c.o.Store.Get(ctx, e.Key, now)
			switch {
			case err == nil:
				rv := recordView(got, now)
				rec = &rv
				rows[i].Generation = strconv.Itoa(rv.Generation)
				if driver.State(rv.State) != driver.StateDone {
					rows[i].Why = rv.Why
				}
			case !errors.Is(err, idempotency.ErrNotFound):
				c.o.Logger.Warn("console: read a DLQ entry's record", "error", err)
				rows[i].Step = nextStep{Next: "not known: its record could not be read"}
				continue
			}
		}
		rows[i].Step = c.entryStep(e, rec, now)
	}
	if len(entries) > dlqRecordLookups {
		return rows, dlqRecordLookups
	}
	return rows, 0
}

type stepView struct {
	Step     nextStep
	Operator bool
}

// proposalSample reads the record of each charge in a proposal's sample
// (at most 20): its generation, its decline code or reason, and what
// happens next, as they stand now.
func (c *Console) proposalSample(ctx context.Context, sample []targetView, running bool) {
	now := c.o.Now()
	recs := make([]*recordFields, len(sample))
	unread := make([]bool, len(sample))
	var read []recordFields
	for i := range sample {
		t := &sample[i]
		if t.ChargeID == "" {
			continue
		}
		rec, err := c.o.Store.Get(ctx, t.ChargeID, now)
		switch {
		case errors.Is(err, idempotency.ErrNotFound):
		case err != nil:
			c.o.Logger.Warn("console: read a proposal's charge", "error", err)
			unread[i] = true
		default:
			rv := recordView(rec, now)
			recs[i] = &rv
			read = append(read, rv)
		}
	}
	// A claim past its lease whose message waits on the DLQ gets no
	// delivery until it is redriven: the sample says so, as the Stuck
	// page does.
	look := dlqLook{Looked: true, Problem: "the DLQ is not read while the proposal runs (its run reads it)"}
	if !running {
		// Never while it runs: on SQS a read holds every DLQ message
		// invisible for a moment, which the run's redrive would miss.
		look = c.lookInDLQ(ctx, expiredClaims(read, now))
	}
	for i := range sample {
		t := &sample[i]
		t.Generation, t.Reason = none, none
		if t.ChargeID == "" {
			continue
		}
		rv := recs[i]
		switch {
		case unread[i]:
			t.Step = nextStep{Next: "not known: its record could not be read"}
		case rv == nil:
			t.Step = nextStep{Next: "no record: a redrive debits it as a new charge"}
		default:
			t.Generation, t.Reason = strconv.Itoa(rv.Generation), rv.Why
			if t.Account == "" {
				t.Account = rv.Account
			}
			if t.Amount == "" {
				t.Amount = rv.Amount
			}
			t.Step = nextStep{Next: rv.State + " — " + c.next(*rv, now, &look).Next}
		}
	}
}

// moneyNote spells out what running a proposal does with money, the
// choices its form made (a new attempt, --force) included.
func moneyNote(s approval.Spec, totals string) string {
	switch s.Kind {
	case approval.Redrive:
		n := "each DLQ entry goes back to the queue (" + totals + "): a charge with no record, or reopened, is debited; a DONE charge is not debited again; a FAILED one is dead-lettered again"
		if s.Force {
			n += "; with --force, conflicts and entries past the retention move too (a charge whose record is gone is debited as new)"
		}
		return n
	case approval.Reopen:
		if s.NewAttempt {
			return "each charge is reopened with a new attempt and redriven: debited again under its next bank key (" + totals + "); the bank sees a new debit"
		}
		return "each charge is reopened and redriven: debited under its same bank key (" + totals + ")"
	case approval.Renotify:
		return "no money moves: the missed notices are sent again"
	}
	return ""
}
