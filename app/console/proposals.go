package console

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/app/service/approval"
	"github.com/finedge/idempotent-consumer/app/service/cli"
)

// proposals are the console's bulk actions and four-eyes approvals: the
// same proposals (approval.Book, beside the audit trail) as the command
// line's, so that one operator may propose in one and another approve in
// the other.
type proposals struct {
	mu      sync.Mutex
	running map[string]context.CancelFunc // runs this console started, by proposal
	wg      sync.WaitGroup
}

func (c *Console) proposalRoutes(mux *http.ServeMux) {
	if c.o.Approvals == nil {
		return
	}
	mux.Handle("GET /proposals", c.authed(c.proposalsPage))
	mux.Handle("GET /proposals/show", c.authed(c.proposalPage))
	mux.Handle("POST /proposals/new", c.action(c.propose))
	mux.Handle("POST /proposals/approve", c.action(c.decideProposal("approve")))
	mux.Handle("POST /proposals/reject", c.action(c.decideProposal("reject")))
	mux.Handle("POST /proposals/run", c.action(c.decideProposal("run")))
}

func (c *Console) approvalBackend() approval.Backend {
	return approval.Backend{Queue: c.o.Queue, Store: c.o.Store, Retention: c.o.Retention, Renotifier: c.o.Renotifier,
		Guard: c.rguard, Fingerprints: c.o.Fingerprints, SkewMargin: max(c.o.SkewMargin, 0)}
}

func actorOf(id Identity) approval.Actor {
	return approval.Actor{Name: id.Name, Role: id.Role.String(), Via: "console"}
}

// proposalView is a proposal as its page shows it.
type proposalView struct {
	approval.Proposal
	Describe, Totals, Counts string
	Done, All, Percent       int
	Sample                   []targetView
	NotDone                  []targetView
	Held                     []targetView
	CanApprove, CanRun       bool
	Mine                     bool
	// Money spells out what the proposal does with money (moneyNote).
	Money string
}

type targetView struct {
	Name, Account, Amount, Code, Result, Why string
	// Decline is the bank's decline code as the proposal read it;
	// Hard marks a hard decline (with why, in Decline).
	Decline string
	Hard    bool
	// ChargeID links the row to its charge; Generation, Reason (its
	// decline code or reason) and Step are its record now (the sample
	// only: proposalSample), "" unread.
	ChargeID, Generation, Reason string
	Step                         nextStep
}

func (c *Console) viewProposal(p approval.Proposal, who Identity) proposalView {
	// Reasons are free text (the command line's as typed): an account
	// number in one is shown masked.
	p.Spec.Reason, p.Why = charge.MaskText(p.Spec.Reason), charge.MaskText(p.Why)
	v := proposalView{Proposal: p, Describe: p.Spec.Describe(), Totals: approval.FormatTotals(p.Totals), Counts: approval.FormatCounts(p.Counts())}
	v.Done, v.All = p.Progress()
	if v.All > 0 {
		v.Percent = v.Done * 100 / v.All
	}
	tv := func(t approval.Target) targetView {
		x := targetView{Name: t.Name(), ChargeID: t.ChargeID, Account: approval.MaskedAccount(t), Code: t.Code, Decline: approval.DeclineNote(t), Hard: t.HardDecline}
		if t.Currency != "" {
			x.Amount = charge.Money{Minor: t.Minor, Currency: charge.Currency(t.Currency)}.String()
		}
		if o, ok := p.Outcomes[t.Key()]; ok {
			x.Result, x.Why = o.Result, o.Why
		}
		return x
	}
	for _, t := range p.Sample(20) {
		v.Sample = append(v.Sample, tv(t))
	}
	for _, h := range p.Held[:min(len(p.Held), 200)] {
		x := tv(h.Target)
		x.Result, x.Why = "held back", h.Why
		v.Held = append(v.Held, x)
	}
	for _, t := range p.Targets {
		if o, ok := p.Outcomes[t.Key()]; ok && o.Result != "moved" && o.Result != "reopened" && o.Result != "sent" && o.Result != "adopted" && o.Result != "resolved" && len(v.NotDone) < 200 {
			v.NotDone = append(v.NotDone, tv(t))
		}
	}
	me := actorOf(who)
	v.Mine = me.Same(p.Proposer)
	v.CanApprove = who.Role == Operator && p.State == approval.Pending && !v.Mine
	v.CanRun = who.Role == Operator && (p.State == approval.Approved || (p.State == approval.Running && !c.o.Approvals.Busy(p.ID)))
	return v
}

