package console

import (
	"bytes"
	"cmp"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/finedge/idempotent-consumer/app/audit"
	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/app/chargehandler"
	"github.com/finedge/idempotent-consumer/app/service/approval"
	"github.com/finedge/idempotent-consumer/app/service/operate"
	"github.com/finedge/idempotent-consumer/app/service/status"
	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
	"github.com/finedge/idempotent-consumer/internal/safetext"
	"github.com/finedge/idempotent-consumer/queue"
)

// sample collects the overview once and keeps it.
func (c *Console) sample(ctx context.Context) {
	now := c.o.Now()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	// Where the queue's counts are estimates (SQS), the DLQ is read by
	// reason at most every DLQScan: a read receives every DLQ message and
	// holds it for a moment, and a reader every few seconds would keep
	// another reader (dlq list, redrive) waiting. The counts come from the
	// queue's attributes every sample.
	c.mu.Lock()
	lastScan := c.dlqScanAt
	c.mu.Unlock()
	scanned := false
	rep, err := status.Collect(ctx, status.Sources{Backend: c.o.Backend, Queue: c.o.Queue, Store: c.o.Store, MetricsURL: c.o.MetricsURL, Now: now,
		Sampled: true, // every Refresh: no Scan of a DynamoDB table
		ScanDLQ: func(d queue.Depth) bool {
			scanned = !d.Approximate || lastScan.IsZero() || now.Sub(lastScan) >= c.o.DLQScan
			return scanned
		}})
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case err == nil && scanned:
		c.dlqScanAt, c.dlqCodes, c.dlqUnseen = now, rep.DLQByCode, rep.DLQUnseen
	case err == nil:
		rep.DLQByCode, rep.DLQUnseen = c.dlqCodes, c.dlqUnseen
	}
	c.sampleAt, c.report, c.rerr = now, rep, err
	s := sample{At: now, Missing: true} // the backend did not answer: a gap in the charts
	if err != nil {
		c.o.Logger.Warn("console: overview sample failed", "error", err)
	} else {
		s = sample{At: now, Waiting: rep.Queue.Waiting, Debits: rep.Consumer.Debits}
		if scanned {
			s.DLQBy = rep.DLQByCode
		}
	}
	c.samples = append(c.samples, s)
	if len(c.samples) > c.o.Samples {
		c.samples = slices.Delete(c.samples, 0, len(c.samples)-c.o.Samples)
	}
}

// latest is the last sample, taken now if there is none yet or it is
// older than two refreshes (Run not running), and when the DLQ was last
// read by reason.
func (c *Console) latest(ctx context.Context) (status.Report, []sample, time.Time, time.Time, error) {
	c.mu.Lock()
	stale := c.sampleAt.IsZero() || c.o.Now().Sub(c.sampleAt) > 2*c.o.Refresh
	c.mu.Unlock()
	if stale {
		c.sample(ctx)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.report, slices.Clone(c.samples), c.sampleAt, c.dlqScanAt, c.rerr
}

type overviewView struct {
	Report status.Report
	Charts []svgChart
	At     time.Time
	Error  string
	// TrailCut is the witness's word that the audit trail no longer holds
	// a line it saw ("": none).
	TrailCut string
	Refresh  int // milliseconds
	Codes    []codeCount
	Counted  bool // the store counts records by state
	// Approximate: the counts are the queue's estimates (SQS); CodesAt
	// is when the DLQ was last read by reason, shown when it is older
	// than the sample.
	Approximate bool
	CodesAt     time.Time
	CodesOlder  bool
	Unseen      int
}

type codeCount struct {
	Code  string
	Count int
}

func (c *Console) overviewData(ctx context.Context) overviewView {
	rep, ss, at, codesAt, err := c.latest(ctx)
	v := overviewView{Report: rep, Charts: charts(ss, c.o.Refresh), At: at, Refresh: int(c.o.Refresh / time.Millisecond), Counted: rep.Records != nil,
		Approximate: rep.Queue.Approximate, CodesAt: codesAt, CodesOlder: !codesAt.IsZero() && codesAt.Before(at), Unseen: rep.DLQUnseen}
	if err != nil {
		v.Error = "the backend did not answer (the console's log says why)"
	}
	c.mu.Lock()
	v.TrailCut = c.trailCut
	c.mu.Unlock()
	for code, n := range rep.DLQByCode {
		v.Codes = append(v.Codes, codeCount{string(code), n})
	}
	slices.SortFunc(v.Codes, func(a, b codeCount) int { return strings.Compare(a.Code, b.Code) })
	return v
}

func (c *Console) overview(w http.ResponseWriter, r *http.Request) {
	c.render(w, r, http.StatusOK, "overview", c.overviewData(r.Context()))
}

func (c *Console) overviewFragment(w http.ResponseWriter, r *http.Request) {
	c.renderBlock(w, r, "overview", "panel", c.overviewData(r.Context()))
}

func (c *Console) overviewJSON(w http.ResponseWriter, r *http.Request) {
	v := c.overviewData(r.Context())
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v.Report)
}

