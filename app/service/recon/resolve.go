package recon

import (
	"context"
	"fmt"
	"github.com/finedge/idempotent-consumer/app/service/operate"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/app/reconcile"
	"github.com/finedge/idempotent-consumer/app/service/approval"
	"github.com/finedge/idempotent-consumer/app/service/cli"
	"github.com/finedge/idempotent-consumer/app/service/session"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
)

// ResolveRequest is one break to close (reconcile resolve's flags), and
// the session it is done under.
type ResolveRequest struct {
	// ChargeID is the break's id as the report shows it: a charge id, the
	// bank key of an unknown posting, or either masked.
	ChargeID string
	// Kind is which break, when the charge has several ("": its only).
	Kind reconcile.Kind
	// Reason is why it is resolved (required).
	Reason string
	// Unverified, NoticeSent and Refunded are as reconcile.ResolveRequest's.
	Unverified, NoticeSent, Refunded bool
	// Lease and Retention (positive) and SkewMargin (not negative) are
	// serve's, for the claim an adoption takes.
	Lease, Retention, SkewMargin time.Duration

	// Session is the trail and the policy it is done under.
	Session *session.Session
	// Who is the person acting, asked once the policy lets it be done;
	// Claimed is who says she acts, for the audit line of a refusal.
	Who     func() (approval.Actor, error)
	Claimed func() approval.Actor
	// Log gets the audit lines as they are written (stderr).
	Log io.Writer
}

// Check checks the request before anything is read (usage errors).
func (r ResolveRequest) Check() error {
	// A break's id as the report shows it: a charge id, the bank key of
	// an unknown posting, or either masked (reconcile.ShowKey).
	if _, ok := reconcile.ChargeOf(r.ChargeID); !ok && !strings.ContainsAny(r.ChargeID, "~_*") {
		return cli.Usagef("%q is not a charge id (nor the bank key of an unknown posting)", r.ChargeID)
	}
	if err := CheckKind(r.Kind); err != nil {
		return err
	}
	if strings.TrimSpace(r.Reason) == "" {
		return cli.Usagef("say why (--reason): it is kept with the resolution and in the audit trail")
	}
	if r.Lease <= 0 || r.Retention <= 0 || r.SkewMargin < 0 {
		return cli.Usagef("--lease and --retention must be positive, --skew-margin not negative")
	}
	if r.Retention < 24*time.Hour {
		// The adopted record is what stops a redelivery of the charge
		// debiting again: kept as serve keeps its records.
		return cli.Usagef("--retention %s is under 24h: the record an adoption writes would lapse, and a redelivery of the charge debit again; give serve's --retention", r.Retention)
	}
	return nil
}