func (c *Console) proposalsPage(w http.ResponseWriter, r *http.Request) {
	ps, err := c.o.Approvals.List()
	if err != nil {
		c.backendError(w, r, "read the proposals", err)
		return
	}
	var open, closed []proposalView
	for _, p := range ps {
		v := c.viewProposal(p, identity(r))
		switch p.State {
		case approval.Pending, approval.Approved, approval.Running:
			open = append(open, v)
		default:
			if len(closed) < 50 {
				closed = append(closed, v)
			}
		}
	}
	q := r.URL.Query()
	c.render(w, r, http.StatusOK, "proposals", map[string]any{"Open": open, "Closed": closed, "Policy": c.o.Approvals.Policy().String(),
		"TTL": c.o.Approvals.TTL().String(), "Renotify": c.o.Renotifier != nil,
		"Kind": clipParam(q.Get("kind")), "Codes": clipParam(q.Get("reason_code")), "DeclineCodes": clipParam(q.Get("decline_code")), "OlderThan": clipParam(q.Get("older_than")), "IDs": clipParam(q.Get("charge_id"))})
}

func (c *Console) proposalPage(w http.ResponseWriter, r *http.Request) {
	p, err := c.o.Approvals.Get(r.URL.Query().Get("id"))
	if errors.Is(err, approval.ErrNotFound) {
		c.render(w, r, http.StatusNotFound, "message", map[string]any{"Title": "No such proposal", "Message": "No proposal with that id.", "Link": "/proposals", "LinkText": "the proposals"})
		return
	}
	if err != nil {
		c.backendError(w, r, "read the proposal", err)
		return
	}
	v := c.viewProposal(p, identity(r))
	c.proposalSample(r.Context(), v.Sample, p.State == approval.Running)
	v.Money = moneyNote(p.Spec, v.Totals)
	c.render(w, r, http.StatusOK, "proposal", map[string]any{"P": v, "Refresh": p.State == approval.Running})
}

// propose makes a proposal from the form: what it chooses, frozen.
func (c *Console) propose(w http.ResponseWriter, r *http.Request, id Identity) AuditEntry {
	e := AuditEntry{Action: "proposals/new"}
	spec := approval.Spec{Kind: approval.Kind(r.PostFormValue("kind")), Reason: charge.Clip(charge.MaskText(charge.Printable(strings.TrimSpace(r.PostFormValue("reason")))), 500),
		Codes: cli.SplitList(r.PostFormValue("reason_code")), DeclineCodes: cli.SplitList(r.PostFormValue("decline_code")), ChargeIDs: cli.SplitList(strings.ReplaceAll(r.PostFormValue("charge_id"), "\n", ",")),
		Force: r.PostFormValue("force") == "on", NewAttempt: r.PostFormValue("new_attempt") == "on"}
	e.Reason = spec.Reason
	back := "/proposals"
	if s := strings.TrimSpace(r.PostFormValue("older_than")); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d < 0 {
			e.Result, e.Detail = "refused", "a bad age"
			c.result(w, r, http.StatusBadRequest, "Not proposed", "The age is not a duration (say 2h, 36h, 90m).", back, "back")
			return e
		}
		spec.OlderThan = d
	}
	if len(spec.ChargeIDs) > 10_000 {
		e.Result = "refused"
		c.result(w, r, http.StatusBadRequest, "Not proposed", "At most 10,000 charge ids in one proposal.", back, "back")
		return e
	}
	if err := spec.Check(); err != nil {
		e.Result, e.Detail = "refused", err.Error()
		c.result(w, r, http.StatusBadRequest, "Not proposed", err.Error(), back, "back")
		return e
	}
	if spec.Kind == approval.Renotify && c.o.Renotifier == nil {
		e.Result = "refused"
		c.result(w, r, http.StatusConflict, "Not proposed", "This console has no notification channel (start it with --notify).", back, "back")
		return e
	}
	targets, err := c.approvalBackend().Select(r.Context(), spec, c.o.Now())
	if err != nil {
		e.Result, e.Detail = "refused", charge.Clip(charge.MaskText(err.Error()), 300)
		c.result(w, r, http.StatusConflict, "Not proposed", e.Detail, back, "back")
		return e
	}
	// The book writes the proposal's own line (with its id): this
	// action's line says where it went.
	p, err := c.o.Approvals.Propose(actorOf(id), spec, targets)
	if err != nil {
		e.Result, e.Detail = "failed", charge.Clip(err.Error(), 300)
		c.result(w, r, http.StatusConflict, "Not proposed", e.Detail, back, "back")
		return e
	}
	e.Proposal, e.Result = p.ID, string(p.State)
	e.Detail = fmt.Sprintf("%d charge(s), %s", len(p.Targets), approval.FormatTotals(p.Totals))
	if len(p.Held) > 0 {
		e.Detail += fmt.Sprintf("; %d held back (hard declines)", len(p.Held))
	}
	next := "It needs another operator's approval: " + p.Needs + "."
	if p.State == approval.Approved {
		next = "The policy does not ask for a second operator: run it from its page."
	}
	c.result(w, r, http.StatusOK, "Proposed", fmt.Sprintf("Proposal %s: %s, %s. %s", p.ID, p.Spec.Describe(), e.Detail, next),
		"/proposals/show?id="+urlQuery(p.ID), "the proposal")
	return e
}

