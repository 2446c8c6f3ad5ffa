package console_test

import (
	"bytes"
	"crypto/ed25519"
	"html"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/app/audit"
	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/app/console"
	"github.com/finedge/idempotent-consumer/app/reconcile"
	"github.com/finedge/idempotent-consumer/app/reconcile/statement"
	"github.com/finedge/idempotent-consumer/app/service/backend"
	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
	"github.com/finedge/idempotent-consumer/idempotency/storetest"
)

// reconWorld is newWorld with a reconciliation two days ago kept as the
// reconcile command keeps it: a charge posted and matched, one posted
// whose consumer died before DONE (posted_not_recorded), one DONE and
// not posted (recorded_not_posted).
type reconWorld struct {
	*world
	fp                     *idempotency.Fingerprinter
	report                 string
	rep                    reconcile.Report
	matched, crashed, lost charge.Charge
}

func newReconWorld(t *testing.T) *reconWorld {
	t.Helper()
	ctx := t.Context()
	w := &reconWorld{world: newWorld(t)}
	dir := t.TempDir()
	day := time.Now().UTC().Truncate(24*time.Hour).AddDate(0, 0, -2)
	period := statement.Period{From: day, To: day.AddDate(0, 0, 1)}
	var err error
	if w.fp, err = idempotency.NewFingerprinter([]byte("console-reconcile-test-key-0123456789")); err != nil {
		t.Fatal(err)
	}
	g, err := idempotency.NewGuard(w.store, idempotency.Options{Lease: time.Minute, Clock: storetest.NewClock(day.Add(9 * time.Hour)), SkewMargin: -1})
	if err != nil {
		t.Fatal(err)
	}
	mk := func(id string) charge.Charge {
		return charge.Charge{ID: id, AccountID: account, Amount: charge.Money{Minor: 2500, Currency: "INR"}, Type: charge.SMSAlertFee, DueDate: day}
	}
	w.matched, w.crashed, w.lost = mk("CHG-REC-1"), mk("CHG-REC-2"), mk("CHG-REC-3")
	for _, c := range []charge.Charge{w.matched, w.crashed, w.lost} {
		cl, err := g.Claim(ctx, c.ID, c.Fingerprint(w.fp))
		if err != nil || !cl.Outcome.Owned() {
			t.Fatalf("claim %s: %v %v", c.ID, cl.Outcome, err)
		}
		if c.ID == w.crashed.ID {
			continue // the consumer died after the debit; its lease passed long ago
		}
		if err := g.Complete(ctx, cl.Lease(), string(charge.Debited), "REF-"+c.ID); err != nil {
			t.Fatal(err)
		}
	}
	posting := func(c charge.Charge) statement.Posting {
		req := c.DebitRequest()
		return statement.Posting{BankKey: req.IdempotencyKey, Account: c.AccountID, Amount: c.Amount, BookingDate: day,
			Reference: "BANK-" + c.ID, Narrative: req.Narrative}
	}
	stmt := filepath.Join(dir, "camt053.xml")
	f, err := os.Create(stmt)
	if err != nil {
		t.Fatal(err)
	}
	if err := statement.WriteCamt053(f, statement.StatementInfo{ID: "STMT-1", Account: "FEES-001", Period: period},
		[]statement.Posting{posting(w.matched), posting(w.crashed)}); err != nil {
		t.Fatal(err)
	}
	f.Close()
	w.rep, err = reconcile.Run(ctx, reconcile.Options{Store: w.store, Fingerprints: w.fp, Period: period},
		reconcile.ReadFiles([]string{stmt}, statement.Options{CollectionAccount: "FEES-001"}))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, b := range w.rep.Breaks {
		got = append(got, string(b.Kind)+" "+b.ChargeID)
	}
	if want := []string{"posted_not_recorded CHG-REC-2", "recorded_not_posted CHG-REC-3"}; !slices.Equal(got, want) {
		t.Fatalf("the run's breaks: %q, want %q", got, want)
	}
	w.rep.Statements, w.rep.CollectionAccount = []string{stmt}, "FEES-001"
	w.report = filepath.Join(dir, "recon.json")
	if err := reconcile.WriteReportFile(w.report, w.rep); err != nil {
		t.Fatal(err)
	}
	return w
}

