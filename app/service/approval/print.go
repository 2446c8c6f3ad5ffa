package approval

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/internal/safetext"
)

// show is text from outside (a reason, a name, a charge id) as it is
// printed: control and invisible format characters escaped.
var show = safetext.Text

// Print shows p: what it does, what it touches, where it is.
func Print(w io.Writer, p Proposal, sample int) {
	fmt.Fprintf(w, "proposal %s: %s\n", show(p.ID), show(p.Spec.Describe()))
	fmt.Fprintf(w, "  why:      %s\n", show(p.Spec.Reason))
	fmt.Fprintf(w, "  proposed: %s by %s (%s); expires %s\n", p.At.Format(time.RFC3339), show(p.Proposer.Name), show(p.Proposer.Via), p.Expires.Format(time.RFC3339))
	fmt.Fprintf(w, "  touches:  %d charge(s), %s\n", len(p.Targets), FormatTotals(p.Totals))
	for _, t := range p.Sample(sample) {
		fmt.Fprintf(w, "    %s\n", TargetLine(t))
	}
	if len(p.Targets) > sample {
		fmt.Fprintf(w, "    … and %d more (chargerecovery approvals show %s --json lists all)\n", len(p.Targets)-sample, p.ID)
	}
	if len(p.Held) > 0 {
		fmt.Fprintf(w, "  held back: %d charge(s) matched but not proposed:\n", len(p.Held))
		for _, h := range p.Held[:min(len(p.Held), max(sample, 50))] {
			fmt.Fprintf(w, "    %s: %s\n", TargetLine(h.Target), h.Why)
		}
		if len(p.Held) > max(sample, 50) {
			fmt.Fprintf(w, "    … and %d more (--json lists all)\n", len(p.Held)-max(sample, 50))
		}
	}
	done, all := p.Progress()
	fmt.Fprintf(w, "  state:    %s", p.State)
	if p.Decider != nil {
		fmt.Fprintf(w, " (by %s, %s)", show(p.Decider.Name), show(p.Decider.Via))
	}
	if done > 0 {
		fmt.Fprintf(w, "; %d of %d done: %s", done, all, FormatCounts(p.Counts()))
	}
	fmt.Fprintln(w)
	switch p.State {
	case Pending:
		fmt.Fprintf(w, "  needs:    another operator's approval (%s):\n    chargerecovery approvals approve %s\n", p.Needs, p.ID)
	case Approved:
		fmt.Fprintf(w, "  next:     chargerecovery approvals run %s\n", p.ID)
	case Running:
		fmt.Fprintf(w, "  next:     if its run stopped, chargerecovery approvals run %s resumes it\n", p.ID)
	}
}

// TargetLine is one target as a person reads it: the charge, its masked
// account, the amount, the DLQ reason (or the record's status) and, where
// the proposal read it, the bank's decline code — a hard one marked so.
func TargetLine(t Target) string {
	amt := ""
	if t.Currency != "" {
		amt = charge.Money{Minor: t.Minor, Currency: charge.Currency(t.Currency)}.String()
	}
	line := fmt.Sprintf("%-28s %-14s %-16s %-14s %s", show(t.Name()), MaskedAccount(t), amt, show(t.Code), show(DeclineNote(t)))
	return strings.TrimRight(line, " ")
}

// MaskedAccount is t's account masked (charge.MaskAccount: the targets
// keep it masked already; masked again, whatever a proposal file says),
// "" for none.
func MaskedAccount(t Target) string {
	if t.Account == "" {
		return ""
	}
	return charge.MaskAccount(t.Account)
}

// DeclineNote is t's decline code, with "HARD DECLINE" and why for a hard
// one; "" when the proposal read none.
func DeclineNote(t Target) string {
	code := charge.Printable(t.DeclineCode)
	if why, hard := charge.HardDecline(t.DeclineCode); hard || t.HardDecline {
		return code + " HARD DECLINE (" + why + ")"
	}
	return code
}

// PrintOutcomes lists the targets not done, by id, with why.
func PrintOutcomes(w io.Writer, p Proposal) {
	for _, t := range p.Targets {
		o, ok := p.Outcomes[t.Key()]
		if !ok || o.Result == "moved" || o.Result == "reopened" || o.Result == "sent" || o.Result == "adopted" || o.Result == "resolved" {
			continue
		}
		fmt.Fprintf(w, "  %-9s %s: %s\n", show(o.Result), show(t.Name()), show(o.Why))
	}
}

// PrintList shows proposals one a line.
func PrintList(w io.Writer, ps []Proposal) {
	for _, p := range ps {
		done, n := p.Progress()
		fmt.Fprintf(w, "%s  %-8s  %-7s by %-10s %4d charge(s) %-22s %d/%d done  %s\n", show(p.ID), p.State, p.Spec.Kind, show(p.Proposer.Name),
			len(p.Targets), FormatTotals(p.Totals), done, n, show(p.Spec.Reason))
	}
}