// decideProposal approves, rejects or runs a proposal; an approved one
// runs at once, in the background, its progress on its page.
func (c *Console) decideProposal(step string) func(http.ResponseWriter, *http.Request, Identity) AuditEntry {
	return func(w http.ResponseWriter, r *http.Request, id Identity) AuditEntry {
		pid := r.PostFormValue("id")
		e := AuditEntry{Action: "proposals/" + step, Proposal: charge.Clip(charge.Printable(pid), 64)}
		back := "/proposals/show?id=" + urlQuery(pid)
		who := actorOf(id)
		var err error
		switch step {
		case "approve":
			_, err = c.o.Approvals.Approve(pid, who)
		case "reject":
			_, err = c.o.Approvals.Reject(pid, who, charge.Clip(charge.MaskText(charge.Printable(strings.TrimSpace(r.PostFormValue("reason")))), 500))
		}
		if err == nil && step != "reject" {
			err = c.startRun(pid, who)
		}
		switch {
		case errors.Is(err, approval.ErrSamePerson):
			e.Result = "refused"
			c.result(w, r, http.StatusForbidden, "Not approved", "You proposed this: another operator must approve it (four-eyes).", back, "the proposal")
		case errors.Is(err, approval.ErrNotFound):
			e.Result = "not found"
			c.result(w, r, http.StatusNotFound, "No such proposal", "No proposal with that id.", "/proposals", "the proposals")
		case errors.Is(err, approval.ErrState), errors.Is(err, approval.ErrBusy):
			e.Result, e.Detail = "refused", charge.Clip(err.Error(), 300)
			c.result(w, r, http.StatusConflict, "Not done", err.Error(), back, "the proposal")
		case err != nil:
			e.Result, e.Detail = "failed", charge.Clip(err.Error(), 300)
			c.result(w, r, http.StatusBadRequest, "Not done", err.Error(), back, "the proposal")
		default:
			e.Result = map[string]string{"approve": "approved", "reject": "rejected", "run": "running"}[step]
			msg := "Rejected: nothing of it will run."
			if step != "reject" {
				msg = "Running, in batches: its page shows the progress."
			}
			c.result(w, r, http.StatusOK, strings.ToUpper(step[:1])+step[1:], msg, back, "the proposal")
		}
		return e
	}
}

// startRun runs proposal pid in the background (until done or the
// console stops; a stopped run is resumed from its page or the command
// line). It returns once the run is taken, or with why not.
func (c *Console) startRun(pid string, who approval.Actor) error {
	c.props.mu.Lock()
	defer c.props.mu.Unlock()
	if c.runCtx == nil {
		return errors.New("the console is not running")
	}
	if _, ok := c.props.running[pid]; ok {
		return fmt.Errorf("%w (in this console)", approval.ErrBusy)
	}
	if p, err := c.o.Approvals.Get(pid); err != nil {
		return err
	} else if p.State == approval.Pending {
		return fmt.Errorf("%w: it waits for another operator's approval (%s)", approval.ErrState, p.Needs)
	}
	ctx, cancel := context.WithCancel(c.runCtx)
	if c.props.running == nil {
		c.props.running = map[string]context.CancelFunc{}
	}
	c.props.running[pid] = cancel
	started := make(chan error, 1)
	c.props.wg.Add(1)
	go func() {
		defer c.props.wg.Done()
		defer func() {
			c.props.mu.Lock()
			delete(c.props.running, pid)
			c.props.mu.Unlock()
			cancel()
		}()
		p, err := c.o.Approvals.Run(ctx, pid, who, c.approvalBackend(), nil)
		select {
		case started <- err:
		default:
		}
		if err != nil {
			c.o.Logger.Error("console: proposal run stopped", "proposal", pid, "error", err)
			return
		}
		c.o.Logger.Info("console: proposal done", "proposal", pid, "counts", approval.FormatCounts(p.Counts()))
	}()
	// A run refused at once (busy elsewhere, not approved) is said now;
	// one that took the proposal goes on in the background.
	select {
	case err := <-started:
		if err != nil && !errors.Is(err, context.Canceled) {
			return err
		}
	case <-time.After(200 * time.Millisecond):
	}
	return nil
}
