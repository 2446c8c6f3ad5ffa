// Package approval is four-eyes for the actions that move money or touch
// many charges: an operator proposes (a redrive, a reopen with a new
// attempt, a renotify of many), the proposal freezes exactly what it will
// touch (the DLQ entries or records, their count, a sample, the total
// amount by currency), and, where the policy asks for it, a different
// operator approves before anything is done. An approved proposal is
// executed in bounded batches, each batch's result saved and written to
// the audit trail before the next one starts, so that a run that stops
// (a crash, a deploy, Ctrl-C) is resumed where it stopped and never acts
// on a target twice. Proposals expire.
//
// Proposals are files in a directory next to the audit trail
// (AUDIT_FILE.proposals/, mode 0700, each written whole by rename under an
// flock), shared by the console and the command line of the host; every
// step (propose, approve, reject, expire, each batch, done) is a line of
// the one audit trail.
package approval

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/app/reconcile"
)

// Kind is what a proposal does.
type Kind string

// The kinds.
const (
	// Redrive moves the chosen DLQ entries back to the queue.
	Redrive Kind = "redrive"
	// Reopen reopens the chosen FAILED records (with a new attempt, the
	// next bank-key generation, when Spec.NewAttempt) and moves their DLQ
	// entries back to the queue.
	Reopen Kind = "reopen"
	// Renotify sends the chosen missed pre-debit notices again.
	Renotify Kind = "renotify"
	// Reconcile resolves one charge's reconciliation break
	// (reconcile.Resolve): an adoption records the bank's posting as
	// collected (DONE, no debit); any other break is marked resolved.
	Reconcile Kind = "reconcile"
)

// Policy says which actions need a second operator's approval.
type Policy struct {
	// ReopenNewAttempt: every reopen with a new attempt (a second debit
	// under a new bank key).
	ReopenNewAttempt bool
	// RedriveForce: every redrive with --force (conflicts, entries older
	// than the retention less a day).
	RedriveForce bool
	// ReconcileAdopt: every reconciliation resolve that adopts a posting
	// (posted_not_recorded, or failed_but_posted not refunded): money
	// recorded as collected without a debit. Marking a break resolved
	// does not need it.
	ReconcileAdopt bool
	// BulkOver: every action touching more than this many charges
	// (negative: no limit).
	BulkOver int
	// RepresentHardDecline lets a new attempt on a hard-declined charge
	// (charge.HardDecline: a closed account, a cancelled mandate…) be
	// proposed at all: such a target is marked with its decline code on
	// the proposal and is done only once another operator approves it,
	// never directly. Without it a new attempt on a hard decline is
	// refused on every path, and a bulk proposal holds it back. Not part
	// of "all": it permits what is otherwise refused, so it is named
	// alone.
	RepresentHardDecline bool
}

// Off is the policy under which nothing needs approval (the demo's).
var Off = Policy{BulkOver: -1}

// ParsePolicy reads --approval-required: a comma-separated list of
// reopen-new-attempt, redrive-force, reconcile-adopt, bulk>N (N ≥ 0),
// represent-hard-decline, or "all" (the first four, with bulk>1; never
// represent-hard-decline), or "" / "off".
func ParsePolicy(s string) (Policy, error) {
	p := Off
	s = strings.TrimSpace(s)
	if s == "" || s == "off" {
		return p, nil
	}
	for _, w := range strings.Split(s, ",") {
		w = strings.TrimSpace(w)
		switch {
		case w == "reopen-new-attempt":
			p.ReopenNewAttempt = true
		case w == "redrive-force":
			p.RedriveForce = true
		case w == "reconcile-adopt":
			p.ReconcileAdopt = true
		case w == "represent-hard-decline":
			p.RepresentHardDecline = true
		case w == "all":
			p.ReopenNewAttempt, p.RedriveForce, p.ReconcileAdopt, p.BulkOver = true, true, true, 1
		case strings.HasPrefix(w, "bulk>"):
			n, err := strconv.Atoi(strings.TrimPrefix(w, "bulk>"))
			if err != nil || n < 0 {
				return Off, fmt.Errorf("--approval-required: %q: want bulk>N with N a count of charges (0 or more)", w)
			}
			p.BulkOver = n
		default:
			return Off, fmt.Errorf("--approval-required: %q is not reopen-new-attempt, redrive-force, reconcile-adopt, bulk>N, represent-hard-decline, all or off", w)
		}
	}
	return p, nil
}