// Resolve closes r's break, as st shows it now, in store: where the
// policy wants an adoption approved it is judged first (by the
// reconciliation of this charge alone, nothing written) and refused with
// the command that proposes it; else resolved, audited, and pinned to the
// break judged.
func Resolve(ctx context.Context, store driver.Store, st Statement, r ResolveRequest) (reconcile.Resolved, error) {
	pinKind, pinBreak := r.Kind, ""
	if JudgesResolve(r.Session.Policy) {
		// Whether it is an adoption is the break's kind: found first. Said
		// before anything is done, whoever asks.
		spec := approval.Spec{Kind: approval.Reconcile, Reason: r.Reason, ChargeIDs: []string{r.ChargeID}, Statements: st.Files,
			CollectionAccount: st.CollectionAccount, TimeZone: st.TimeZone, From: st.Period.From, To: st.Period.To, BreakKind: r.Kind,
			Unverified: r.Unverified, NoticeSent: r.NoticeSent, Refunded: r.Refunded}
		be := approval.Backend{Store: store, Fingerprints: st.Fingerprints, SkewMargin: max(r.SkewMargin, 0)}
		ts, err := be.Select(ctx, spec, time.Now())
		if err != nil {
			// Fails closed: what cannot be judged is not resolved.
			return reconcile.Resolved{}, InputErr(fmt.Errorf("nothing done: %w", err))
		}
		spec.BreakKind, spec.Collects = reconcile.Kind(ts[0].Code), ts[0].Collects
		if why := r.Session.Policy.Needs(spec, 1); why != "" {
			return reconcile.Resolved{}, session.NeedsProposal(r.Session.Trail, r.Claimed(), "reconcile-resolve", why, ProposeCommand(spec, r.Kind != ""))
		}
		// The resolve below reads the statement again: it must close the
		// break decided on here, or nothing (ErrBreakChanged) — a statement
		// rewritten between the two reads must not turn a break that
		// needed no approval into an adoption by one operator.
		pinKind, pinBreak = spec.BreakKind, ts[0].BreakID
	}
	who, err := r.Who()
	if err != nil {
		return reconcile.Resolved{}, err
	}
	guard, err := Guard(store, r.Lease, r.Retention, r.SkewMargin)
	if err != nil {
		return reconcile.Resolved{}, err
	}
	var res reconcile.Resolved
	err = session.Act(r.Log, r.Session.Trail, who, "reconcile-resolve", r.ChargeID, r.Reason, func(w io.Writer) error {
		var err error
		res, err = reconcile.Resolve(ctx, reconcile.Options{Store: store, Fingerprints: st.Fingerprints, Period: st.Period, SkewMargin: r.SkewMargin}, st.Read,
			reconcile.ResolveRequest{ChargeID: r.ChargeID, Kind: pinKind, BreakID: pinBreak, Reason: r.Reason, Operator: who.Name, Guard: guard,
				Unverified: r.Unverified, NoticeSent: r.NoticeSent, Refunded: r.Refunded})
		if err != nil {
			return err
		}
		// As every other command's audit line: slog's JSON, with its time
		// and level.
		operate.AuditLog(w).LogAttrs(ctx, slog.LevelWarn, fmt.Sprintf("reconciliation break %s %s", res.Break.Kind, res.Action),
			slog.Bool("audit", true), slog.String("action", "reconcile-resolve"), slog.String("result", res.Action),
			slog.String("charge_id", charge.ShowID(r.ChargeID)), slog.String("reason", r.Reason), slog.String("kind", string(res.Break.Kind)),
			slog.String("break", res.Break.ID), slog.Any("bank_keys", res.Break.BankKeys))
		return nil
	})
	if err != nil {
		return reconcile.Resolved{}, InputErr(err)
	}
	return res, nil
}

// JudgesResolve says whether policy may want a resolve of one break
// approved: an adoption under reconcile-adopt, any resolve under bulk>0
// (every action touching a charge).
func JudgesResolve(policy approval.Policy) bool {
	return policy.ReconcileAdopt || policy.Needs(approval.Spec{Kind: approval.Reconcile}, 1) != ""
}

// CheckKind refuses a --kind that is not a kind of break ("": none given).
func CheckKind(k reconcile.Kind) error {
	if k != "" && !k.Valid() {
		return cli.Usagef("--kind %q is not one of %s", k, KindList())
	}
	return nil
}

// Fill has spec propose a resolution as st shows it: its files, account,
// zone and period.
func (st Statement) Fill(spec *approval.Spec) {
	spec.Statements, spec.CollectionAccount, spec.TimeZone = st.Files, st.CollectionAccount, st.TimeZone
	spec.From, spec.To = st.Period.From, st.Period.To
}

// ProposeCommand is the approvals propose command of spec, a reconcile
// resolution (withKind: the break's kind was given).
func ProposeCommand(spec approval.Spec, withKind bool) string {
	w := []string{"reconcile", "--charge-id", shellWord(spec.ChargeIDs[0]), "--statement", shellWord(strings.Join(spec.Statements, ","))}
	if spec.CollectionAccount != "" {
		w = append(w, "--collection-account", shellWord(spec.CollectionAccount))
	}
	if spec.TimeZone != "" {
		w = append(w, "--time-zone", shellWord(spec.TimeZone))
	}
	if !spec.From.IsZero() {
		w = append(w, "--from", spec.From.UTC().Format(time.RFC3339), "--to", spec.To.UTC().Format(time.RFC3339))
	}
	if withKind {
		w = append(w, "--kind", string(spec.BreakKind))
	}
	for _, f := range []struct {
		on   bool
		flag string
	}{{spec.Unverified, "--unverified"}, {spec.NoticeSent, "--notice-sent"}, {spec.Refunded, "--refunded"}} {
		if f.on {
			w = append(w, f.flag)
		}
	}
	return strings.Join(append(w, "--reason", strconv.Quote(spec.Reason)), " ")
}

// shellWord is s as one word of a shell command: as it is when plain,
// else single-quoted.
func shellWord(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_./:,@~+=-") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