func (w *reconWorld) breakOf(t *testing.T, id string) reconcile.Break {
	t.Helper()
	for _, b := range w.rep.Breaks {
		if b.ChargeID == id {
			return b
		}
	}
	t.Fatalf("no break of %s", id)
	return reconcile.Break{}
}

var breakRowRE = regexp.MustCompile(`<tr class="break" id="break-[^"]*"><td><span class="code">([^<]*)</span></td><td><a href="/charge\?id=[^"]*">([^<]*)</a>`)

// openBreaks are the "kind charge" rows the page lists.
func openBreaks(page string) []string {
	var out []string
	for _, m := range breakRowRE.FindAllStringSubmatch(page, -1) {
		out = append(out, m[1]+" "+m[2])
	}
	return out
}

const resolveForm = `action="/reconciliation/resolve"`

func TestReconciliationPageShowsAndResolvesTheKeptReport(t *testing.T) {
	w := newReconWorld(t)
	srv := w.consoleWith(t, proxyAuth(), func(o *console.Options) {
		o.ReconcileReport, o.Fingerprints, o.ActionBurst = w.report, w.fp, 10
	})
	page := srv.URL + "/reconciliation"

	// A viewer sees the report, and no form.
	code, body := as(t, "vera", "GET", page, nil)
	if code != http.StatusOK {
		t.Fatalf("viewer's page: %d\n%s", code, body)
	}
	for _, want := range []string{`href="/reconciliation" class="here"`, `id="recon-postings">2<`, `id="recon-matched">1<`, `id="recon-unverified">0<`,
		`id="recon-inflight">0<`, `id="recon-resolved">0<`, `id="recon-open">2<`, w.rep.Period.From, "camt053.xml",
		`<a href="/charge?id=CHG-REC-2">CHG-REC-2</a>`, "IN_PROGRESS", "INR 25.00", "BANK-CHG-REC-2", "********7890", html.EscapeString(w.breakOf(t, w.crashed.ID).Action)} {
		if !strings.Contains(body, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
	if got := openBreaks(body); !slices.Equal(got, []string{"posted_not_recorded CHG-REC-2", "recorded_not_posted CHG-REC-3"}) {
		t.Errorf("open breaks listed: %q", got)
	}
	if strings.Contains(body, account) {
		t.Error("the page shows an account number whole")
	}
	// The fee account's name is an identifier, shown (issue 54: one
	// masking rule; an account-like run in it would be masked).
	if !strings.Contains(body, "collection account FEES-001") {
		t.Error("the page hides the collection account's name")
	}
	if strings.Contains(body, resolveForm) {
		t.Error("a viewer is offered the resolve form")
	}

	// A viewer's POST (with her own session's token) is refused.
	crashed, lost := w.breakOf(t, w.crashed.ID), w.breakOf(t, w.lost.ID)
	form := func(b reconcile.Break, csrf, reason string) url.Values {
		return url.Values{"id": {b.ChargeID}, "kind": {string(b.Kind)}, "break": {b.ID}, "csrf": {csrf}, "reason": {reason}}
	}
	resolve := srv.URL + "/reconciliation/resolve"
	if code, _ := as(t, "vera", "POST", resolve, form(crashed, csrfOf(t, body), "INC-1")); code != http.StatusForbidden {
		t.Fatalf("a viewer's resolve: %d, want 403", code)
	}
	if rec, err := w.store.Get(t.Context(), w.crashed.ID, time.Now()); err != nil || rec.State != driver.StateInProgress {
		t.Fatalf("after a viewer's resolve the record is %+v %v", rec, err)
	}

	// The operator: a form per break; a reason is required.
	_, body = as(t, "olga", "GET", page, nil)
	if n := strings.Count(body, resolveForm); n != 2 {
		t.Fatalf("the operator's page has %d resolve forms, want 2", n)
	}
	token := csrfOf(t, body)
	if code, _ := as(t, "olga", "POST", resolve, form(crashed, token, "  ")); code != http.StatusBadRequest {
		t.Fatalf("a resolve without a reason: %d, want 400", code)
	}
	// posted_not_recorded: adopted, the record DONE with the bank's reference.
	code, body = as(t, "olga", "POST", resolve, form(crashed, token, "INC-7: checked with the bank"))
	if code != http.StatusOK || !strings.Contains(body, "Adopted") || !strings.Contains(body, "BANK-CHG-REC-2") {
		t.Fatalf("adopt: %d\n%s", code, body)
	}
	rec, err := w.store.Get(t.Context(), w.crashed.ID, time.Now())
	notice, kept := charge.PendingNotice(rec.Status, rec.Detail) // the notice kept for renotify
	if err != nil || rec.State != driver.StateDone || !kept || notice.Reference != "BANK-CHG-REC-2" ||
		len(rec.History) != 1 || !strings.Contains(rec.History[0], "olga (console)") || !strings.Contains(rec.History[0], "INC-7") {
		t.Fatalf("adopted record: %+v %v", rec, err)
	}
	// Another kind: marked resolved.
	code, body = as(t, "olga", "POST", resolve, form(lost, token, "INC-8: posted on the next statement"))
	if code != http.StatusOK || !strings.Contains(body, "marked resolved") {
		t.Fatalf("mark: %d\n%s", code, body)
	}
	// Again: nothing open, refused.
	if code, _ := as(t, "olga", "POST", resolve, form(lost, token, "again")); code != http.StatusConflict {
		t.Fatalf("resolving a resolved break: %d, want 409", code)
	}

	// The page, the same report: no break open, both counted resolved.
	_, body = as(t, "vera", "GET", page, nil)
	if got := openBreaks(body); len(got) != 0 || !strings.Contains(body, `id="recon-none"`) || !strings.Contains(body, `id="recon-resolved">2<`) {
		t.Errorf("after resolving, the page lists %q", got)
	}

	// The trail: each resolve's request before its result; the viewer's refusal.
	var got []string
	for _, e := range auditEntries(t, w.audit) {
		if strings.HasPrefix(e.ChargeID, "CHG-REC-") {
			got = append(got, e.Operator+" "+e.Action+":"+e.Result+" "+e.ChargeID)
		}
	}
	want := []string{"vera refused:refused CHG-REC-2",
		"olga reconcile-resolve:requested CHG-REC-2", "olga reconcile-resolve:refused CHG-REC-2",
		"olga reconcile-resolve:requested CHG-REC-2", "olga reconcile-resolve:adopted CHG-REC-2",
		"olga reconcile-resolve:requested CHG-REC-3", "olga reconcile-resolve:marked CHG-REC-3",
		"olga reconcile-resolve:requested CHG-REC-3", "olga reconcile-resolve:refused CHG-REC-3"}
	if !slices.Equal(got, want) {
		t.Errorf("the audit trail:\n  got  %q\n  want %q", got, want)
	}
	b, err := os.ReadFile(w.audit)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), account) {
		t.Error("the audit trail holds a full account number")
	}
	if !strings.Contains(string(b), "INC-7: checked with the bank") || !strings.Contains(string(b), "DONE with reference BANK-CHG-REC-2") {
		t.Errorf("the trail lacks the adoption's reason or result:\n%s", b)
	}
}