// dlqList: the DLQ with filters (reason codes, charge id, older than).
func (c *Console) dlqList(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	now := c.o.Now()
	v := map[string]any{"Codes": chargehandler.DLQCodes(), "Reason": q.Get("reason"), "ChargeID": q.Get("charge"), "Older": q.Get("older")}
	o := operate.ListOptions{Now: now, Keep: dlqPageRows}
	if code := q.Get("reason"); code != "" {
		if bad, ok := operate.UnknownCode([]queue.Code{queue.Code(code)}); ok {
			c.render(w, r, http.StatusBadRequest, "message", map[string]any{"Title": "DLQ", "Message": fmt.Sprintf("%q is not a reason code", bad)})
			return
		}
		o.Codes = []queue.Code{queue.Code(code)}
	}
	if id := strings.TrimSpace(q.Get("charge")); id != "" {
		o.Match = operate.ChargeMatch([]string{id})
	}
	if older := q.Get("older"); older != "" {
		d, err := time.ParseDuration(older)
		if err != nil || d < 0 {
			c.render(w, r, http.StatusBadRequest, "message", map[string]any{"Title": "DLQ", "Message": "older than: give a duration such as 30m or 24h"})
			return
		}
		o.Before = now.Add(-d)
	}
	l, err := operate.List(r.Context(), c.o.Queue, o)
	if err != nil {
		c.backendError(w, r, "read the DLQ", err)
		return
	}
	v["Total"] = l.Total
	rows, looked := c.dlqRows(r.Context(), l.Entries[:min(len(l.Entries), dlqPageRows)], now)
	v["Entries"], v["Looked"] = rows, looked
	v["Incomplete"] = l.Incomplete()
	v["Bulk"] = c.o.Approvals != nil
	c.render(w, r, http.StatusOK, "dlq", v)
}

// dlqPageRows is how many entries the DLQ page shows (the oldest): the
// page holds about twice that, however large the DLQ.
const dlqPageRows = 500

// findEntry is the DLQ entry with id, with its body (masked); not found,
// what is not found says so (also when the DLQ could not all be seen).
func (c *Console) findEntry(ctx context.Context, id string) (operate.Entry, string, error) {
	l, err := operate.List(ctx, c.o.Queue, operate.ListOptions{Now: c.o.Now(), Bodies: true,
		Match: func(e queue.DLQEntry) bool { return e.ID == id }})
	switch {
	case err != nil:
		return operate.Entry{}, "", err
	case len(l.Entries) > 0:
		return l.Entries[0], "", nil
	case l.Unseen > 0:
		return operate.Entry{}, "no DLQ entry with that id among those seen; " + l.Incomplete(), nil
	}
	return operate.Entry{}, "no DLQ entry with that id (redriven, purged, or expired)", nil
}

func (c *Console) dlqEntry(w http.ResponseWriter, r *http.Request) {
	id := r.URL.Query().Get("id")
	e, missing, err := c.findEntry(r.Context(), id)
	switch {
	case err != nil:
		c.backendError(w, r, "read the DLQ", err)
		return
	case missing != "":
		c.render(w, r, http.StatusNotFound, "message", map[string]any{"Title": "DLQ entry", "Message": missing})
		return
	}
	v := map[string]any{"Entry": e}
	if e.Key != "" {
		rec, err := c.o.Store.Get(r.Context(), e.Key, c.o.Now())
		switch {
		case err == nil:
			v["Record"] = recordView(rec, c.o.Now())
		case !errors.Is(err, idempotency.ErrNotFound):
			c.backendError(w, r, "read the record", err)
			return
		}
	}
	c.render(w, r, http.StatusOK, "entry", v)
}

// recordFields is a record as the pages show it: text from outside
// printable and masked.
type recordFields struct {
	status.RecordJSON
	BankKey      string
	Reference    string // the core-banking reference of a DONE record
	Meaning      string
	Renotifiable bool
	Reopenable   bool
	NewAttemptOK bool
	// HardDecline is a FAILED record's hard decline, as "CODE (why)"
	// ("": none); HardDeclineProposed: the policy lets a new attempt on
	// it be proposed (represent-hard-decline), never done directly.
	HardDecline         string
	HardDeclineProposed bool
	LeaseText           string
	// WaitText is what a WAITING record waits for (next attempt, notice
	// lead); "" otherwise.
	WaitText string
	// Why is the decline code, or the reason the record is where it is;
	// Amount and Account what the record keeps in clear ("—": nothing,
	// a record written before summaries); Step what happens next and the
	// action that does it (cockpit.go).
	Why, Amount, Account string
	Step                 nextStep
}