// String is the policy as ParsePolicy reads it.
func (p Policy) String() string {
	var w []string
	if p.ReopenNewAttempt {
		w = append(w, "reopen-new-attempt")
	}
	if p.RedriveForce {
		w = append(w, "redrive-force")
	}
	if p.ReconcileAdopt {
		w = append(w, "reconcile-adopt")
	}
	if p.BulkOver >= 0 {
		w = append(w, fmt.Sprintf("bulk>%d", p.BulkOver))
	}
	if p.RepresentHardDecline {
		w = append(w, "represent-hard-decline")
	}
	if len(w) == 0 {
		return "off"
	}
	return strings.Join(w, ",")
}

// On says whether anything needs approval.
func (p Policy) On() bool { return p != Off }

// Needs says why a proposal of spec touching n charges needs approval,
// "" when it does not.
func (p Policy) Needs(spec Spec, n int) string {
	var why []string
	if p.ReopenNewAttempt && spec.Kind == Reopen && spec.NewAttempt {
		why = append(why, "a reopen with a new attempt (a second debit under a new bank key)")
	}
	if p.RedriveForce && spec.Force {
		why = append(why, "a redrive with --force")
	}
	if p.ReconcileAdopt && spec.Adopts() {
		why = append(why, "a reconciliation adopting the bank's posting (money recorded as collected without a debit)")
	}
	if p.BulkOver >= 0 && n > p.BulkOver {
		why = append(why, fmt.Sprintf("%d charges, over the policy's %d", n, p.BulkOver))
	}
	return strings.Join(why, "; ")
}

// NeedsFor is Needs of a proposal of spec freezing targets: also, for a
// reopen with a new attempt, every hard-declined target (which only a
// policy with RepresentHardDecline lets be proposed at all) with its
// decline code — always, whatever else the policy says.
func (p Policy) NeedsFor(spec Spec, targets []Target) string {
	why := p.Needs(spec, len(targets))
	if hard := HardDeclines(spec, targets); len(hard) > 0 {
		w := fmt.Sprintf("a new attempt on %d hard-declined charge(s) (%s), presented again under represent-hard-decline", len(hard), strings.Join(hard, ", "))
		if why == "" {
			return w
		}
		return why + "; " + w
	}
	return why
}

// HardDeclines are the hard-declined targets of a reopen with a new
// attempt, as "CHARGE ACCOUNT_CLOSED".
func HardDeclines(spec Spec, targets []Target) []string {
	if spec.Kind != Reopen || !spec.NewAttempt {
		return nil
	}
	var out []string
	for _, t := range targets {
		if t.HardDecline {
			out = append(out, t.ChargeID+" "+t.DeclineCode)
		}
	}
	return out
}

// Spec is what an operator asks for.
type Spec struct {
	Kind Kind `json:"kind"`
	// Reason is the operator's why, kept in every record touched and the
	// audit trail (required).
	Reason string `json:"reason"`
	// Codes, OlderThan and ChargeIDs choose DLQ entries (Redrive, Reopen)
	// or records (Renotify: ChargeIDs, or every missed notice).
	Codes     []string      `json:"codes,omitempty"`
	OlderThan time.Duration `json:"olderThan,omitempty"`
	ChargeIDs []string      `json:"chargeIds,omitempty"`
	// Force moves conflicts and entries past the retention too (Redrive).
	Force bool `json:"force,omitempty"`
	// NewAttempt reopens under the next bank-key generation (Reopen).
	NewAttempt bool `json:"newAttempt,omitempty"`
	// DeclineCodes keep only the charges whose record the bank declined
	// with one of these codes (Redrive, Reopen; compared as
	// charge.NormalDeclineCode writes them: ACCOUNT_CLOSED, account
	// closed and account-closed are one code).
	DeclineCodes []string `json:"declineCodes,omitempty"`

	// Reconcile: ChargeIDs names exactly one charge; Statements are the
	// statement files (absolute paths) read as one statement, from the
	// side of CollectionAccount ("": the customers' own statements), over
	// From–To (zero: the statement's period). BreakKind is the break's
	// kind (set at the proposal from the break found, when not given).
	// Unverified, NoticeSent and Refunded are ResolveRequest's. TimeZone
	// is the bank's (IANA name, --time-zone), where a statement's FrToDt
	// without an offset is read (statement.Options.Location); "": UTC.
	Statements        []string       `json:"statements,omitempty"`
	CollectionAccount string         `json:"collectionAccount,omitempty"`
	TimeZone          string         `json:"timeZone,omitempty"`
	From              time.Time      `json:"from,omitzero"`
	To                time.Time      `json:"to,omitzero"`
	BreakKind         reconcile.Kind `json:"breakKind,omitempty"`
	Unverified        bool           `json:"unverified,omitempty"`
	NoticeSent        bool           `json:"noticeSent,omitempty"`
	Refunded          bool           `json:"refunded,omitempty"`
	// Collects: resolving the break records money as collected
	// (reconcile.Break.Collects), as the break found says — set from the
	// proposal's target, whatever its kind.
	Collects bool `json:"collects,omitempty"`
}

