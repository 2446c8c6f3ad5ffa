package status

import (
	"cmp"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
	"github.com/finedge/idempotent-consumer/internal/safetext"
)

// RecordJSON is the --json form of an idempotency record (inspect, reopen).
type RecordJSON struct {
	ChargeID   string    `json:"chargeId"`
	State      string    `json:"state"`
	Status     string    `json:"status,omitempty"`
	Detail     string    `json:"detail,omitempty"`
	Attempt    int       `json:"attempt"`
	LeaseUntil time.Time `json:"leaseUntil"`
	LeaseLive  bool      `json:"leaseLive"`
	CreatedAt  time.Time `json:"createdAt"`
	UpdatedAt  time.Time `json:"updatedAt"`
	ExpiresAt  time.Time `json:"expiresAt"`
	// Fingerprint is shown short: which key wrote it and a few digits.
	Fingerprint string `json:"fingerprint"`
	TokenPrefix string `json:"tokenPrefix"`
	// The audit trail of operator reopenings (the last one's details).
	Reopens      int        `json:"reopens,omitempty"`
	ReopenedAt   *time.Time `json:"reopenedAt,omitempty"`
	ReopenReason string     `json:"reopenReason,omitempty"`
	PrevStatus   string     `json:"previousStatus,omitempty"`
	PrevDetail   string     `json:"previousDetail,omitempty"`
	// Generation is the bank-key generation; History one line per
	// reopening (which generation ended how, when, by whom, why).
	Generation int      `json:"generation"`
	History    []string `json:"history,omitempty"`
}

// RecordJSONOf is r as RecordJSON at now.
func RecordJSONOf(r driver.Record, now time.Time) RecordJSON {
	var reopened *time.Time
	if !r.ReopenedAt.IsZero() {
		reopened = &r.ReopenedAt
	}
	return RecordJSON{ReopenedAt: reopened,
		ChargeID: r.Key, State: string(r.State), Status: r.Status, Detail: r.Detail, Attempt: r.Attempt,
		LeaseUntil: r.LeaseUntil, LeaseLive: r.LeaseLive(now), CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt,
		ExpiresAt: r.ExpiresAt, Fingerprint: ShortFingerprint(r.Fingerprint), TokenPrefix: Prefix(r.Token, 8),
		Reopens: r.Reopens, ReopenReason: r.ReopenReason, PrevStatus: r.PrevStatus, PrevDetail: r.PrevDetail,
		Generation: max(r.Generation, 1), History: r.History,
	}
}

// ShortFingerprint is what may be shown of a fingerprint: which key wrote
// it and a few digits, enough to tell two apart on a screen. A keyed
// fingerprint is "hs256:<key id>:<hex>" (idempotency.Fingerprinter); any
// other is an unkeyed hash.
func ShortFingerprint(fp string) string {
	if rest, ok := strings.CutPrefix(fp, "hs256:"); ok {
		if id, digits, ok := strings.Cut(rest, ":"); ok {
			return "hs256:" + id + ":" + Prefix(digits, 8) + "…"
		}
	}
	return Prefix(fp, 8) + "… (unkeyed)"
}

// Prefix is the first n bytes of s (tokens and fingerprints are shown cut).
func Prefix(s string, n int) string { return s[:min(n, len(s))] }

// Meaning says what a record in state s means for its charge.
func Meaning(s driver.State) string {
	return map[driver.State]string{
		driver.StateDone:       "finished; redeliveries are dropped",
		driver.StateFailed:     "failed; redeliveries are dead-lettered until an operator reopens it",
		driver.StateInProgress: "being worked on, or its worker died (reclaimed once the lease expires)",
		driver.StateWaiting:    "waiting: its next step is scheduled (a retry, or the debit after the pre-debit notice); the first delivery after then resumes it",
	}[s]
}

// WaitText says what a WAITING record waits for, in the operator's words:
// "next attempt at T (attempt 2 of 4, after INSUFFICIENT_FUNDS)", "notice
// sent at T, debit on or after T2". "" for any other record.
func WaitText(r driver.Record, now time.Time) string {
	if r.State != driver.StateWaiting {
		return ""
	}
	at := r.LeaseUntil.UTC().Format(time.RFC3339)
	when := "in " + r.LeaseUntil.Sub(now).Round(time.Second).String()
	if !r.LeaseUntil.After(now) {
		when = "due: the next delivery resumes it"
	}
	// The detail is the charge service's own words for the wait ("next
	// attempt at T (attempt 2 of 4, after INSUFFICIENT_FUNDS)", "notice
	// sent at T, debit on or after T2").
	if detail := charge.Printable(r.Detail); detail != "" {
		return fmt.Sprintf("%s (%s)", detail, when)
	}
	return fmt.Sprintf("%s until %s (%s)", charge.Printable(r.Status), at, when)
}

// LeaseText says where r's lease stands at now.
func LeaseText(r driver.Record, now time.Time) string {
	switch {
	case r.State == driver.StateWaiting:
		return "not held: the record waits until then (see schedule)"
	case r.State != driver.StateInProgress:
		return "not held: the record is final"
	case r.LeaseLive(now):
		return "live for " + r.LeaseUntil.Sub(now).Round(time.Second).String()
	}
	return "expired " + now.Sub(r.LeaseUntil).Round(time.Second).String() + " ago: the next delivery reclaims it"
}