func recordView(r driver.Record, now time.Time) recordFields {
	// What a record holds was masked before it was written (the bank's
	// text included); it is shown without control characters.
	clean := charge.Printable
	r.Status, r.Detail, r.ReopenReason, r.PrevStatus, r.PrevDetail = clean(r.Status), clean(r.Detail), clean(r.ReopenReason), clean(r.PrevStatus), clean(r.PrevDetail)
	// An operator's reason is free text (the command line's too): an
	// account number typed into it is masked, here and in the history
	// line that quotes it.
	r.ReopenReason = charge.MaskText(r.ReopenReason)
	h := make([]string, len(r.History))
	for i, x := range r.History {
		h[i] = charge.MaskText(clean(x))
	}
	r.History = h
	v := recordFields{RecordJSON: status.RecordJSONOf(r, now), BankKey: charge.ShowBankKey(charge.BankKey(r.Key, r.Generation)),
		Reopenable: r.State == driver.StateFailed, NewAttemptOK: charge.EligibleForNewGeneration(r) == nil,
		Renotifiable: r.State == driver.StateDone && r.Status == string(charge.DebitedNotificationFailed)}
	if r.State == driver.StateDone {
		v.Reference = charge.ShowRef(charge.ReferenceOf(r.Status, r.Detail))
	}
	if code := charge.DeclineCode(r.Detail); r.State == driver.StateFailed {
		if why, hard := charge.HardDecline(code); hard {
			v.HardDecline = charge.Printable(code) + " (" + why + ")"
		}
	}
	v.Meaning, v.LeaseText, v.WaitText = status.Meaning(r.State), status.LeaseText(r, now), status.WaitText(r, now)
	v.Why = declineOrReason(r)
	v.Amount, v.Account = summaryColumns(r)
	return v
}

// chargePage: one charge's record, its audit trail (the record's history),
// every generation and attempt, the bank reference, and its DLQ entries.
func (c *Console) chargePage(w http.ResponseWriter, r *http.Request) {
	id := r.URL.Query().Get("id")
	now := c.o.Now()
	v := map[string]any{"ID": id}
	rec, err := c.o.Store.Get(r.Context(), id, now)
	switch {
	case errors.Is(err, idempotency.ErrNotFound):
	case err != nil:
		c.backendError(w, r, "read the record", err)
		return
	default:
		v["Record"] = recordView(rec, now)
	}
	l, err := operate.List(r.Context(), c.o.Queue, operate.ListOptions{Now: now, Match: operate.ChargeMatch([]string{id})})
	if err != nil {
		c.backendError(w, r, "read the DLQ", err)
		return
	}
	v["Entries"], v["Incomplete"] = l.Entries, l.Incomplete()
	v["CanRenotify"] = c.o.Renotifier != nil
	// A charge not yet debited, while the consumer reports its posting
	// window closed (the last overview sample): it waits for the window.
	c.mu.Lock()
	window := c.report.Consumer.Window
	c.mu.Unlock()
	if strings.HasPrefix(window, "outside posting window") && (v["Record"] == nil || rec.State == driver.StateWaiting || rec.State == driver.StateInProgress) {
		v["Window"] = window
	}
	code := http.StatusOK
	if v["Record"] == nil && len(l.Entries) == 0 && l.Incomplete() == "" {
		code = http.StatusNotFound // neither a record nor a DLQ entry: the console's 404
	}
	c.render(w, r, code, "charge", v)
}

func (c *Console) stuckPage(w http.ResponseWriter, r *http.Request) {
	v := map[string]any{}
	sl, ok := c.o.Store.(driver.StuckLister)
	if !ok {
		v["Unsupported"] = true
	} else {
		now := c.o.Now()
		ctx, cancel := context.WithTimeout(r.Context(), c.o.ScanWait)
		recs, total, err := sl.Stuck(ctx, now, 200)
		timedOut := ctx.Err() == context.DeadlineExceeded && r.Context().Err() == nil
		cancel()
		switch {
		case err != nil && timedOut:
			c.scanTooLong(w, r, "the stuck claims", err)
			return
		case err != nil:
			c.backendError(w, r, "list stuck claims", err)
			return
		}
		var views []recordFields
		for _, rec := range recs {
			views = append(views, recordView(rec, now))
		}
		// A stuck claim whose message is on the DLQ (a reopened charge)
		// gets no delivery until someone redrives it: the page says so,
		// from a bounded read of the DLQ, and says when it could not look.
		look := c.lookInDLQ(r.Context(), expiredClaims(views, now))
		c.cockpit(views, now, &look)
		v["Total"], v["Records"], v["DLQProblem"] = total, views, look.Problem
	}
	c.render(w, r, http.StatusOK, "stuck", v)
}