// Adopts says whether a reconcile spec adopts the bank's posting (its
// break is posted_not_recorded, or failed_but_posted not Refunded): the
// record becomes DONE, money recorded as collected without a debit.
func (s Spec) Adopts() bool {
	return s.Kind == Reconcile && (s.Collects || s.BreakKind == reconcile.PostedNotRecorded || (s.BreakKind == reconcile.FailedButPosted && !s.Refunded))
}

// Describe is the spec in a line: what it chooses and does.
func (s Spec) Describe() string {
	var w []string
	switch s.Kind {
	case Redrive:
		w = append(w, "redrive DLQ entries")
	case Reopen:
		if s.NewAttempt {
			w = append(w, "reopen FAILED charges with a new attempt, and redrive them")
		} else {
			w = append(w, "reopen FAILED charges, and redrive them")
		}
	case Renotify:
		w = append(w, "send missed pre-debit notices again")
	case Reconcile:
		what := "resolve the reconciliation break"
		if s.BreakKind != "" {
			what = "resolve the " + string(s.BreakKind) + " break"
		}
		if s.Adopts() {
			what += ", adopting the bank's posting (DONE, no debit)"
		} else if s.BreakKind != "" {
			what += ", marking it resolved"
		}
		return what + " of " + strings.Join(s.ChargeIDs, ", ")
	}
	if len(s.Codes) > 0 {
		w = append(w, "with reason "+strings.Join(s.Codes, ", "))
	}
	if len(s.DeclineCodes) > 0 {
		w = append(w, "declined "+strings.Join(s.DeclineCodes, " or "))
	}
	if s.OlderThan > 0 {
		w = append(w, "dead-lettered over "+s.OlderThan.String()+" ago")
	}
	if len(s.ChargeIDs) > 0 {
		w = append(w, fmt.Sprintf("of %d named charge(s)", len(s.ChargeIDs)))
	}
	if s.Force {
		w = append(w, "with --force")
	}
	return strings.Join(w, " ")
}

// Check says what is wrong with s.
func (s Spec) Check() error {
	switch {
	case s.Kind != Redrive && s.Kind != Reopen && s.Kind != Renotify && s.Kind != Reconcile:
		return fmt.Errorf("unknown kind %q", s.Kind)
	case strings.TrimSpace(s.Reason) == "":
		return errors.New("say why (--reason): it stays in the audit trail and every record touched")
	case len(s.Reason) > MaxReason:
		return fmt.Errorf("the reason is %d bytes: at most %d", len(s.Reason), MaxReason)
	case strings.IndexFunc(s.Reason, unicode.IsControl) >= 0 || !utf8.ValidString(s.Reason):
		return errors.New("the reason holds control characters (a newline, an escape): one line of text, please")
	case len(s.ChargeIDs) > MaxTargets:
		return fmt.Errorf("%d charge ids: at most %d in one proposal", len(s.ChargeIDs), MaxTargets)
	case s.OlderThan < 0:
		return errors.New("--older-than must not be negative")
	case s.Force && s.Kind != Redrive:
		return errors.New("--force is for a redrive")
	case s.NewAttempt && s.Kind != Reopen:
		return errors.New("--new-attempt is for a reopen")
	case len(s.DeclineCodes) > 0 && s.Kind != Reopen && s.Kind != Redrive:
		return errors.New("--decline-code is for a redrive or a reopen")
	case len(s.DeclineCodes) > 100:
		return fmt.Errorf("%d decline codes: at most 100", len(s.DeclineCodes))
	case slices.ContainsFunc(s.DeclineCodes, func(c string) bool {
		return charge.NormalDeclineCode(c) == "" || len(c) > 100 || strings.IndexFunc(c, unicode.IsControl) >= 0
	}):
		return errors.New("--decline-code: a code is empty or not a code (say INSUFFICIENT_FUNDS)")
	case s.Kind == Reconcile:
		return s.checkReconcile()
	case len(s.Statements) > 0 || s.CollectionAccount != "" || s.TimeZone != "" || !s.From.IsZero() || !s.To.IsZero() || s.BreakKind != "" || s.Unverified || s.NoticeSent || s.Refunded:
		return errors.New("--statement, --collection-account, --time-zone, --from/--to, --kind, --unverified, --notice-sent and --refunded are for a reconcile")
	}
	return nil
}

