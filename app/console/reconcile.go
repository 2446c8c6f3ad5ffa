package console

import (
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/app/reconcile"
	"github.com/finedge/idempotent-consumer/app/reconcile/statement"
	"github.com/finedge/idempotent-consumer/app/service/approval"
)

// The Reconciliation page shows the report chargerecovery reconcile
// --report-file keeps (Options.ReconcileReport): the run's figures and its
// open breaks, each with what to do, and — for an operator — a form that
// resolves it against the statement the report names (reconcile.Resolve:
// a posted_not_recorded break is adopted, any other marked resolved). A
// break resolved since the report was made is left out (Report.Open).

// breakView is a break as the page shows it: accounts masked (again: the
// report holds them masked), text from outside printable.
type breakView struct {
	Kind, ChargeID, ID, Account string
	Record                      string // "IN_PROGRESS gen 1", "none"
	Posted                      []string
	Detail, Action              string
	// Unverified: adopting it needs the operator's word that she checked
	// the amount by hand (a checkbox).
	Unverified bool
}

type reconciliationView struct {
	// Problem, when set, is why there is no report to show; Configure
	// says the page is not configured at all.
	Configure bool
	Problem   string
	File      string

	Report     reconcile.Report
	RunAt      time.Time
	Counts     []kindCount
	Breaks     []breakView
	Notes      []string
	Statements []string // base names
	Collection string   // the collection account, masked
	// Unchecked: the resolutions could not be looked up; every break of
	// the report is listed.
	Unchecked bool
	// Propose: proposals are kept here (a Propose button beside an
	// adoption: four-eyes under reconcile-adopt).
	Propose bool
}

type kindCount struct {
	Kind  string
	Count int
}

func printable(s string) string { return charge.Printable(s) }

func viewBreak(b reconcile.Break) breakView {
	v := breakView{Kind: printable(string(b.Kind)), ChargeID: printable(b.ChargeID), ID: printable(b.ID), Account: charge.MaskAccount(printable(b.Account)),
		Detail: printable(b.Detail), Action: printable(b.Action), Record: "none", Unverified: b.Unverified}
	if b.Account == "" {
		v.Account = "-"
	}
	if b.State != "" {
		v.Record = strings.TrimSpace(fmt.Sprintf("%s %s gen %d", printable(b.State), printable(b.Status), b.Generation))
		if b.Reference != "" {
			v.Record += ", reference " + charge.ShowRef(b.Reference)
		}
	}
	for _, p := range b.Posted {
		s := fmt.Sprintf("%s %s booked %s", p.Amount, p.BankKey, p.BookingDate)
		if p.Account != "" {
			s += " from " + charge.MaskAccount(p.Account)
		}
		if p.Reference != "" {
			s += ", reference " + p.Reference
		}
		switch {
		case p.Return:
			s = "return " + statement.ReturnReasonText(p.ReturnReason) + ": " + s
		case p.Reversal:
			s = "reversal: " + s
		}
		v.Posted = append(v.Posted, printable(s))
	}
	return v
}

// readReport reads the kept report; problem says, for a person, why it
// cannot be shown.
func (c *Console) readReport() (rep reconcile.Report, problem string) {
	rep, err := reconcile.ReadReportFile(c.o.ReconcileReport)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return rep, "There is no report at " + c.o.ReconcileReport + " yet: it is written by chargerecovery reconcile --report-file " + c.o.ReconcileReport + " (the same file, IC_RECONCILE_REPORT_FILE)."
	case err != nil:
		c.o.Logger.Warn("console: the reconciliation report cannot be read", "file", c.o.ReconcileReport, "error", err)
		return rep, "The report at " + c.o.ReconcileReport + " cannot be read: " + charge.Clip(printable(err.Error()), 300) + ". Run chargerecovery reconcile --report-file again to write it whole."
	case rep.Period.From == "" || rep.RunAt.IsZero():
		return rep, "The file at " + c.o.ReconcileReport + " is not a reconciliation report (no period or run time): run chargerecovery reconcile --report-file again."
	}
	return rep, ""
}