func (c *Console) auditPage(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	f := audit.Filter{Operator: clipParam(q.Get("operator")), Action: clipParam(q.Get("action")), ChargeID: clipParam(q.Get("charge")),
		Proposal: clipParam(q.Get("proposal")), Via: clipParam(q.Get("via"))}
	entries, err := c.o.Audit.Recent(200, f)
	if err != nil {
		c.backendError(w, r, "read the audit trail", err)
		return
	}
	for i := range entries {
		// Reasons are free text (the command line's as typed): an
		// account number in one is shown masked.
		entries[i].Reason, entries[i].Detail = charge.MaskText(entries[i].Reason), charge.MaskText(entries[i].Detail)
	}
	c.render(w, r, http.StatusOK, "audit", map[string]any{"Entries": entries, "Filter": f,
		"Filtered": f != (audit.Filter{})})
}

// clipParam is a query parameter as a filter takes it: printable, short.
func clipParam(v string) string { return charge.Clip(charge.Printable(strings.TrimSpace(v)), 200) }

// confirm shows the confirmation form of an action.
func (c *Console) confirm(action string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id := r.URL.Query().Get("id")
		v := map[string]any{"Action": action, "ID": id}
		switch action {
		case "redrive":
			e, missing, err := c.findEntry(r.Context(), id)
			if err != nil {
				c.backendError(w, r, "read the DLQ", err)
				return
			}
			if missing != "" {
				c.render(w, r, http.StatusNotFound, "message", map[string]any{"Title": "Redrive", "Message": missing})
				return
			}
			v["Entry"] = e
			// What the redrive does with money, spelled out: the charge's
			// record decides.
			var rv *recordFields
			var seen *driver.Record
			if e.Key != "" {
				rec, err := c.o.Store.Get(r.Context(), e.Key, c.o.Now())
				switch {
				case err == nil:
					x := recordView(rec, c.o.Now())
					rv, seen = &x, &rec
				case !errors.Is(err, idempotency.ErrNotFound):
					c.backendError(w, r, "read the record", err)
					return
				}
			}
			v["Step"] = c.entryStep(e, rv, c.o.Now())
			// The POST acts only while the charge's record is the one
			// this page spelt out (the seal of this read).
			v["Seal"] = c.seal(id, e.ChargeID, seen)
		default:
			rec, err := c.o.Store.Get(r.Context(), id, c.o.Now())
			if errors.Is(err, idempotency.ErrNotFound) {
				c.render(w, r, http.StatusNotFound, "message", map[string]any{"Title": action, "Message": "no record for that charge"})
				return
			}
			if err != nil {
				c.backendError(w, r, "read the record", err)
				return
			}
			rv := recordView(rec, c.o.Now())
			if rv.HardDecline != "" && c.o.Approvals != nil && c.o.Approvals.Policy().RepresentHardDecline {
				rv.NewAttemptOK, rv.HardDeclineProposed = true, true
			}
			v["Record"] = rv
			v["NextKey"] = charge.ShowBankKey(charge.BankKey(rec.Key, rec.Generation+1))
			v["Seal"] = c.seal("", id, &rec)
			// Under four-eyes a reopen with a new attempt is proposed, not
			// done (reopen below): the page says so before the button.
			v["NewAttemptProposed"] = c.o.Approvals != nil && c.o.Approvals.Policy().ReopenNewAttempt
		}
		c.render(w, r, http.StatusOK, "confirm", v)
	}
}

// result is the page an action answers with.
func (c *Console) result(w http.ResponseWriter, r *http.Request, code int, title, msg, link, linkText string) {
	c.render(w, r, code, "message", map[string]any{"Title": title, "Message": msg, "Link": link, "LinkText": linkText})
}