// PrintRecord writes r for a person, with what its state means at now.
func PrintRecord(w io.Writer, r driver.Record, now time.Time) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	lease, meaning := LeaseText(r, now), Meaning(r.State)
	// What a record holds came partly from outside (the bank's text, a
	// reason, the charge id): it is shown without control characters,
	// whenever it was written, and with bidirectional and other invisible
	// format characters escaped (safetext.Text).
	show := func(s string) string { return safetext.Text(charge.Printable(s)) }
	r.Key = safetext.Text(r.Key)
	r.Status, r.Detail, r.ReopenReason, r.PrevStatus, r.PrevDetail = show(r.Status), show(r.Detail),
		show(r.ReopenReason), show(r.PrevStatus), show(r.PrevDetail)
	fmt.Fprintf(tw, "charge\t%s\n", r.Key)
	fmt.Fprintf(tw, "state\t%s (%s)\n", r.State, meaning)
	if w := WaitText(r, now); w != "" {
		fmt.Fprintf(tw, "schedule\t%s\n", safetext.Text(w))
	}
	if r.Status != "" {
		fmt.Fprintf(tw, "status\t%s\n", r.Status)
	}
	if r.Detail != "" && r.State != driver.StateWaiting { // a wait's detail is its schedule line
		fmt.Fprintf(tw, "detail\t%s\n", r.Detail)
	}
	fmt.Fprintf(tw, "attempt\t%d\n", r.Attempt)
	if r.State == driver.StateWaiting {
		fmt.Fprintf(tw, "not before\t%s\n", r.LeaseUntil.UTC().Format(time.RFC3339))
	} else {
		fmt.Fprintf(tw, "lease until\t%s (%s)\n", r.LeaseUntil.UTC().Format(time.RFC3339), lease)
	}
	fmt.Fprintf(tw, "created\t%s\n", r.CreatedAt.UTC().Format(time.RFC3339))
	fmt.Fprintf(tw, "updated\t%s\n", r.UpdatedAt.UTC().Format(time.RFC3339))
	fmt.Fprintf(tw, "kept until\t%s\n", r.ExpiresAt.UTC().Format(time.RFC3339))
	fmt.Fprintf(tw, "fingerprint\t%s\n", ShortFingerprint(r.Fingerprint))
	fmt.Fprintf(tw, "token\t%s…\n", Prefix(r.Token, 8))
	if r.Generation > 1 {
		fmt.Fprintf(tw, "generation\t%d (bank key %s~%d)\n", r.Generation, r.Key, r.Generation)
	}
	if r.Reopens > 0 {
		fmt.Fprintf(tw, "reopened\t%d time(s), last %s: %s\n", r.Reopens, r.ReopenedAt.UTC().Format(time.RFC3339), r.ReopenReason)
		fmt.Fprintf(tw, "before reopening\t%s %s\n", r.PrevStatus, r.PrevDetail)
	}
	for _, h := range r.History {
		fmt.Fprintf(tw, "history\t%s\n", show(h))
	}
	tw.Flush()
}

// StuckJSON is chargerecovery stuck --json: how many claims are past
// their lease, and those listed.
type StuckJSON struct {
	Total  int          `json:"total"`
	Claims []RecordJSON `json:"claims"`
}

// StuckJSONOf is recs (of total) at now.
func StuckJSONOf(recs []driver.Record, total int, now time.Time) StuckJSON {
	out := StuckJSON{Total: total, Claims: []RecordJSON{}}
	for _, r := range recs {
		out.Claims = append(out.Claims, RecordJSONOf(r, now))
	}
	return out
}

// PrintStuck writes chargerecovery stuck: how many claims are past their
// lease, and those listed, oldest first, as a table.
func PrintStuck(w io.Writer, recs []driver.Record, total int, now time.Time) error {
	fmt.Fprintf(w, "%d claim(s) IN_PROGRESS past their lease", total)
	if total == 0 {
		fmt.Fprintln(w)
		return nil
	}
	fmt.Fprintf(w, " (oldest first, %d shown). Each is reclaimed by its next delivery; if the message is gone, see the DLQ.\n", len(recs))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "CHARGE\tAMOUNT\tACCOUNT\tGEN\tLEASE EXPIRED\tOVERDUE\tATTEMPT\tCLAIMED")
	for _, r := range recs {
		// The month-end columns, as the console's Stuck page has them:
		// the amount and the masked account from the record's summary.
		amount, account := "-", "-"
		if sum, ok := charge.RecordSummary(r); ok {
			amount, account = sum.Amount.String(), cmp.Or(sum.Account(), "-")
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%d\t%s\n", safetext.Text(charge.ShowID(r.Key)), amount, safetext.Text(account), max(r.Generation, 1),
			r.LeaseUntil.UTC().Format(time.RFC3339), now.Sub(r.LeaseUntil).Round(time.Second), r.Attempt, r.CreatedAt.UTC().Format(time.RFC3339))
	}
	return tw.Flush()
}