func (c *Console) reconciliationPage(w http.ResponseWriter, r *http.Request) {
	v := reconciliationView{File: c.o.ReconcileReport, Propose: c.o.Approvals != nil}
	if c.o.ReconcileReport == "" {
		v.Configure = true
		c.render(w, r, http.StatusOK, "reconciliation", v)
		return
	}
	rep, problem := c.readReport()
	if problem != "" {
		v.Problem = problem
		c.render(w, r, http.StatusOK, "reconciliation", v)
		return
	}
	open, err := rep.Open(r.Context(), c.o.Store, c.o.Now())
	if err != nil {
		c.o.Logger.Warn("console: the resolutions of the reconciliation's breaks cannot be read", "error", err)
		v.Unchecked = true
	} else {
		rep = open
	}
	v.Report, v.RunAt = rep, rep.RunAt
	counts := rep.Counts()
	for _, k := range reconcile.Kinds {
		v.Counts = append(v.Counts, kindCount{string(k), counts[string(k)]})
	}
	for _, b := range rep.Breaks {
		v.Breaks = append(v.Breaks, viewBreak(b))
	}
	for _, n := range rep.Notes {
		v.Notes = append(v.Notes, printable(n))
	}
	if rep.CollectionAccount != "" {
		// The fee account's name is an identifier: masked only where it
		// carries an account-like run, the rule for every text shown.
		v.Collection = charge.MaskText(printable(rep.CollectionAccount))
	}
	for _, s := range rep.Statements {
		v.Statements = append(v.Statements, printable(s[strings.LastIndexAny(s, `/\`)+1:]))
	}
	c.render(w, r, http.StatusOK, "reconciliation", v)
}

// resolveBreak closes one break of the kept report: reconcile.Resolve for
// its charge against the statement the report names, as it stands now.
func (c *Console) resolveBreak(w http.ResponseWriter, r *http.Request, id Identity) AuditEntry {
	chargeID, reason := r.PostFormValue("id"), strings.TrimSpace(r.PostFormValue("reason"))
	kind, breakID := reconcile.Kind(r.PostFormValue("kind")), r.PostFormValue("break")
	e := AuditEntry{Action: "reconcile-resolve", ChargeID: chargeID, Reason: charge.Clip(charge.Printable(reason), 500)}
	back := "/reconciliation"
	refuse := func(code int, title, msg string) AuditEntry {
		e.Result, e.Detail = "refused", charge.Clip(msg, 300)
		c.result(w, r, code, title, msg, back, "back to the reconciliation")
		return e
	}
	if reason == "" {
		return refuse(http.StatusBadRequest, "Reason needed", "Say why the break is resolved: the reason stays with the resolution and in the audit trail.")
	}
	if !kind.Valid() {
		return refuse(http.StatusBadRequest, "Not resolved", "The form names no kind of break: reload the page and try again.")
	}
	if c.o.ReconcileReport == "" {
		return refuse(http.StatusConflict, "Not resolved", "This console has no reconciliation report (--reconcile-report-file).")
	}
	rep, problem := c.readReport()
	if problem != "" {
		return refuse(http.StatusConflict, "Not resolved", problem)
	}
	if !slices.ContainsFunc(rep.Breaks, func(b reconcile.Break) bool { return b.ChargeID == chargeID && b.Kind == kind && b.ID == breakID }) {
		return refuse(http.StatusConflict, "Not resolved", "That break is not in the report now (the report was written again since the page was shown): reload the page.")
	}
	if len(rep.Statements) == 0 {
		return refuse(http.StatusConflict, "Not resolved", "The report does not name the statement it read: resolve on the command line (chargerecovery reconcile resolve --statement …).")
	}
	e.Detail = fmt.Sprintf("%s break %s", kind, breakID)
	propose := r.PostFormValue("propose") == "1"
	// The policy may want it approved: an adoption under reconcile-adopt,
	// any resolve under bulk>0 (every action touching a charge).
	if c.o.Approvals != nil && (propose || c.o.Approvals.Policy().ReconcileAdopt || c.o.Approvals.Policy().Needs(approval.Spec{Kind: approval.Reconcile}, 1) != "") {
		if done, ok := c.reconcileFourEyes(w, r, id, &e, rep, breakID, propose); ok {
			return done
		}
	}
	read := reconcile.ReadFiles(rep.Statements, statement.Options{CollectionAccount: rep.CollectionAccount})
	res, err := reconcile.Resolve(r.Context(), reconcile.Options{Store: c.o.Store, Fingerprints: c.o.Fingerprints, Period: rep.Span(),
		Now: c.o.Now(), SkewMargin: max(c.o.SkewMargin, 0)}, read,
		reconcile.ResolveRequest{ChargeID: chargeID, Kind: kind, BreakID: breakID, Reason: e.Reason, Operator: id.Name + " (console)", Guard: c.rguard,
			Unverified: r.PostFormValue("unverified") == "1", Refunded: r.PostFormValue("refunded") == "1"})
	var fe *statement.FormatError
	switch {
	case res.Action == "adopted":
		e.Result = "adopted"
		ref := ""
		if res.Record != nil {
			ref = charge.ShowRef(charge.ReferenceOf(res.Record.Status, res.Record.Detail))
		}
		e.Detail = fmt.Sprintf("%s break %s: DONE with reference %s", res.Break.Kind, res.Break.ID, ref)
		msg := fmt.Sprintf("Adopted: the record of %s is DONE with reference %s (no debit).", chargeID, ref)
		if res.Record != nil {
			if _, kept := charge.PendingNotice(res.Record.Status, res.Record.Detail); kept {
				msg += " Its pre-debit notice is kept for renotify (Renotify on the charge's page sends it)."
			}
		}
		if err != nil {
			c.o.Logger.Error("console: adopted, but the resolution was not kept", "charge_id", charge.ShowID(chargeID), "error", err)
			e.Detail += "; the resolution was not kept (the next run does not show it: the record now matches)"
			msg += " Its resolution could not be kept (the console's log says why); the next run of the statement does not show it, as the record now matches."
		}
		c.result(w, r, http.StatusOK, "Adopted", msg, "/charge?id="+urlQuery(chargeID), "the charge")
	case err == nil:
		e.Result, e.Detail = res.Action, fmt.Sprintf("%s break %s marked resolved", res.Break.Kind, res.Break.ID)
		c.result(w, r, http.StatusOK, "Marked resolved", fmt.Sprintf("The %s break of %s is marked resolved: it does not come back on the next run of this statement.", res.Break.Kind, chargeID), back, "back to the reconciliation")
	case errors.Is(err, reconcile.ErrBreakChanged):
		// The break found now is not the one the operator saw and chose
		// (the statement or the record changed since the report): nothing
		// is done.
		e.Result, e.Detail = "refused", charge.Clip(charge.MaskText(printable(err.Error())), 300)
		c.result(w, r, http.StatusConflict, "Not resolved", "The break changed since the report: reload the page (run the reconciliation again if the report is stale). Nothing was done. "+e.Detail, back, "back to the reconciliation")
	case errors.Is(err, reconcile.ErrNoBreak), errors.Is(err, reconcile.ErrAmbiguous), errors.Is(err, reconcile.ErrUnchecked),
		errors.Is(err, reconcile.ErrChanged), errors.Is(err, reconcile.ErrNotCollectable):
		e.Result, e.Detail = "refused", charge.Clip(charge.MaskText(printable(err.Error())), 300)
		c.result(w, r, http.StatusConflict, "Not resolved", e.Detail, back, "back to the reconciliation")
	case errors.As(err, &fe), errors.Is(err, fs.ErrNotExist), errors.Is(err, fs.ErrPermission), errors.Is(err, reconcile.ErrNoPeriod):
		e.Result, e.Detail = "failed", charge.Clip(charge.MaskText(printable(err.Error())), 300)
		c.result(w, r, http.StatusConflict, "Not resolved", "The statement the report names cannot be read now: "+e.Detail, back, "back to the reconciliation")
	default:
		c.o.Logger.Error("console: reconcile resolve failed", "charge_id", charge.ShowID(chargeID), "error", err)
		e.Result, e.Detail = "failed", charge.Clip(charge.MaskText(printable(err.Error())), 300)
		c.result(w, r, http.StatusBadGateway, "Not resolved", "The break was not resolved: "+e.Detail, back, "back to the reconciliation")
	}
	return e
}

// reconcileFourEyes finds the break as it is now (the reconciliation of
// its charge alone, nothing written): an adoption under reconcile-adopt
// is refused, pointing to its proposal; with propose the proposal is made
// (the break frozen). ok says the request is answered here; else the
// resolve goes on.
func (c *Console) reconcileFourEyes(w http.ResponseWriter, r *http.Request, id Identity, e *AuditEntry, rep reconcile.Report, breakID string, propose bool) (AuditEntry, bool) {
	back := "/reconciliation"
	span := rep.Span()
	spec := approval.Spec{Kind: approval.Reconcile, Reason: e.Reason, ChargeIDs: []string{e.ChargeID}, Statements: rep.Statements,
		CollectionAccount: rep.CollectionAccount, From: span.From, To: span.To, BreakKind: reconcile.Kind(r.PostFormValue("kind")),
		Unverified: r.PostFormValue("unverified") == "1", Refunded: r.PostFormValue("refunded") == "1"}
	refuse := func(code int, msg string) (AuditEntry, bool) {
		msg = charge.Clip(charge.MaskText(printable(msg)), 1000)
		e.Result, e.Detail = "refused", charge.Clip(msg, 300)
		c.result(w, r, code, "Not resolved", msg, back, "back to the reconciliation")
		return *e, true
	}
	if err := spec.Check(); err != nil {
		return refuse(http.StatusConflict, "The break cannot be proposed: "+err.Error())
	}
	targets, err := c.approvalBackend().Select(r.Context(), spec, c.o.Now())
	if err != nil {
		// Fails closed: what cannot be judged is not resolved.
		return refuse(http.StatusConflict, "Nothing done: "+err.Error())
	}
	if targets[0].BreakID != breakID {
		return refuse(http.StatusConflict, "The break changed since the report was made (the record or the statement is not what the report saw): run the reconciliation again, then reload the page.")
	}
	spec.BreakKind, spec.Collects = reconcile.Kind(targets[0].Code), targets[0].Collects
	if !propose {
		why := c.o.Approvals.Policy().Needs(spec, 1)
		if why == "" {
			return AuditEntry{}, false
		}
		return refuse(http.StatusConflict, fmt.Sprintf("Needs another operator's approval (%s): nothing was done. Propose it (the Propose button beside the break) and have another operator approve it on the Proposals page; or on the command line: chargerecovery approvals propose reconcile --charge-id %s --statement %s --kind %s --reason TEXT.",
			why, e.ChargeID, strings.Join(rep.Statements, ","), spec.BreakKind))
	}
	p, err := c.o.Approvals.Propose(actorOf(id), spec, targets)
	if err != nil {
		e.Result, e.Detail = "failed", charge.Clip(err.Error(), 300)
		c.result(w, r, http.StatusConflict, "Not proposed", e.Detail, back, "back to the reconciliation")
		return *e, true
	}
	e.Proposal, e.Result = p.ID, "proposed"
	e.Detail = fmt.Sprintf("%s break %s: proposal %s, %s", spec.BreakKind, breakID, p.ID, p.State)
	next := "It needs another operator's approval: " + p.Needs + "."
	if p.State == approval.Approved {
		next = "The policy does not ask for a second operator: run it from its page."
	}
	c.result(w, r, http.StatusOK, "Proposed", fmt.Sprintf("Proposal %s: %s. %s", p.ID, p.Spec.Describe(), next), "/proposals/show?id="+urlQuery(p.ID), "the proposal")
	return *e, true
}