func (s Spec) checkReconcile() error {
	switch {
	case len(s.ChargeIDs) != 1 || strings.TrimSpace(s.ChargeIDs[0]) == "":
		return errors.New("a reconcile proposal resolves exactly one charge's break: give one --charge-id")
	case len(s.Codes) > 0 || s.OlderThan != 0:
		return errors.New("--reason-code and --older-than are not for a reconcile")
	case len(s.Statements) == 0:
		return errors.New("a reconcile proposal needs the statement: give --statement FILE[,FILE]")
	case len(s.Statements) > 100:
		return fmt.Errorf("%d statement files: at most 100", len(s.Statements))
	case s.BreakKind != "" && !s.BreakKind.Valid():
		return fmt.Errorf("--kind %q is not a kind of break", s.BreakKind)
	case s.From.IsZero() != s.To.IsZero() || (!s.From.IsZero() && !s.From.Before(s.To)):
		return errors.New("give --from and --to together, --from before --to")
	case len(s.CollectionAccount) > 200 || strings.IndexFunc(s.CollectionAccount, unicode.IsControl) >= 0:
		return errors.New("--collection-account: not an account")
	}
	if _, err := s.location(); err != nil {
		return err
	}
	for _, f := range s.Statements {
		if !filepath.IsAbs(f) || strings.IndexFunc(f, unicode.IsControl) >= 0 {
			return fmt.Errorf("statement %q: give an absolute path (the approver's run reads the same file)", f)
		}
	}
	return nil
}

// MaxReason is the longest reason a proposal keeps (bytes); MaxTargets
// the most charges one proposal names.
const (
	MaxReason  = 500
	MaxTargets = 10_000
)

// Target is one thing a proposal touches.
type Target struct {
	ChargeID string `json:"chargeId,omitempty"`
	// DLQID is the DLQ entry (Redrive, Reopen); "" for a record (Renotify).
	DLQID    string `json:"dlqId,omitempty"`
	Account  string `json:"account,omitempty"` // masked
	Minor    int64  `json:"minor,omitempty"`
	Currency string `json:"currency,omitempty"`
	// Code is the DLQ entry's reason code, or the record's status (the
	// break's kind, Reconcile).
	Code string `json:"code,omitempty"`
	// BreakID and BankKeys are a reconciliation break's, as frozen at the
	// proposal: its run acts only on a break with the same id.
	BreakID  string   `json:"breakId,omitempty"`
	BankKeys []string `json:"bankKeys,omitempty"`
	// Collects: resolving the break records money as collected
	// (reconcile.Break.Collects), frozen with it.
	Collects bool `json:"collects,omitempty"`
	// RecordToken, RecordGeneration and RecordState are the charge's
	// record as a Reopen proposal froze it (its FAILED record's fencing
	// token and key generation): the run reopens only that very record,
	// under a token derived from the proposal (ReopenToken), and a record
	// changed since is skipped. A Reopen target without a RecordToken (a
	// proposal made before they were frozen) is not acted on: propose it
	// again.
	RecordToken      string `json:"recordToken,omitempty"`
	RecordGeneration int    `json:"recordGeneration,omitempty"`
	RecordState      string `json:"recordState,omitempty"`
	// DeclineCode is the bank's decline code in the charge's record as
	// the proposal read it (a Reopen's, or a Redrive chosen by decline
	// code); HardDecline marks a hard one (charge.HardDecline), which a
	// reopen with a new attempt presents again only under the policy's
	// represent-hard-decline, once another operator approved it.
	DeclineCode string `json:"declineCode,omitempty"`
	HardDecline bool   `json:"hardDecline,omitempty"`
}

// Held is a charge a proposal matched but does not touch, with why (a
// hard decline, for a reopen with a new attempt where the policy has no
// represent-hard-decline): shown to the proposer and the approver.
type Held struct {
	Target
	Why string `json:"why"`
}

// Key names t among a proposal's targets.
func (t Target) Key() string {
	if t.DLQID != "" {
		return "dlq:" + t.DLQID
	}
	return "charge:" + t.ChargeID
}

// Name is t as a person reads it: the charge, else the DLQ entry.
func (t Target) Name() string {
	if t.ChargeID != "" {
		return t.ChargeID
	}
	return "message " + t.DLQID
}

// Total is a sum of amounts in one currency, in minor units.
type Total struct {
	Currency string `json:"currency"`
	Minor    int64  `json:"minor"`
	Count    int    `json:"count"`
}