// seal is what a confirmation page's form carries of the record it spelt
// out: an HMAC, under the console's key, of the DLQ entry (redrive), the
// charge, and its record's state, generation and token (none: no record).
// The POST re-reads the record and acts only while it is the same one, so
// a page that said "not debited again" or "under bank key …~2" never
// confirms what the record became meanwhile (reopened, declined again).
func (c *Console) seal(dlqID, chargeID string, rec *driver.Record) string {
	m := hmac.New(sha256.New, c.csrf)
	m.Write([]byte("confirm\x00" + dlqID + "\x00" + chargeID + "\x00"))
	if rec != nil {
		m.Write([]byte(string(rec.State) + "\x00" + strconv.Itoa(rec.Generation) + "\x00" + rec.Token))
	} else {
		m.Write([]byte("no record"))
	}
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// sealHolds re-reads the record of key (the charge id as the store keys
// it) and reports whether seal (a confirmation page's, made over chargeID
// as the page showed it) is still its; the record read (nil: none). An
// error is the store's.
func (c *Console) sealHolds(ctx context.Context, seal, dlqID, chargeID, key string) (bool, *driver.Record, error) {
	var cur *driver.Record
	if key != "" {
		rec, err := c.o.Store.Get(ctx, key, c.o.Now())
		switch {
		case err == nil:
			cur = &rec
		case !errors.Is(err, idempotency.ErrNotFound):
			return false, nil, err
		}
	}
	return hmac.Equal([]byte(seal), []byte(c.seal(dlqID, chargeID, cur))), cur, nil
}

// changedSince is the answer to a confirmed action whose record changed
// since its confirmation page was shown: nothing done.
func (c *Console) changedSince(w http.ResponseWriter, r *http.Request, e *AuditEntry, again string) {
	e.Result, e.Detail = "refused", "the record changed since its confirmation page was shown"
	c.result(w, r, http.StatusConflict, "Not done: the charge changed", "Nothing was done: the charge's record changed since its confirmation page was shown (another operator acted, or a delivery was processed), so what the page spelt out no longer holds. Look at it again.", again, "confirm again")
}

// redrive moves one DLQ entry back to the queue (never a conflict, never
// one older than the retention less a day: those need the command line's
// --force after a look at the record).
func (c *Console) redrive(w http.ResponseWriter, r *http.Request, id Identity) AuditEntry {
	dlqID := r.PostFormValue("id")
	now := c.o.Now()
	e := AuditEntry{Action: "redrive", DLQID: dlqID}
	var chargeID string
	var code queue.Code
	o := operate.RedriveAt(now, c.o.Retention) // the command line's hold-backs, without --force
	o.Max, o.Match = 1, func(d queue.DLQEntry) bool { return d.ID == dlqID }
	seal, sealed := r.PostFormValue("seal"), r.PostFormValue("charge")
	var sealChecked, sealHeld bool
	var sealErr error
	if seal != "" {
		// From the confirmation page: only the entry of the charge it
		// showed, and only while the charge's record is the one it spelt
		// out. The record is read by the charge id the entry's body holds
		// (the page showed it as charge.ShowID does, and the form carries
		// what the page showed), when the entry is found.
		o.Match = func(d queue.DLQEntry) bool {
			if d.ID != dlqID {
				return false // the body of every other entry is not read
			}
			v := operate.View(d, now, false)
			if v.ChargeID != sealed {
				return false
			}
			sealChecked = true
			sealHeld, _, sealErr = c.sealHolds(r.Context(), seal, dlqID, sealed, v.Key)
			return sealErr == nil && sealHeld
		}
	}
	o.Visit = func(d queue.DLQEntry, dec queue.RedriveDecision) {
		if dec != queue.Skip {
			chargeID, code = operate.ChargeIDOf(d.Body), d.Reason.Code
		}
	}
	rep, err := c.o.Queue.Redrive(r.Context(), o)
	e.ChargeID = chargeID
	switch {
	case sealChecked && sealErr != nil:
		c.o.Logger.Error("console: redrive: read the record", "error", sealErr)
		e.Result, e.Detail = "failed", "the backend did not answer"
		c.result(w, r, http.StatusBadGateway, "Redrive failed", "The store did not answer; nothing was moved. Try again.", "/dlq", "back to the DLQ")
	case sealChecked && !sealHeld:
		e.ChargeID = charge.Clip(charge.Printable(sealed), 256)
		c.changedSince(w, r, &e, "/dlq/redrive?id="+urlQuery(dlqID))
	case err != nil:
		c.o.Logger.Error("console: redrive failed", "error", err)
		e.Result, e.Detail = "failed", "the backend did not answer"
		c.result(w, r, http.StatusBadGateway, "Redrive failed", "The backend did not answer; nothing was moved that the DLQ does not show. Try again.", "/dlq", "back to the DLQ")
	case rep.Moved == 1:
		e.Result = "moved"
		c.result(w, r, http.StatusOK, "Redriven", fmt.Sprintf("The entry for charge %s is back on the queue; its record decides what happens (a DONE charge is not debited again).", charge.ShowID(chargeID)),
			"/charge?id="+urlQuery(chargeID), "the charge")
	case rep.HeldBack == 1 && code == queue.CodeTooLarge:
		e.Result, e.Detail = "held back", "over the size limit: it can only be purged"
		c.result(w, r, http.StatusConflict, "Cannot be redriven", "This message is over the size limit and was never read: it can only be removed, with the command line's chargerecovery dlq purge "+dlqID+".", "/dlq", "back to the DLQ")
	case rep.HeldBack == 1:
		e.Result, e.Detail = "held back", "a conflict: the charge id was reused with another payload"
		c.result(w, r, http.StatusConflict, "Held back", "This entry is a conflict (the charge id reused with another payload): it would only conflict again. Decide with the producer; the command line's redrive --force moves it.", "/dlq", "back to the DLQ")
	case rep.TooOld == 1:
		e.Result, e.Detail = "held back", "older than the retention less a day"
		c.result(w, r, http.StatusConflict, "Held back", "This entry is older than the records' retention less a day: the record that stops a second debit may be gone. Check the charge, then use the command line's redrive --force.", "/dlq", "back to the DLQ")
	case rep.Gone == 1:
		e.Result, e.Detail = "not moved", "gone from the DLQ meanwhile, or held too long by this read to move safely"
		c.result(w, r, http.StatusConflict, "Not moved", "Nothing was moved: the entry left the DLQ while this redrive ran (another redrive or a purge), or, on SQS, this read held it too long to move it safely. Look at the DLQ again.", "/dlq", "back to the DLQ")
	case rep.Unseen > 0:
		e.Result, e.Detail = "not seen", operate.UnseenNote(rep.Unseen, rep.Approximate)
		c.result(w, r, http.StatusServiceUnavailable, "Not seen", "Nothing was moved: the entry was not among those seen ("+e.Detail+").", "/dlq", "back to the DLQ")
	default:
		e.Result = "not found"
		c.result(w, r, http.StatusNotFound, "Not found", "No DLQ entry with that id: redriven already, purged, or expired.", "/dlq", "back to the DLQ")
	}
	return e
}

func (c *Console) reopen(w http.ResponseWriter, r *http.Request, id Identity) AuditEntry {
	chargeID, reason := r.PostFormValue("id"), strings.TrimSpace(r.PostFormValue("reason"))
	newAttempt := r.PostFormValue("new_attempt") == "on"
	e := AuditEntry{Action: "reopen", ChargeID: chargeID, Reason: charge.Clip(charge.MaskText(charge.Printable(reason)), 500)}
	if newAttempt {
		e.Action = "reopen --new-attempt"
	}
	if reason == "" {
		e.Result = "refused"
		c.result(w, r, http.StatusBadRequest, "Reason needed", "Say why the charge may be debited now: the reason stays in the record and the audit trail.", "/charge/reopen?id="+urlQuery(chargeID), "back")
		return e
	}
	back := "/charge?id=" + urlQuery(chargeID)
	var asRead *driver.Record // the record the confirmation page showed
	if seal := r.PostFormValue("seal"); seal != "" {
		held, cur, err := c.sealHolds(r.Context(), seal, "", chargeID, chargeID)
		if err != nil {
			c.o.Logger.Error("console: reopen: read the record", "error", err)
			e.Result, e.Detail = "failed", "the backend did not answer"
			c.result(w, r, http.StatusBadGateway, "Reopen failed", "The store did not answer; nothing was done. Try again.", back, "the charge")
			return e
		}
		if !held {
			c.changedSince(w, r, &e, "/charge/reopen?id="+urlQuery(chargeID))
			return e
		}
		asRead = cur
	}
	hardProposed := false
	if newAttempt && c.o.Approvals != nil && c.o.Approvals.Policy().RepresentHardDecline {
		// A hard decline is presented again only by a proposal another
		// operator approves with its code shown, never directly.
		if rec, err := c.o.Store.Get(r.Context(), chargeID, c.o.Now()); err == nil && rec.State == driver.StateFailed {
			_, hardProposed = charge.HardDecline(charge.DeclineCode(rec.Detail))
		}
	}
	if newAttempt && c.o.Approvals != nil && (c.o.Approvals.Policy().ReopenNewAttempt || hardProposed) {
		// Four-eyes: a second debit under a new bank key is proposed, and
		// done once another operator approves.
		spec := approval.Spec{Kind: approval.Reopen, NewAttempt: true, Reason: e.Reason, ChargeIDs: []string{chargeID}}
		targets, err := c.approvalBackend().Select(r.Context(), spec, c.o.Now())
		if err == nil {
			var p approval.Proposal
			if p, err = c.o.Approvals.Propose(actorOf(id), spec, targets); err == nil {
				e.Proposal, e.Result = p.ID, "proposed"
				c.result(w, r, http.StatusAccepted, "Proposed", fmt.Sprintf("Nothing was reopened yet: this needs another operator's approval (%s). Proposal %s waits for it; it runs once approved.", p.Needs, p.ID),
					"/proposals/show?id="+urlQuery(p.ID), "the proposal")
				return e
			}
		}
		e.Result, e.Detail = "refused", charge.Clip(charge.MaskText(err.Error()), 300)
		c.result(w, r, http.StatusConflict, "Not proposed", e.Detail, back, "the charge")
		return e
	}
	var rec driver.Record
	var err error
	if asRead != nil {
		// Fenced on the record read: one that changes between that read
		// and this write is not reopened either.
		rec, err = operate.ReopenAsRead(r.Context(), c.guard, chargeID, e.Reason, newAttempt, id.Name+" (console)", asRead.Token)
		if errors.Is(err, idempotency.ErrNotFailed) && rec.State == driver.StateFailed {
			c.changedSince(w, r, &e, "/charge/reopen?id="+urlQuery(chargeID))
			return e
		}
	} else {
		rec, err = operate.Reopen(r.Context(), c.guard, chargeID, e.Reason, newAttempt, id.Name+" (console)")
	}
	switch {
	case errors.Is(err, idempotency.ErrNotFound):
		e.Result = "not found"
		c.result(w, r, http.StatusNotFound, "Not reopened", "No record for this charge (never claimed, or past its retention): redriving its message debits it as a new charge.", back, "the charge")
	case errors.Is(err, idempotency.ErrNotFailed):
		e.Result, e.Detail = "refused", "the record is "+string(rec.State)
		c.result(w, r, http.StatusConflict, "Not reopened", fmt.Sprintf("The charge is %s, not FAILED: only a FAILED record is reopened.", rec.State), back, "the charge")
	case errors.Is(err, operate.ErrDeclinedSameKey):
		e.Result, e.Detail = "refused", "declined by the bank: the same key is declined again"
		c.result(w, r, http.StatusConflict, "Not reopened", fmt.Sprintf("The bank declined this charge explicitly (%s): reopened under the same bank key %s it is declined again. Reopen it with a new attempt (the next bank key), or on the command line: chargerecovery reopen --new-attempt --reason … %s", charge.Clip(charge.Printable(rec.Detail), 120), charge.ShowBankKey(charge.BankKey(rec.Key, rec.Generation)), charge.ShowID(chargeID)), "/charge/reopen?id="+urlQuery(chargeID), "reopen with a new attempt")
	case errors.Is(err, charge.ErrHardDecline):
		code := charge.DeclineCode(rec.Detail)
		e.Result, e.Detail = "refused", "a hard decline: "+code
		c.result(w, r, http.StatusConflict, "Not reopened", fmt.Sprintf("The bank's decline, %s, is a hard decline: the charge is never presented again under a new key (schemes fine a re-presentment, and the account will not pay).", charge.Printable(code)), back, "the charge")
	case errors.Is(err, idempotency.ErrNotEligible):
		e.Result, e.Detail = "refused", "not an explicit decline"
		c.result(w, r, http.StatusConflict, "Not reopened", "A new attempt is only for a charge the bank declined explicitly; reopen without it to retry under the same key.", back, "the charge")
	case err != nil:
		c.o.Logger.Error("console: reopen failed", "error", err)
		e.Result, e.Detail = "failed", "the backend did not answer"
		c.result(w, r, http.StatusBadGateway, "Reopen failed", "The store did not answer; the record is as it was, or reopened: look at the charge.", back, "the charge")
	default:
		e.Result = "reopened"
		e.Detail = fmt.Sprintf("generation %d, bank key %s", rec.Generation, charge.ShowBankKey(charge.BankKey(rec.Key, rec.Generation)))
		c.result(w, r, http.StatusOK, "Reopened", fmt.Sprintf("Reopened: its next delivery claims it afresh under bank key %s. Redrive its DLQ entry to deliver it now.", charge.ShowBankKey(charge.BankKey(rec.Key, rec.Generation))), back, "the charge")
	}
	return e
}

func (c *Console) renotify(w http.ResponseWriter, r *http.Request, id Identity) AuditEntry {
	chargeID := r.PostFormValue("id")
	reason := cmp.Or(strings.TrimSpace(r.PostFormValue("reason")), "missed pre-debit notification resent")
	e := AuditEntry{Action: "renotify", ChargeID: chargeID, Reason: charge.Clip(charge.Printable(reason), 500)}
	back := "/charge?id=" + urlQuery(chargeID)
	if c.o.Renotifier == nil {
		e.Result = "refused"
		c.result(w, r, http.StatusConflict, "Not sent", "This console has no notification channel (start it with --notify).", back, "the charge")
		return e
	}
	rec, err := c.o.Store.Get(r.Context(), chargeID, c.o.Now())
	if err != nil {
		e.Result = "failed"
		c.result(w, r, http.StatusNotFound, "Not sent", "No record for this charge.", back, "the charge")
		return e
	}
	res := c.o.Renotifier.One(r.Context(), rec, id.Name+" (console)", e.Reason, false, c.o.Now())
	e.Result, e.Detail = res.Result, charge.Clip(charge.MaskText(res.Why), 300)
	code := http.StatusOK
	if res.Result != "sent" {
		code = http.StatusConflict
	}
	c.result(w, r, code, "Renotify: "+res.Result, cmp.Or(e.Detail, "The notice was sent with its original key and the record is DEBITED."), back, "the charge")
	return e
}

// scanTooLong answers a read the store could not finish in ScanWait (a
// Scan of a whole DynamoDB table): the read is stopped, and the page says
// where to get the whole answer.
func (c *Console) scanTooLong(w http.ResponseWriter, r *http.Request, what string, err error) {
	c.o.Logger.Warn("console: read stopped after the page's wait", "what", what, "wait", c.o.ScanWait, "error", err)
	c.render(w, r, http.StatusGatewayTimeout, "message", map[string]any{"Title": "Too large to read here",
		"Message": fmt.Sprintf("Reading %s did not finish within %s: on this store it reads every record (DynamoDB: a Scan of the whole table), "+
			"so the console stopped it. Run chargerecovery stuck (or status) for the whole answer.", what, c.o.ScanWait)})
}

func (c *Console) backendError(w http.ResponseWriter, r *http.Request, what string, err error) {
	c.o.Logger.Error("console: "+what, "error", err)
	c.render(w, r, http.StatusBadGateway, "message", map[string]any{"Title": "Backend error", "Message": "Could not " + what + ": the backend did not answer (the console's log says why)."})
}

// page is what every template gets.
type page struct {
	Who  Identity
	CSRF string
	Path string
	Data any
}

func (c *Console) render(w http.ResponseWriter, r *http.Request, code int, name string, data any) {
	c.renderBlock(w, r, name, "layout", data, code)
}

func (c *Console) renderBlock(w http.ResponseWriter, r *http.Request, name, block string, data any, code ...int) {
	t, ok := c.pages[name]
	if !ok {
		http.Error(w, "no page "+name, http.StatusInternalServerError)
		return
	}
	id := identity(r)
	var buf bytes.Buffer
	if err := t.ExecuteTemplate(&buf, block, page{Who: id, CSRF: c.csrfToken(id), Path: r.URL.Path, Data: data}); err != nil {
		c.o.Logger.Error("console: render", "page", name, "error", err)
		http.Error(w, "the page could not be rendered", http.StatusInternalServerError)
		return
	}
	// html/template escapes what would be markup, not what reorders or
	// hides text: every character from outside that is not shown as
	// itself (a bidirectional override, a zero-width character, a control
	// character) is escaped in the page's text, on every page at once
	// (safetext.Page; attribute values stay byte for byte).
	out := safetext.Page(buf.Bytes())
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	if len(code) > 0 {
		w.WriteHeader(code[0])
	}
	_, _ = w.Write(out)
}

func urlQuery(s string) string { return template.URLQueryEscaper(s) }

var funcs = template.FuncMap{
	// showID is a charge id as every view shows it (charge.ShowID): the
	// text of a link or a heading; the link itself carries the id.
	"showID": func(id string) string { return charge.ShowID(id) },
	"ago": func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return time.Since(t).Round(time.Second).String()
	},
	"when": func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return t.UTC().Format("2006-01-02 15:04:05Z")
	},
	"secs": func(v any) string {
		switch x := v.(type) {
		case float64:
			return (time.Duration(x) * time.Second).String()
		case *int64:
			if x == nil {
				return "not known"
			}
			return (time.Duration(*x) * time.Second).String()
		}
		return "-"
	},
	"state":    func(m map[driver.State]int, s string) int { return m[driver.State(s)] },
	"counted":  func(m map[driver.State]int, s string) bool { _, ok := m[driver.State(s)]; return ok },
	"num":      func(f float64) string { return strconv.FormatFloat(f, 'f', 1, 64) },
	"add":      func(a, b float64) float64 { return a + b },
	"subtract": func(a, b float64) float64 { return a - b },
	"midpoint": func(a, b float64) float64 { return (a + b) / 2 },
	// stepOf is what the "step" template shows: what happens next, and
	// its action's button for an operator.
	"stepOf": func(s nextStep, who Identity) stepView { return stepView{Step: s, Operator: who.Role == Operator} },
}