func TestReconciliationPageSaysWhyThereIsNoReport(t *testing.T) {
	w := newWorld(t)
	dir := t.TempDir()
	garbled := filepath.Join(dir, "garbled.json")
	if err := os.WriteFile(garbled, []byte(`{"period": {"from": `), 0o600); err != nil {
		t.Fatal(err)
	}
	notReport := filepath.Join(dir, "other.json")
	if err := os.WriteFile(notReport, []byte(`{"queue": "charges"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct{ name, file, want string }{
		{"not configured", "", `id="recon-configure"`},
		{"missing", filepath.Join(dir, "none.json"), "There is no report at"},
		{"garbled", garbled, "cannot be read"},
		{"a directory", dir, "cannot be read"},
		{"another JSON file", notReport, "is not a reconciliation report"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := w.consoleWith(t, proxyAuth(), func(o *console.Options) { o.ReconcileReport = tc.file })
			code, body := as(t, "olga", "GET", srv.URL+"/reconciliation", nil)
			if code != http.StatusOK || !strings.Contains(body, tc.want) || strings.Contains(body, resolveForm) {
				t.Fatalf("%d, want 200 saying %q and no form:\n%s", code, tc.want, body)
			}
			// A resolve is refused, and says why.
			code, body = as(t, "olga", "POST", srv.URL+"/reconciliation/resolve", url.Values{"id": {"CHG-X"}, "kind": {"unknown_posting"},
				"break": {"0123"}, "reason": {"INC-1"}, "csrf": {csrfOf(t, body)}})
			if code != http.StatusConflict {
				t.Fatalf("resolve: %d, want 409\n%s", code, body)
			}
		})
	}
}

// Under reconcile-adopt the Reconciliation page's adoption is refused,
// pointing to its proposal; marking a break still resolves it; Propose
// freezes the break as a proposal that another operator approves, and its
// run adopts the posting.
func TestFourEyesConsoleReconcileAdopt(t *testing.T) {
	w := newReconWorld(t)
	auth := console.ProxyAuth{Operators: []string{"olga", "ivan"}, Trusted: loopback}
	book := w.withBook(t, "reconcile-adopt")
	srv := w.consoleWith(t, auth, func(o *console.Options) {
		o.ReconcileReport, o.Fingerprints, o.ActionBurst = w.report, w.fp, 10
		book(o)
	})
	_, body := as(t, "olga", "GET", srv.URL+"/reconciliation", nil)
	if n := strings.Count(body, `name="propose" value="1"`); n != 1 {
		t.Fatalf("%d Propose buttons, want 1 (the adoption's)", n)
	}
	token := csrfOf(t, body)
	crashed, lost := w.breakOf(t, w.crashed.ID), w.breakOf(t, w.lost.ID)
	form := func(b reconcile.Break, extra ...string) url.Values {
		v := url.Values{"id": {b.ChargeID}, "kind": {string(b.Kind)}, "break": {b.ID}, "csrf": {token}, "reason": {"INC-7: checked with the bank"}}
		for i := 0; i+1 < len(extra); i += 2 {
			v.Set(extra[i], extra[i+1])
		}
		return v
	}
	resolve := srv.URL + "/reconciliation/resolve"
	code, body := as(t, "olga", "POST", resolve, form(crashed))
	if code != http.StatusConflict || !strings.Contains(body, "Needs another operator") || !strings.Contains(body, "approvals propose reconcile") {
		t.Fatalf("a direct adoption under reconcile-adopt: %d\n%s", code, body)
	}
	if rec, err := w.store.Get(t.Context(), w.crashed.ID, time.Now()); err != nil || rec.State != driver.StateInProgress {
		t.Fatalf("the refused adoption wrote the record: %+v %v", rec, err)
	}
	if code, body := as(t, "olga", "POST", resolve, form(lost)); code != http.StatusOK || !strings.Contains(body, "marked resolved") {
		t.Fatalf("marking under reconcile-adopt: %d\n%s", code, body)
	}
	code, body = as(t, "olga", "POST", resolve, form(crashed, "propose", "1"))
	id := proposalIDRE.FindString(body)
	if code != http.StatusOK || id == "" || !strings.Contains(body, "Proposed") {
		t.Fatalf("propose: %d\n%s", code, body)
	}
	_, theirs := as(t, "ivan", "GET", srv.URL+"/proposals/show?id="+id, nil)
	if code, body := as(t, "ivan", "POST", srv.URL+"/proposals/approve", url.Values{"csrf": {csrfOf(t, theirs)}, "id": {id}}); code != http.StatusOK {
		t.Fatalf("approve: %d\n%s", code, body)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		rec, err := w.store.Get(t.Context(), w.crashed.ID, time.Now())
		if err == nil && rec.State == driver.StateDone && charge.ReferenceOf(rec.Status, rec.Detail) == "BANK-CHG-REC-2" {
			break
		}
		if time.Now().After(deadline) {
			_, page := as(t, "ivan", "GET", srv.URL+"/proposals/show?id="+id, nil)
			t.Fatalf("not adopted by the approved proposal: %+v %v\n%s", rec, err, page)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A statement with a credit whose end-to-end id (its bank key) is the
// payer's account number: the console's reconciliation page shows the key
// masked — for the report a run keeps now, and for one kept unmasked by an
// earlier version — and our own charge's key as it is; the break is
// resolved from the page under its masked id, and the trail holds no
// account either.
func TestReconciliationPageMasksAForeignKeyThatIsAnAccountNumber(t *testing.T) {
	const payer = "123456789012"
	w := newReconWorld(t)
	day, err := time.Parse(time.RFC3339, w.rep.Period.From)
	if err != nil {
		t.Fatal(err)
	}
	credit := statement.Posting{BankKey: payer, Account: payer, Amount: charge.Money{Minor: 100000, Currency: "INR"}, BookingDate: day,
		Reference: "NEFT-IN-" + payer}
	stmt := filepath.Join(t.TempDir(), "credit.xml")
	f, err := os.Create(stmt)
	if err != nil {
		t.Fatal(err)
	}
	period := statement.Period{From: day, To: day.AddDate(0, 0, 1)}
	if err := statement.WriteCamt053(f, statement.StatementInfo{ID: "STMT-2", Account: "FEES-001", Period: period}, []statement.Posting{credit}); err != nil {
		t.Fatal(err)
	}
	f.Close()
	files := append(slices.Clone(w.rep.Statements), stmt)
	rep, err := reconcile.Run(t.Context(), reconcile.Options{Store: w.store, Fingerprints: w.fp, Period: period},
		reconcile.ReadFiles(files, statement.Options{CollectionAccount: "FEES-001"}))
	if err != nil {
		t.Fatal(err)
	}
	rep.Statements, rep.CollectionAccount = files, "FEES-001"

	// As a run keeps it now, and as an earlier version kept it (the key
	// whole in the file).
	now := filepath.Join(t.TempDir(), "recon.json")
	if err := reconcile.WriteReportFile(now, rep); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(now)
	if err != nil {
		t.Fatal(err)
	}
	old := filepath.Join(t.TempDir(), "recon-old.json")
	unmasked := strings.ReplaceAll(string(raw), `"********9012"`, `"`+payer+`"`)
	if unmasked == string(raw) {
		t.Fatalf("the kept report has no masked key to unmask:\n%s", raw)
	}
	if err := os.WriteFile(old, []byte(unmasked), 0o600); err != nil {
		t.Fatal(err)
	}
	// The one kept unmasked first: the other resolves the break.
	for _, tc := range []struct{ name, file string }{{"kept unmasked", old}, {"kept now", now}} {
		name, file := tc.name, tc.file
		t.Run(name, func(t *testing.T) {
			srv := w.consoleWith(t, proxyAuth(), func(o *console.Options) {
				o.ReconcileReport, o.Fingerprints, o.ActionBurst = file, w.fp, 10
			})
			_, body := as(t, "olga", "GET", srv.URL+"/reconciliation", nil)
			if strings.Contains(body, payer) || strings.Contains(body, "56789012") {
				t.Errorf("the page shows the payer's account:\n%s", body)
			}
			for _, want := range []string{"unknown_posting ********9012", "posted_not_recorded CHG-REC-2"} {
				if !strings.Contains(strings.Join(openBreaks(body), "\n"), want) {
					t.Errorf("the page lists %q, want %q", openBreaks(body), want)
				}
			}
			if name != "kept now" {
				return
			}
			var br reconcile.Break
			for _, b := range rep.Breaks {
				if b.Kind == reconcile.UnknownPosting {
					br = b
				}
			}
			form := url.Values{"id": {br.ChargeID}, "kind": {string(br.Kind)}, "break": {br.ID}, "csrf": {csrfOf(t, body)}, "reason": {"INC-9: a credit"}}
			code, res := as(t, "olga", "POST", srv.URL+"/reconciliation/resolve", form)
			if code != http.StatusOK || !strings.Contains(res, "marked resolved") || strings.Contains(res, payer) {
				t.Fatalf("resolve under the masked id: %d\n%s", code, res)
			}
			trail, err := os.ReadFile(w.audit)
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(string(trail), payer) || !strings.Contains(string(trail), "********9012") {
				t.Errorf("the trail:\n%s", trail)
			}
		})
	}
}

// The console checks that the form's break id is the kept report's, but
// then resolves whatever break of that kind the charge has NOW: Resolve is
// called without ResolveRequest.BreakID. The statement the report names
// was rewritten since (a corrected camt, another posting under the key):
// the operator saw and chose posting BANK-CHG-REC-2, the console adopts
// another one, unseen, with no "the break changed" refusal.
func TestAttack2ConsoleAdoptsABreakOtherThanTheOneShown(t *testing.T) {
	w := newReconWorld(t)
	srv := w.consoleWith(t, proxyAuth(), func(o *console.Options) {
		o.ReconcileReport, o.Fingerprints, o.ActionBurst = w.report, w.fp, 10
	})
	shown := w.breakOf(t, w.crashed.ID)
	// The statement file changes under the kept report.
	span := w.rep.Span()
	req := w.crashed.DebitRequest()
	f, err := os.Create(w.rep.Statements[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := statement.WriteCamt053(f, statement.StatementInfo{ID: "STMT-1", Account: "FEES-001", Period: span},
		[]statement.Posting{{BankKey: req.IdempotencyKey, Account: w.crashed.AccountID, Amount: w.crashed.Amount, BookingDate: span.From,
			Reference: "BANK-SWAPPED", Narrative: req.Narrative}}); err != nil {
		t.Fatal(err)
	}
	f.Close()

	_, body := as(t, "olga", "GET", srv.URL+"/reconciliation", nil)
	form := url.Values{"id": {shown.ChargeID}, "kind": {string(shown.Kind)}, "break": {shown.ID}, "csrf": {csrfOf(t, body)}, "reason": {"INC-9: BANK-CHG-REC-2 checked"}}
	code, body := as(t, "olga", "POST", srv.URL+"/reconciliation/resolve", form)
	rec, _ := w.store.Get(t.Context(), w.crashed.ID, time.Now())
	if code == http.StatusOK || rec.State == driver.StateDone {
		t.Fatalf("the form named break %s (posting BANK-CHG-REC-2); the console answered %d and the record is %s with reference %q: a break the operator never saw was adopted",
			shown.ID, code, rec.State, charge.ReferenceOf(rec.Status, rec.Detail))
	}
	_ = body
}

// bulk>0 asks a second operator for every action touching a charge (the
// console's reopen, redrive and renotify of one charge are proposals
// under it). The Reconciliation page judged the policy only under
// reconcile-adopt: under bulk>0 one operator adopted a posting — money
// recorded as collected without a debit — alone.
func TestAttack53MovedConsoleAdoptionUnderBulkOverZeroNeedsAProposal(t *testing.T) {
	w := newReconWorld(t)
	auth := console.ProxyAuth{Operators: []string{"olga", "ivan"}, Trusted: loopback}
	book := w.withBook(t, "bulk>0")
	srv := w.consoleWith(t, auth, func(o *console.Options) {
		o.ReconcileReport, o.Fingerprints, o.ActionBurst = w.report, w.fp, 10
		book(o)
	})
	_, body := as(t, "olga", "GET", srv.URL+"/reconciliation", nil)
	crashed := w.breakOf(t, w.crashed.ID)
	v := url.Values{"id": {crashed.ChargeID}, "kind": {string(crashed.Kind)}, "break": {crashed.ID}, "csrf": {csrfOf(t, body)}, "reason": {"INC-7: checked with the bank"}}
	code, body := as(t, "olga", "POST", srv.URL+"/reconciliation/resolve", v)
	if code != http.StatusConflict || !strings.Contains(body, "Needs another operator") {
		t.Fatalf("a direct adoption under bulk>0: %d\n%s", code, body)
	}
	if rec, err := w.store.Get(t.Context(), w.crashed.ID, time.Now()); err != nil || rec.State != driver.StateInProgress {
		t.Fatalf("the adoption wrote the record without approval: %+v %v", rec, err)
	}
}

// A switch from proxy sign-in back to tokens renames people as much as
// the other way (the identity provider's names, then the token file's),
// but only token → proxy left a line in the trail (retire-tokens): a
// proposal made under the proxy could then be approved by its proposer
// under her token name. Every switch of sign-in is a line.
func TestAttack53MovedEverySignInSwitchIsALine(t *testing.T) {
	dir := t.TempDir()
	pem, err := audit.PrivateKeyPEM(ed25519.NewKeyFromSeed(bytes.Repeat([]byte{9}, ed25519.SeedSize)))
	if err != nil {
		t.Fatal(err)
	}
	keyFile := filepath.Join(dir, "console.key")
	if err := os.WriteFile(keyFile, pem, 0o600); err != nil {
		t.Fatal(err)
	}
	tokens := filepath.Join(dir, "tokens")
	line := console.TokenLine("olga", console.Operator, "olga-token-xxxxxxxxxxxxxxxxxxxx", "")
	if err := os.WriteFile(tokens, []byte(line+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	trail := filepath.Join(dir, "audit.jsonl")
	cfg := backend.Config{Kind: backend.Embedded, DB: filepath.Join(dir, "ic.db"), Queue: "charges"}
	open := func() (*backend.Backend, error) { return backend.Open(t.Context(), cfg, 0, true) }
	for _, c := range []console.Config{
		{KeyFile: keyFile, AuditFile: trail, Auth: "proxy"},
		{KeyFile: keyFile, AuditFile: trail, Auth: "token", TokenFile: tokens},
	} {
		if _, err := c.ChangePolicy(t.Context(), "bulk>0", "INC-1", open, io.Discard, slog.New(slog.DiscardHandler)); err != nil {
			t.Fatal(err)
		}
	}
	es, err := audit.RecentIn(trail, 100, audit.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	var actions []string
	for _, e := range es {
		if e.Action == "sign-in" || e.Action == "retire-tokens" {
			return
		}
		actions = append(actions, e.Action)
	}
	t.Fatalf("no line says sign-in changed from proxy to token: %v", actions)
}

// chargerecovery token NAME ROLE checked NAME for a space and a tab only:
// a name with a no-break space made a line the token file splits in
// five fields — the whole file refused, nobody signed in — and one with
// a zero-width or control character a second identity that reads as
// another's ("olga" and "olga\u200b" are two people to four-eyes, one
// to the eye). A NAME is printable, without space of any kind.
func TestAttack53MovedTokenNameIsPrintableWithoutSpace(t *testing.T) {
	for _, name := range []string{"ol\u00a0ga", "olga\u200b", "ol\u2028ga", "olga\x1b[0m", "ol\u202ega"} {
		if _, line, err := console.NewToken(name, "operator", ""); err == nil {
			t.Errorf("NewToken(%q) made the line %q", name, line)
		}
	}
	if _, _, err := console.NewToken("olga.k", "operator", ""); err != nil {
		t.Fatal(err)
	}
}