// Totals sums targets by currency (those without an amount under "").
func Totals(ts []Target) []Total {
	var out []Total
	for _, t := range ts {
		i := slices.IndexFunc(out, func(x Total) bool { return x.Currency == t.Currency })
		if i < 0 {
			out = append(out, Total{Currency: t.Currency})
			i = len(out) - 1
		}
		out[i].Minor += t.Minor
		out[i].Count++
	}
	slices.SortFunc(out, func(a, b Total) int { return strings.Compare(a.Currency, b.Currency) })
	return out
}

// State is where a proposal is.
type State string

// The states: Pending → Approved → Running → Done, or Pending → Rejected,
// or Pending/Approved → Expired (approved but not started in time).
const (
	Pending  State = "pending"
	Approved State = "approved"
	Rejected State = "rejected"
	Expired  State = "expired"
	Running  State = "running"
	Done     State = "done"
)

// Actor is who acts: a person, in a role, from the console or the
// command line.
type Actor struct {
	Name string `json:"name"`
	Role string `json:"role,omitempty"`
	Via  string `json:"via"` // console or cli
}

// Same says whether a and b are one person (names compared as people
// read them: case and surrounding space do not make another person).
func (a Actor) Same(b Actor) bool {
	return strings.EqualFold(strings.TrimSpace(a.Name), strings.TrimSpace(b.Name))
}

// Outcome is what became of one target.
type Outcome struct {
	// Result: moved, reopened, sent (done); held back, skipped (left as
	// it was, with why); failed (could not act; why).
	Result string    `json:"result"`
	Why    string    `json:"why,omitempty"`
	At     time.Time `json:"at"`
}

// Proposal is one proposed action and everything that became of it.
type Proposal struct {
	ID       string    `json:"id"`
	Spec     Spec      `json:"spec"`
	Proposer Actor     `json:"proposer"`
	At       time.Time `json:"at"`
	Expires  time.Time `json:"expires"`
	// Needs says why a second operator must approve ("": the policy
	// does not ask it; the proposer may run it).
	Needs   string   `json:"needs,omitempty"`
	Targets []Target `json:"targets"`
	Totals  []Total  `json:"totals"`
	// Held are the charges matched but held back at the proposal (never
	// acted on), with why.
	Held []Held `json:"held,omitempty"`

	State     State     `json:"state"`
	Decider   *Actor    `json:"decider,omitempty"`
	DecidedAt time.Time `json:"decidedAt,omitzero"`
	// Why is the rejecter's reason.
	Why string `json:"why,omitempty"`

	// Outcomes by Target.Key: what was done, batch by batch.
	Outcomes   map[string]Outcome `json:"outcomes,omitempty"`
	Batches    int                `json:"batches,omitempty"`
	FinishedAt time.Time          `json:"finishedAt,omitzero"`

	// representHard: the kept policy has represent-hard-decline at the
	// run (Book.Run sets it for the executor; false anywhere else, so an
	// executor handed a proposal by another path refuses hard declines).
	representHard bool
}

// Remaining are the targets not acted on yet.
func (p *Proposal) Remaining() []Target {
	var out []Target
	for _, t := range p.Targets {
		if _, ok := p.Outcomes[t.Key()]; !ok {
			out = append(out, t)
		}
	}
	return out
}

// Counts are the outcomes by result.
func (p *Proposal) Counts() map[string]int {
	out := map[string]int{}
	for _, o := range p.Outcomes {
		out[o.Result]++
	}
	return out
}

// Progress is "done of all".
func (p *Proposal) Progress() (done, all int) { return len(p.Outcomes), len(p.Targets) }

// Sample is the first n targets.
func (p *Proposal) Sample(n int) []Target { return p.Targets[:min(n, len(p.Targets))] }

// newID is a proposal id: P- and 10 hex digits.
func newID() string {
	b := make([]byte, 5)
	_, _ = rand.Read(b)
	return "P-" + hex.EncodeToString(b)
}

// validID says whether s is an id newID makes (so that it may name a file).
func validID(s string) bool {
	if len(s) != 12 || !strings.HasPrefix(s, "P-") {
		return false
	}
	_, err := hex.DecodeString(s[2:])
	return err == nil && strings.ToLower(s[2:]) == s[2:]
}

// location is TimeZone's (nil for "": UTC).
func (s Spec) location() (*time.Location, error) {
	if s.TimeZone == "" {
		return nil, nil
	}
	if len(s.TimeZone) > 100 || strings.IndexFunc(s.TimeZone, unicode.IsControl) >= 0 {
		return nil, errors.New("--time-zone: not a time zone")
	}
	loc, err := time.LoadLocation(s.TimeZone)
	if err != nil {
		return nil, fmt.Errorf("--time-zone %q: %v", s.TimeZone, err)
	}
	return loc, nil
}
