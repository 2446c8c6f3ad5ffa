package reconcile_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/app/corebanksim"
	"github.com/finedge/idempotent-consumer/app/reconcile"
	"github.com/finedge/idempotent-consumer/app/reconcile/statement"
	"github.com/finedge/idempotent-consumer/awsdynamodb"
	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
	"github.com/finedge/idempotent-consumer/idempotency/storetest"
	"github.com/finedge/idempotent-consumer/internal/awstest"
	"github.com/finedge/idempotent-consumer/internal/dbtest"
	"github.com/finedge/idempotent-consumer/memstore"
	"github.com/finedge/idempotent-consumer/postgres"
	"github.com/finedge/idempotent-consumer/postgres/pgtest"
	"github.com/finedge/idempotent-consumer/redisstore"
	"github.com/finedge/idempotent-consumer/sqlite"
	"github.com/finedge/idempotent-consumer/sqlite/sqlitetest"
)

// The statement's day and the run's time.
var (
	day    = time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	period = statement.Period{From: day, To: day.AddDate(0, 0, 1)}
)

// books is a store with charges planted in every state a break needs, and
// the statement the bank would send for them.
type books struct {
	store    driver.Store
	guard    *idempotency.Guard
	clock    *storetest.Clock
	fp       *idempotency.Fingerprinter
	prefix   string
	postings []statement.Posting
	charges  map[string]charge.Charge
	seq      int
	// noSummary: records are written as before summaries existed (the
	// amount only in the keyed fingerprint).
	noSummary bool
}

func newBooks(t *testing.T, s driver.Store, prefix string) *books {
	t.Helper()
	clock := storetest.NewClock(day.Add(9 * time.Hour))
	g, err := idempotency.NewGuard(s, idempotency.Options{Lease: time.Minute, Retention: 30 * 24 * time.Hour, Clock: clock, SkewMargin: -1})
	if err != nil {
		t.Fatal(err)
	}
	fp, err := idempotency.NewFingerprinter([]byte("reconcile-test-key-0123456789abcdef"))
	if err != nil {
		t.Fatal(err)
	}
	return &books{store: s, guard: g, clock: clock, fp: fp, prefix: prefix, charges: map[string]charge.Charge{}}
}

// keptFile is rep kept by WriteReportFile: the file and what it holds.
func keptFile(t *testing.T, rep reconcile.Report) (path, text string) {
	t.Helper()
	path = filepath.Join(t.TempDir(), "report.json")
	if err := reconcile.WriteReportFile(path, rep); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return path, string(b)
}

// wantBreak runs the books and wants c's break of kind.
func (b *books) wantBreak(t *testing.T, c charge.Charge, kind reconcile.Kind) *reconcile.Break {
	t.Helper()
	rep := b.run(t)
	br := findBreak(rep, c.ID)
	if br == nil || br.Kind != kind {
		t.Fatalf("want %s, got %v", kind, b.mine(rep))
	}
	return br
}

// written is rep as the text, CSV and JSON reports write it.
func written(t *testing.T, rep reconcile.Report) (text, csv, js string) {
	t.Helper()
	var tb, cb bytes.Buffer
	if err := rep.WriteText(&tb); err != nil {
		t.Fatal(err)
	}
	if err := rep.WriteCSV(&cb); err != nil {
		t.Fatal(err)
	}
	j, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	return tb.String(), cb.String(), string(j)
}

// oneCharge is books in memory with one charge of 25.00, name, put in its
// state by state (done, failed, crashed, claimed).
func oneCharge(t *testing.T, prefix, name string, state func(*books, *testing.T, charge.Charge)) (*books, charge.Charge) {
	t.Helper()
	b := newBooks(t, memstore.New(), prefix)
	c := b.charge(name, 2500)
	state(b, t, c)
	return b, c
}

func (b *books) charge(name string, minor int64) charge.Charge {
	b.seq++
	c := charge.Charge{ID: b.prefix + name, AccountID: fmt.Sprintf("00123456%05d", b.seq), Amount: charge.Money{Minor: minor, Currency: "INR"},
		Type: charge.LockerRent, DueDate: day}
	b.charges[c.ID] = c
	return c
}

// post is the bank's posting of c under generation gen, as the debit sent
// it (narrative and all), with the amount given.
func (b *books) post(c charge.Charge, gen int, minor int64, narrative bool) statement.Posting {
	req := c.DebitRequestFor(gen)
	ref := "REF-" + req.IdempotencyKey // a bank's reference is its entry's own
	for _, q := range b.postings {
		if q.BankKey == req.IdempotencyKey && !q.Reversal {
			ref = fmt.Sprintf("REF-%s-%d", req.IdempotencyKey, len(b.postings)+1)
		}
	}
	p := statement.Posting{BankKey: req.IdempotencyKey, Account: c.AccountID, Amount: charge.Money{Minor: minor, Currency: c.Amount.Currency},
		BookingDate: day, Reference: ref, Where: fmt.Sprintf("test: entry %d", len(b.postings)+1)}
	if narrative {
		p.Narrative = req.Narrative
	}
	b.postings = append(b.postings, p)
	return p
}

// postAs is the bank's posting of 25.00 from account 001234567890 under
// key, with reference ref: no charge of ours sent it.
func (b *books) postAs(key, ref string) {
	b.postings = append(b.postings, statement.Posting{BankKey: key, Account: "001234567890", Amount: charge.Money{Minor: 2500, Currency: "INR"},
		BookingDate: day, Reference: ref, Where: "test"})
}

func (b *books) reverse(p statement.Posting) {
	p.Reversal = true
	p.Where += " (reversal)"
	b.postings = append(b.postings, p)
}

func (b *books) done(t *testing.T, c charge.Charge) {
	t.Helper()
	cl := b.claim(t, c)
	if err := b.guard.Complete(t.Context(), cl.Lease(), string(charge.Debited), "REF-"+charge.BankKey(c.ID, cl.Record.Generation)); err != nil {
		t.Fatal(err)
	}
}

func (b *books) failed(t *testing.T, c charge.Charge) {
	t.Helper()
	cl := b.claim(t, c)
	if err := b.guard.Fail(t.Context(), cl.Lease(), string(charge.Failed), (&charge.DeclineError{Code: "INSUFFICIENT_FUNDS"}).Error()); err != nil {
		t.Fatal(err)
	}
}

func (b *books) claimed(t *testing.T, c charge.Charge) { b.claim(t, c) }

// claim claims c as the service does: its fingerprint and its summary
// (none when b.noSummary: a record written before summaries).
func (b *books) claim(t *testing.T, c charge.Charge) idempotency.Claim {
	t.Helper()
	req, err := b.guard.ClaimRequest(c.ID, c.Fingerprint(b.fp))
	if err != nil {
		t.Fatal(err)
	}
	if !b.noSummary {
		req.Summary = charge.SummaryOf(c).String()
	}
	res, err := b.store.Claim(t.Context(), req)
	cl := idempotency.ClaimOf(req, res)
	if err != nil || !cl.Outcome.Owned() {
		t.Fatalf("claim %s: %v %v", c.ID, cl.Outcome, err)
	}
	return cl
}

func (b *books) postings_() reconcile.Postings {
	return func(fn func(statement.Posting) error) (statement.Period, error) {
		for _, p := range b.postings {
			if err := fn(p); err != nil {
				return statement.Period{}, err
			}
		}
		return statement.Period{}, nil
	}
}

func (b *books) run(t *testing.T) reconcile.Report {
	t.Helper()
	rep, err := reconcile.Run(t.Context(), reconcile.Options{Store: b.store, Fingerprints: b.fp, Period: period, Now: b.clock.Now()}, b.postings_())
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	return rep
}

// mine is the report's breaks of this test's charges (a shared database
// may hold other tests' records), as "kind charge" lines.
func (b *books) mine(rep reconcile.Report) []string {
	var got []string
	for _, br := range rep.Breaks {
		if strings.HasPrefix(br.ChargeID, b.prefix) {
			got = append(got, string(br.Kind)+" "+strings.TrimPrefix(br.ChargeID, b.prefix))
		}
	}
	slices.Sort(got)
	return got
}

// plant writes every case and returns the breaks expected.
func (b *books) plant(t *testing.T) []string {
	t.Helper()
	// Finished the day before, not posted on this statement: not this
	// period's business.
	old := b.charge("old-day", 2500)
	b.clock.Advance(-12 * time.Hour)
	b.done(t, old)
	b.clock.Advance(12 * time.Hour)

	ok := b.charge("ok", 2500) // DONE, posted once, narrative checked
	b.done(t, ok)
	b.post(ok, 1, 2500, true)
	bare := b.charge("ok-no-narrative", 2500) // checked against the record's summary
	b.done(t, bare)
	b.post(bare, 1, 2500, false)
	b.noSummary = true
	older := b.charge("ok-older-record", 2500) // written before summaries: matched by key only
	b.done(t, older)
	b.post(older, 1, 2500, false)
	b.noSummary = false
	offByOne := b.charge("off-by-one-no-narrative", 2500) // booked 26.00, no narrative
	b.done(t, offByOne)
	b.post(offByOne, 1, 2600, false)
	otherAcct := b.charge("other-account-no-narrative", 2500) // from another account, no narrative
	b.done(t, otherAcct)
	b.post(otherAcct, 1, 2500, false)
	b.postings[len(b.postings)-1].Account = "009999999999"
	gen2 := b.charge("ok-gen2", 4000) // declined, reopened with a new key, posted under it
	b.failed(t, gen2)
	if _, err := b.guard.Reopen(t.Context(), gen2.ID, "funded", idempotency.ReopenOptions{NewGeneration: true, Eligible: charge.EligibleForNewGeneration}); err != nil {
		t.Fatal(err)
	}
	b.done(t, gen2)
	b.post(gen2, 2, 4000, true)

	crashed := b.charge("crashed", 2500) // posted, the consumer died before DONE
	b.claimed(t, crashed)
	b.post(crashed, 1, 2500, true)
	lost := b.charge("lost", 2500) // DONE, no posting
	b.done(t, lost)
	reversed := b.charge("reversed", 2500) // DONE, posted, reversed
	b.done(t, reversed)
	b.reverse(b.post(reversed, 1, 2500, true))
	twice := b.charge("twice", 2500) // two postings under one key
	b.done(t, twice)
	b.post(twice, 1, 2500, true)
	b.post(twice, 1, 2500, true)
	twoGens := b.charge("two-gens", 2500) // the declined key posted too
	b.failed(t, twoGens)
	if _, err := b.guard.Reopen(t.Context(), twoGens.ID, "funded", idempotency.ReopenOptions{NewGeneration: true, Eligible: charge.EligibleForNewGeneration}); err != nil {
		t.Fatal(err)
	}
	b.done(t, twoGens)
	b.post(twoGens, 1, 2500, true)
	b.post(twoGens, 2, 2500, true)
	wrong := b.charge("wrong-amount", 2500) // posted 30.00 for 25.00
	b.done(t, wrong)
	b.post(wrong, 1, 3000, true)
	failed := b.charge("failed-posted", 2500) // FAILED, yet posted
	b.failed(t, failed)
	b.post(failed, 1, 2500, true)
	stranger := charge.Charge{ID: b.prefix + "never-seen", AccountID: "009988776655", Amount: charge.Money{Minor: 2500, Currency: "INR"},
		Type: charge.SMSAlertFee, DueDate: day}
	b.post(stranger, 1, 2500, true)

	// Leases pass; then one more charge is claimed and posted now: a
	// consumer finishing it (in flight, no break).
	b.clock.Advance(time.Hour)
	busy := b.charge("in-flight", 2500)
	b.claimed(t, busy)
	b.post(busy, 1, 2500, true)
	// And one finished after the period: not this statement's.
	b.clock.Advance(24 * time.Hour)
	late := b.charge("next-day", 2500)
	b.done(t, late)
	b.clock.Advance(-24 * time.Hour)

	return []string{
		"amount_mismatch off-by-one-no-narrative",
		"amount_mismatch other-account-no-narrative",
		"amount_mismatch wrong-amount",
		"failed_but_posted failed-posted",
		"posted_not_recorded crashed",
		"posted_twice twice",
		"posted_twice two-gens",
		"recorded_not_posted lost",
		"recorded_not_posted reversed",
		"unknown_posting never-seen",
	}
}

// reconcileOn plants every break on s, finds exactly those, resolves them
// (adopting the crashed charge's posting) and finds none on the next run
// of the same statement.
func reconcileOn(t *testing.T, s driver.Store, prefix string) {
	b := newBooks(t, s, prefix)
	want := b.plant(t)
	rep := b.run(t)
	if got := b.mine(rep); !slices.Equal(got, want) {
		t.Fatalf("breaks:\n  got  %q\n  want %q", got, want)
	}
	if rep.InFlight < 1 || rep.Matched < 4 || rep.Unverified < 1 {
		t.Errorf("in flight %d (want ≥ 1), matched %d (want ≥ 4: ok, ok-no-narrative, ok-older-record, ok-gen2), unverified %d (want ≥ 1: ok-older-record)",
			rep.InFlight, rep.Matched, rep.Unverified)
	}
	if !slices.ContainsFunc(rep.KeyOnly, func(id string) bool { return id == prefix+"ok-older-record" }) ||
		slices.ContainsFunc(rep.KeyOnly, func(id string) bool { return id == prefix+"ok-no-narrative" }) {
		t.Errorf("matched by key only %q: want the older record listed, not the one with a summary", rep.KeyOnly)
	}
	for _, br := range rep.Breaks {
		if strings.HasPrefix(br.ChargeID, prefix) && (br.Action == "" || br.Detail == "" || br.ID == "") {
			t.Errorf("break %s %s without detail, action or id: %+v", br.Kind, br.ChargeID, br)
		}
	}
	// No account number whole in the report.
	out, _ := json.Marshal(rep)
	for _, c := range b.charges {
		if strings.Contains(string(out), c.AccountID) {
			t.Fatalf("the report holds account %s whole", c.AccountID)
		}
	}

	// Resolve every break; the crashed charge's posting is adopted.
	for _, br := range rep.Breaks {
		if !strings.HasPrefix(br.ChargeID, prefix) {
			continue
		}
		res, err := reconcile.Resolve(t.Context(), reconcile.Options{Store: s, Fingerprints: b.fp, Period: period, Now: b.clock.Now()}, b.postings_(),
			reconcile.ResolveRequest{ChargeID: br.ChargeID, Reason: "INC-9: checked with the bank", Operator: "asha", Guard: b.guard})
		if err != nil {
			t.Fatalf("resolve %s: %v", br.ChargeID, err)
		}
		wantAction := "marked"
		if br.Kind == reconcile.PostedNotRecorded || br.Kind == reconcile.FailedButPosted {
			wantAction = "adopted" // the posting recorded: DONE, never debited again
		}
		if res.Action != wantAction || res.Break.Kind != br.Kind {
			t.Errorf("resolve %s: %s %s, want %s %s", br.ChargeID, res.Action, res.Break.Kind, wantAction, br.Kind)
		}
	}
	// The report made before the resolutions, checked again: nothing of
	// ours open (the adoption included), every break counted resolved.
	open, err := rep.Open(t.Context(), s, b.clock.Now())
	if err != nil {
		t.Fatal(err)
	}
	if got := b.mine(open); len(got) != 0 || open.Resolved < rep.Resolved+len(want) {
		t.Fatalf("the earlier report checked again: open %q, resolved %d (was %d), want none open and %d more resolved", got, open.Resolved, rep.Resolved, len(want))
	}
	adopted, err := b.guard.Get(t.Context(), prefix+"crashed")
	if err != nil {
		t.Fatal(err)
	}
	notice, kept := charge.PendingNotice(adopted.Status, adopted.Detail)
	if adopted.State != driver.StateDone || adopted.Status != string(charge.DebitedNotificationFailed) || !kept || notice.Reference != "REF-"+prefix+"crashed" ||
		notice.Amount.Minor != 2500 || notice.Account != charge.MaskAccount(b.charges[prefix+"crashed"].AccountID) ||
		len(adopted.History) != 1 || !strings.Contains(adopted.History[0], "adopted from the bank's statement") || !strings.Contains(adopted.History[0], "asha") {
		t.Errorf("adopted record = %s %s %q history %q", adopted.State, adopted.Status, adopted.Detail, adopted.History)
	}
	again := b.run(t)
	if got := b.mine(again); len(got) != 0 {
		t.Fatalf("after resolving, the same statement still shows %q", got)
	}
	if again.Resolved < len(want)-2 {
		t.Errorf("resolved = %d, want at least %d (every break but the two adopted, which now match)", again.Resolved, len(want)-2)
	}
	if rec, err := b.guard.Get(t.Context(), prefix+"failed-posted"); err != nil || rec.State != driver.StateDone || charge.ReferenceOf(rec.Status, rec.Detail) != "REF-"+prefix+"failed-posted" {
		t.Errorf("failed_but_posted resolved: record %s %s %q (%v), want DONE with the posting's reference: collected, never debited again", rec.State, rec.Status, rec.Detail, err)
	}
	// Resolving again: nothing open.
	_, err = reconcile.Resolve(t.Context(), reconcile.Options{Store: s, Period: period, Now: b.clock.Now()}, b.postings_(),
		reconcile.ResolveRequest{ChargeID: prefix + "lost", Reason: "again", Guard: b.guard})
	if !errors.Is(err, reconcile.ErrNoBreak) {
		t.Errorf("resolving a resolved break: %v, want ErrNoBreak", err)
	}
	// A break with other facts is a new one: a second posting of the
	// lost charge after its resolution comes back as a break.
	lost := b.charges[prefix+"lost"]
	b.post(lost, 1, 2500, true)
	b.post(lost, 1, 2500, true)
	if got := b.mine(b.run(t)); !slices.Equal(got, []string{"posted_twice lost"}) {
		t.Errorf("a new break of a resolved charge: got %q, want posted_twice lost", got)
	}
}

// backends open a store of each backend, for the tests that run on all of
// them (PostgreSQL, Redis and DynamoDB skip where none runs).
var backends = map[string]func(t *testing.T) driver.Store{
	"memory": func(*testing.T) driver.Store { return memstore.New() },
	"sqlite": func(t *testing.T) driver.Store {
		db := sqlitetest.Open(t, "ic.db", sqlite.OpenOptions{})
		return sqlite.NewStore(db)
	},
	"postgres": func(t *testing.T) driver.Store { return postgres.NewStore(pgtest.Open(t)) },
	"redis": func(t *testing.T) driver.Store {
		rdb, prefix := dbtest.Redis(t)
		s, err := redisstore.New(rdb, redisstore.Options{Prefix: prefix})
		if err != nil {
			t.Fatal(err)
		}
		return s
	},
	"dynamodb": func(t *testing.T) driver.Store {
		client := dynamodb.NewFromConfig(awstest.Config(t))
		table := awstest.Name("recon")
		if err := awsdynamodb.CreateTable(t.Context(), client, table); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = awsdynamodb.DeleteTable(context.Background(), client, table) })
		s, err := awsdynamodb.New(client, table)
		if err != nil {
			t.Fatal(err)
		}
		return s
	},
}

func TestReconcileOnMemory(t *testing.T)   { reconcileOn(t, backends["memory"](t), "CHG-") }
func TestReconcileOnSQLite(t *testing.T)   { reconcileOn(t, backends["sqlite"](t), "CHG-") }
func TestReconcileOnPostgres(t *testing.T) { reconcileOn(t, backends["postgres"](t), "CHG-") }
func TestReconcileOnRedis(t *testing.T)    { reconcileOn(t, backends["redis"](t), "CHG-") }
func TestReconcileOnDynamoDB(t *testing.T) { reconcileOn(t, backends["dynamodb"](t), "CHG-") }

func TestSplitBankKey(t *testing.T) {
	for _, c := range []struct {
		key, id string
		gen     int
	}{
		{"CHG-1", "CHG-1", 1}, {"CHG-1~2", "CHG-1", 2}, {"CHG-1~13", "CHG-1", 13},
		{"CHG-1~1", "CHG-1", 0}, {"CHG-1~x", "CHG-1", 0}, {"CHG-1~02", "CHG-1", 0}, {"CHG-1~", "CHG-1", 0},
	} {
		if id, gen := reconcile.SplitBankKey(c.key); id != c.id || gen != c.gen {
			t.Errorf("SplitBankKey(%q) = %q, %d; want %q, %d", c.key, id, gen, c.id, c.gen)
		}
	}
}

func TestARunNeedsAPeriod(t *testing.T) {
	_, err := reconcile.Run(t.Context(), reconcile.Options{Store: memstore.New()}, func(func(statement.Posting) error) (statement.Period, error) { return statement.Period{}, nil })
	if !errors.Is(err, reconcile.ErrNoPeriod) {
		t.Fatalf("Run without a period: %v, want ErrNoPeriod", err)
	}
}

func TestDebitTime(t *testing.T) {
	created, updated := day.Add(9*time.Hour), day.AddDate(0, 0, 2)
	for _, c := range []struct {
		name string
		last string
		want time.Time
	}{
		{"finished", "", updated},
		{"renotified with the debit's time", "renotified 2026-12-03T08:00:00Z by ops on sns: K notice sent; was DEBITED_NOTIFICATION_FAILED; debited 2026-12-01T10:30:00Z; why: x", day.Add(10*time.Hour + 30*time.Minute)},
		{"renotified by an older version", "renotified 2026-12-03T08:00:00Z by ops on sns: K notice sent; was DEBITED_NOTIFICATION_FAILED; why: x", created},
		{"adopted", reconcile.AdoptedLine + " 2026-12-03T08:00:00Z by asha: posted INR 25.00 under K, booked 2026-12-01, reference R; no debit; n; why: x", day},
		{"reopened once, then finished", "generation 1: FAILED declined (attempt 1); reopened …", updated},
	} {
		rec := driver.Record{State: driver.StateDone, CreatedAt: created, UpdatedAt: updated}
		if c.last != "" {
			rec.History = []string{c.last}
		}
		if got := reconcile.DebitTime(rec); !got.Equal(c.want) {
			t.Errorf("%s: DebitTime = %s, want %s", c.name, got, c.want)
		}
	}
}

func attackResolve(t *testing.T, b *books, p statement.Period, id string) (reconcile.Resolved, error) {
	t.Helper()
	return reconcile.Resolve(t.Context(), reconcile.Options{Store: b.store, Fingerprints: b.fp, Period: p, Now: b.clock.Now()}, b.postings_(),
		reconcile.ResolveRequest{ChargeID: id, Reason: "attack", Operator: "mallory", Guard: b.guard})
}

// crashed is c claimed by a consumer that died in the debit: its lease
// has passed.
func (b *books) crashed(t *testing.T, c charge.Charge) {
	t.Helper()
	b.claimed(t, c)
	b.clock.Advance(2 * time.Minute)
}

// runNextDay is the run of the day after period over postings (the next
// day's statement), a day later.
func (b *books) runNextDay(t *testing.T, postings ...statement.Posting) reconcile.Report {
	t.Helper()
	b.postings = postings
	b.clock.Advance(24 * time.Hour)
	rep, err := reconcile.Run(t.Context(), reconcile.Options{Store: b.store, Fingerprints: b.fp,
		Period: statement.Period{From: period.To, To: period.To.AddDate(0, 0, 1)}, Now: b.clock.Now()}, b.postings_())
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// wantNoSecondDebit wants c, whose debit the bank posted, refused a reopen
// into a new generation; else it fails with why, the record's state and
// generation after it.
func (b *books) wantNoSecondDebit(t *testing.T, c charge.Charge, why string) {
	t.Helper()
	if _, err := b.guard.Reopen(t.Context(), c.ID, "customer funded the account", idempotency.ReopenOptions{NewGeneration: true, Eligible: charge.EligibleForNewGeneration}); err == nil {
		rec, _ := b.store.Get(t.Context(), c.ID, b.clock.Now())
		t.Fatalf("%s: %s gen %d", why, rec.State, rec.Generation)
	}
}

func findBreak(rep reconcile.Report, id string) *reconcile.Break {
	for i := range rep.Breaks {
		if rep.Breaks[i].ChargeID == id {
			return &rep.Breaks[i]
		}
	}
	return nil
}

// toolClaim is a tool's claim of its own internal key (a renotify's).
func (b *books) toolClaim(t *testing.T, key string) idempotency.Claim {
	t.Helper()
	cl, err := b.guard.Claim(t.Context(), key, "notice")
	if err != nil || !cl.Outcome.Owned() {
		t.Fatalf("claim: %v %v", cl.Outcome, err)
	}
	return cl
}

// A posting whose bank key is a tool's own internal key ("_renotify/…",
// "_reconcile/…") is read as a charge: Run Gets the internal record, finds
// it DONE and counts the posting as matched. No charge key ever starts
// with "_" (driver.InternalKeyPrefix): it is an unknown posting, a debit
// the collector never sent, and must be reported.
func TestAttackPostingUnderInternalKeyCountsAsMatched(t *testing.T) {
	b := newBooks(t, memstore.New(), "ATK-")
	key := "_renotify/ATK-1"
	cl := b.toolClaim(t, key)
	if err := b.guard.Complete(t.Context(), cl.Lease(), "SENT", "ok"); err != nil {
		t.Fatal(err)
	}
	b.postAs(key, "BANK-1")
	rep := b.run(t)
	// Not a key the collector sends: shown masked (ShowKey).
	if br := findBreak(rep, reconcile.ShowKey(key)); br == nil || br.Kind != reconcile.UnknownPosting || br.ChargeID != "***********TK-1" {
		t.Fatalf("a posting under the internal key %s: breaks %+v, matched %d; want an unknown_posting break", key, rep.Breaks, rep.Matched)
	}
}

// Worse: a tool's claim left IN_PROGRESS (a renotify that crashed) plus a
// bank posting under that key is a posted_not_recorded break, and Resolve
// "adopts" it: the tool's internal record is completed DONE DEBITED.
func TestAttackResolveAdoptsInternalToolClaim(t *testing.T) {
	b := newBooks(t, memstore.New(), "ATK-")
	key := "_renotify/ATK-2"
	b.toolClaim(t, key)
	b.clock.Advance(2 * time.Minute) // the tool's lease passes
	b.postAs(key, "BANK-2")
	// Fixed: the posting is an unknown one (no record read), which a
	// resolve may mark; the tool's record is never touched.
	res, err := attackResolve(t, b, period, key)
	rec, _ := b.store.Get(t.Context(), key, b.clock.Now())
	if (err == nil && (res.Action != "marked" || res.Break.Kind != reconcile.UnknownPosting)) || rec.State != driver.StateInProgress || rec.Status != "" {
		t.Fatalf("Resolve of internal key %s: %s %s (%v); the tool's record is now %s %s %q", key, res.Action, res.Break.Kind, err, rec.State, rec.Status, rec.Detail)
	}
}

// Reversals that do not bring the charge back to one debit of its amount
// hide nothing. Two postings of 25.00 under the charge's key and one
// reversal of 1.00: the customer paid 49.00 for a 25.00 charge (Run netted
// postings by count, whatever the amounts: one stood, it matched, the
// report was clean). Reversals are paired with postings by count, not by
// amount: 99.99 posted in error, 25.00 posted, and the bank reverses the
// 25.00. The 99.99 stands on the customer's account, but the run checked
// the last posting (25.00), found it the charge's and reported a match.
func TestAttackReversalsHideNoDebit(t *testing.T) {
	for _, tc := range []struct {
		name, charge string
		posted       []int64 // the postings' amounts, in order
		reverse      int     // the posting reversed
		reversed     int64   // the reversal's amount
		what         string
	}{
		{"a partial reversal of a double debit", "double", []int64{2500, 2500}, 0, 100,
			"49.00 net debited for a 25.00 charge (2 × 25.00 posted, 1.00 reversed)"},
		{"a reversal paired by position, not amount", "wrong-reversed", []int64{9999, 2500}, 1, 2500,
			"99.99 stands for a 25.00 charge (the 25.00 was reversed)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newBooks(t, memstore.New(), "ATK-")
			c := b.charge(tc.charge, 2500)
			b.done(t, c)
			var posted []statement.Posting
			for _, minor := range tc.posted {
				posted = append(posted, b.post(c, 1, minor, true))
			}
			r := posted[tc.reverse]
			r.Amount.Minor = tc.reversed
			b.reverse(r)
			rep := b.run(t)
			if findBreak(rep, c.ID) == nil {
				t.Fatalf("%s: no break; matched %d", tc.what, rep.Matched)
			}
		})
	}
}

// A resolution that was claimed but never completed (resolve crashed, or
// its Complete failed, or it is running right now) hides the break: the
// run drops any break whose resolution key merely exists, whatever its
// state.
func TestAttackUnfinishedResolutionHidesBreak(t *testing.T) {
	b := newBooks(t, memstore.New(), "ATK-")
	c := b.charge("lost", 2500)
	b.done(t, c) // DONE, never posted: recorded_not_posted
	other := b.charge("other", 100)
	b.done(t, other)
	b.post(other, 1, 100, true) // the day's statement is there: it has another charge
	rep := b.run(t)
	br := findBreak(rep, c.ID)
	if br == nil {
		t.Fatalf("no break for %s", c.ID)
	}
	key := reconcile.ResolutionPrefix + br.ChargeID + "/" + string(br.Kind) + "/" + br.ID
	cl, err := b.guard.Claim(t.Context(), key, br.ID) // the resolve process dies here
	if err != nil || !cl.Outcome.Owned() {
		t.Fatalf("claim: %v %v", cl.Outcome, err)
	}
	rec, _ := b.store.Get(t.Context(), key, b.clock.Now())
	if rec.State != driver.StateInProgress {
		t.Fatalf("resolution record %s, want IN_PROGRESS", rec.State)
	}
	again := b.run(t)
	if findBreak(again, c.ID) == nil {
		t.Fatalf("a resolution left IN_PROGRESS (no reason ever written) hides the break: breaks %d, resolved %d", len(again.Breaks), again.Resolved)
	}
}

// An IN_PROGRESS charge of 25.00 whose "posting" is 9,999.00 to some other
// account: Run says posted_not_recorded (it never checks the amount of an
// IN_PROGRESS record's posting), and Resolve adopts it — the charge is
// recorded DONE DEBITED with a posting that is not the charge's.
func TestAttackAdoptsPostingOfWrongAmountAndAccount(t *testing.T) {
	b, c := oneCharge(t, "ATK-", "crashed", (*books).crashed)
	p := b.post(c, 1, 999900, true)
	b.postings[len(b.postings)-1].Account = "009999999999"
	_ = p
	rep := b.run(t)
	br := findBreak(rep, c.ID)
	if br == nil {
		t.Fatal("no break")
	}
	res, err := attackResolve(t, b, period, c.ID)
	if err == nil && res.Action == "adopted" {
		rec, _ := b.store.Get(t.Context(), c.ID, b.clock.Now())
		t.Fatalf("run said %s (not amount_mismatch); Resolve adopted a 9,999.00 posting to another account for a 25.00 charge: record %s %s %q",
			br.Kind, rec.State, rec.Status, rec.Detail)
	}
}

// The usual day: the statement of day D comes in on D+1, the operator
// adopts the crashed charge's posting on D+1. The record's UpdatedAt is
// now D+1, so D+1's run (whose statement rightly has no posting of it) reports
// it recorded_not_posted — and D's run never listed it as finished in D.
func TestAttackAdoptedNextDayComesBackAsRecordedNotPosted(t *testing.T) {
	b, c := oneCharge(t, "ATK-", "crashed", (*books).claimed)
	b.post(c, 1, 2500, true)
	b.clock.Advance(24 * time.Hour) // D+1 09:00
	if res, err := attackResolve(t, b, period, c.ID); err != nil || res.Action != "adopted" {
		t.Fatalf("adopt: %v %v", res.Action, err)
	}
	next := statement.Period{From: period.To, To: period.To.AddDate(0, 0, 1)}
	b.postings = nil // D+1's statement: nothing of this charge (it was booked on D)
	rep, err := reconcile.Run(t.Context(), reconcile.Options{Store: b.store, Fingerprints: b.fp, Period: next, Now: b.clock.Now().Add(24 * time.Hour)}, b.postings_())
	if err != nil {
		t.Fatal(err)
	}
	if br := findBreak(rep, c.ID); br != nil {
		t.Fatalf("D+1's run: %s %s: %s (its posting was on D's statement, adopted on D+1)", br.Kind, br.ChargeID, br.Detail)
	}
}

// "X~0" is no key the collector ever sends (generations start at 2 after
// the bare id), yet it is filed under charge X: with X's own posting it
// makes X posted_twice, telling the operator to have one of X's debits
// refunded, instead of an unknown_posting of "X~0".
func TestAttackMalformedGenerationSuffixIsFiledUnderCharge(t *testing.T) {
	b, c := oneCharge(t, "ATK-", "ok", (*books).done)
	b.post(c, 1, 2500, true)
	b.postings = append(b.postings, statement.Posting{BankKey: c.ID + "~0", Account: "007777777777", Amount: charge.Money{Minor: 500, Currency: "INR"},
		BookingDate: day, Reference: "SOMEONE-ELSE", Where: "test"})
	rep := b.run(t)
	if br := findBreak(rep, c.ID); br != nil {
		t.Fatalf("a posting under %q turned %s (matched) into %s: %s", c.ID+"~0", c.ID, br.Kind, br.Detail)
	}
}

// The text report prints bank-supplied text (references, keys) raw: a CSV
// export's reference with terminal escapes or a newline rewrites what the
// operator sees (here: clears the screen and forges "0 breaks").
func TestAttackTextReportPrintsControlCharacters(t *testing.T) {
	b := newBooks(t, memstore.New(), "ATK-")
	b.postAs("ATK-stranger", "R\x1b[2J\x1b[H\nperiod 2026-12-01 to 2026-12-02: 0 postings, 0 breaks\n")
	rep := b.run(t)
	out, _, _ := written(t, rep)
	if strings.ContainsRune(out, 0x1b) || strings.Contains(out, "\nperiod 2026-12-01 to 2026-12-02: 0 postings") {
		t.Fatalf("the text report carries the bank's control characters raw:\n%q", out)
	}
}

// Resolve with an empty charge id: opts.ChargeID "" means "no filter", so
// the run covers every charge and the one open break of the kind asked —
// another charge's — is marked resolved, under a request (and, on the
// command line, an audit line) that names charge "". A bank key "~2"
// (charge id "") gives such a break to resolve in the first place.
func TestAttackResolveEmptyChargeIDMarksAnotherChargesBreak(t *testing.T) {
	b := newBooks(t, memstore.New(), "ATK-")
	c := b.charge("lost", 2500)
	b.done(t, c) // recorded_not_posted
	res, err := reconcile.Resolve(t.Context(), reconcile.Options{Store: b.store, Fingerprints: b.fp, Period: period, Now: b.clock.Now()}, b.postings_(),
		reconcile.ResolveRequest{ChargeID: "", Kind: reconcile.RecordedNotPosted, Reason: "attack", Operator: "mallory", Guard: b.guard})
	if err == nil {
		t.Fatalf("Resolve(ChargeID \"\"): %s the break of %s", res.Action, res.Break.ChargeID)
	}
}

// failed_but_posted: the bank took the money of a charge recorded FAILED.
// Resolve only marks the break; the record stays FAILED (declined), so a
// reopen with a new attempt — the ordinary answer to a FAILED decline, and
// what the DLQ tooling offers — is still allowed and would debit the
// customer a second time under "<id>~2". The resolution closes the
// reconciliation break but leaves the double-debit path open.
//
// The same hole for a declined generation (the second review): generation
// 1 was declined, the record reopened into generation 2, which failed too;
// the bank posted generation 1 after all. The break is failed_but_posted
// ("or, if the later generation never posts, keep it"); Resolve without
// --refunded — the money kept — only MARKS it (the collect path wants the
// current key among the postings), the record stays FAILED, and a reopen
// into generation 3 debits the customer a second time.
func TestAttackResolvedFailedButPostedStaysReopenable(t *testing.T) {
	for _, tc := range []struct {
		name, prefix, charge string
		decline              func(b *books, t *testing.T, c charge.Charge)
		why                  string // %s: the resolve's action
	}{
		{"declined", "ATK-", "failed-posted", (*books).failed,
			"after failed_but_posted was resolved (%s), the charge the bank already posted was reopened for a second debit"},
		{"a declined generation kept", "ATK2-", "keptgen1", (*books).declinedTwice,
			"generation 1's posting kept (resolve %s, not --refunded), yet the charge reopens for another debit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newBooks(t, memstore.New(), tc.prefix)
			c := b.charge(tc.charge, 2500)
			tc.decline(b, t, c)
			b.post(c, 1, 2500, true)
			res, err := attackResolve(t, b, period, c.ID)
			if err != nil || res.Break.Kind != reconcile.FailedButPosted {
				t.Fatalf("resolve: %v %+v", err, res)
			}
			b.wantNoSecondDebit(t, c, fmt.Sprintf(tc.why, res.Action))
		})
	}
}

// recorded_not_posted for a reversed debit advises "recover the charge
// again (reopen with a new attempt)", but a reopen only takes a FAILED
// record: the charge is DONE, the bank gave the money back, and no tool can
// collect it again (the fee is lost; the advice cannot be followed).
func TestAttackReversedDebitCannotBeRecoveredAsAdvised(t *testing.T) {
	b, c := oneCharge(t, "ATK-", "reversed", (*books).done)
	b.reverse(b.post(c, 1, 2500, true))
	br := b.wantBreak(t, c, reconcile.RecordedNotPosted)
	// Fixed by the advice, not by a reopen: a DONE charge is never debited
	// again under its id (the guard's promise); the advice says so and
	// sends the fee back to billing under a new id.
	if _, err := b.guard.Reopen(t.Context(), c.ID, "the bank reversed the debit", idempotency.ReopenOptions{NewGeneration: true, Eligible: charge.EligibleForNewGeneration}); err == nil {
		t.Fatal("a DONE charge was reopened")
	}
	if strings.Contains(br.Action, "reopen") || !strings.Contains(br.Action, "new charge id") {
		t.Fatalf("the advice %q points at a reopen (refused for a DONE charge), not at billing's new charge id", br.Action)
	}
}

// A break of a charge DONE DEBITED_NOTIFICATION_FAILED is resolved; then
// the missed notice is sent again (renotify amends the record to DEBITED,
// same debit, same reference). The break's id digests the record's
// status, so the same statement now shows the resolved break again as a
// new one.
func TestAttackRenotifyResurrectsResolvedBreak(t *testing.T) {
	b := newBooks(t, memstore.New(), "ATK-")
	c := b.charge("notice-failed", 2500)
	cl, err := b.guard.Claim(t.Context(), c.ID, c.Fingerprint(b.fp))
	if err != nil || !cl.Outcome.Owned() {
		t.Fatalf("claim: %v %v", cl.Outcome, err)
	}
	notice, _ := charge.NoticeOf(c, charge.DebitReceipt{Reference: "REF-" + c.ID}, b.clock.Now()).Marshal()
	if err := b.guard.Complete(t.Context(), cl.Lease(), string(charge.DebitedNotificationFailed), string(notice)); err != nil {
		t.Fatal(err)
	}
	b.post(c, 1, 3000, true) // amount_mismatch
	b.wantBreak(t, c, reconcile.AmountMismatch)
	if _, err := attackResolve(t, b, period, c.ID); err != nil {
		t.Fatal(err)
	}
	rec, _ := b.store.Get(t.Context(), c.ID, b.clock.Now())
	if _, err := b.store.(driver.Amender).Amend(t.Context(), driver.AmendRequest{Key: c.ID, Token: rec.Token, FromStatus: rec.Status,
		Status: string(charge.Debited), Detail: "REF-" + c.ID, History: []string{"notice sent again"}, Now: b.clock.Now()}); err != nil {
		t.Fatal(err)
	}
	again := b.run(t)
	if br := findBreak(again, c.ID); br != nil {
		t.Fatalf("the resolved %s came back as break %s after the notice was sent again (resolved %d)", br.Kind, br.ID, again.Resolved)
	}
}

// An adoption records DEBITED — which means "the debit succeeded and the
// notification was sent" (charge.Debited) — for a consumer that died
// between the debit and DONE, i.e. most likely before it sent the
// customer's debit notice. renotify only picks DEBITED_NOTIFICATION_FAILED
// records, so the customer is never told of the debit.
func TestAttackAdoptionClaimsTheNoticeWasSent(t *testing.T) {
	b, c := oneCharge(t, "ATK-", "crashed", (*books).claimed)
	b.post(c, 1, 2500, true)
	b.clock.Advance(2 * time.Minute)
	res, err := attackResolve(t, b, period, c.ID)
	if err != nil || res.Action != "adopted" {
		t.Fatalf("adopt: %v %+v", err, res)
	}
	rec, _ := b.store.Get(t.Context(), c.ID, b.clock.Now())
	if _, pending := charge.PendingNotice(rec.Status, rec.Detail); !pending {
		t.Fatalf("adopted record %s %s %q: recorded as notified (no notice pending for renotify), though no notice was sent", rec.State, rec.Status, rec.Detail)
	}
}

// Issue 51: a bank's reference holding bidirectional controls (U+202E
// reverses what follows, U+2066 opens an isolate) is shown escaped in the
// text report and the CSV, never raw.
func TestReportEscapesBidirectionalControls(t *testing.T) {
	b := newBooks(t, memstore.New(), "BIDI-")
	b.postAs("BIDI-stranger", "REF\u202e1-GHC\u2066x")
	rep := b.run(t)
	text, csv, _ := written(t, rep)
	for name, out := range map[string]string{"text": text, "csv": csv} {
		if strings.ContainsAny(out, "\u202e\u2066") || !strings.Contains(out, `REF\u202e1-GHC\u2066x`) {
			t.Errorf("the %s report does not show the reference escaped:\n%s", name, out)
		}
	}
}

// declinedTwice is c declined, reopened into generation 2 and declined
// again.
func (b *books) declinedTwice(t *testing.T, c charge.Charge) {
	t.Helper()
	b.failed(t, c)
	if _, err := b.guard.Reopen(t.Context(), c.ID, "retry", idempotency.ReopenOptions{NewGeneration: true}); err != nil {
		t.Fatal(err)
	}
	b.failed(t, c)
}

// A DONE DEBITED_NOTIFICATION_FAILED record renotified later: renotify's
// Amend moves UpdatedAt to the renotify, and the walk of the period goes by
// UpdatedAt. Renotified the same day (or the next day before the daily
// reconcile ran), the debit is never judged: not walked on its own day (its
// UpdatedAt is the renotify's, or it is "amended"), not walked on the
// renotify's day ("amended"). A debit recorded DONE that the bank never
// posted is hidden from every report.
func TestAttack2RenotifiedRecordNeverReconciled(t *testing.T) {
	for _, tc := range []struct {
		name  string
		after time.Duration // renotify this long after the debit (09:00)
	}{{"same day", 2 * time.Hour}, {"next morning before the reconcile", 16 * time.Hour}} {
		t.Run(tc.name, func(t *testing.T) {
			s := memstore.New()
			b := newBooks(t, s, "ATK2-")
			c := b.charge("renotified", 2500)
			cl, err := b.guard.Claim(t.Context(), c.ID, c.Fingerprint(b.fp))
			if err != nil || !cl.Outcome.Owned() {
				t.Fatalf("claim: %v %v", cl.Outcome, err)
			}
			n, _ := charge.NoticeOf(c, charge.DebitReceipt{Reference: "REF-X"}, b.clock.Now()).Marshal()
			if err := b.guard.Complete(t.Context(), cl.Lease(), string(charge.DebitedNotificationFailed), string(n)); err != nil {
				t.Fatal(err)
			}
			// The bank never posted it: the day's statement has only another charge.
			other := b.charge("other", 100)
			b.done(t, other)
			b.post(other, 1, 100, true)

			b.clock.Advance(tc.after)
			rec, _ := s.Get(t.Context(), c.ID, b.clock.Now())
			if _, err := s.Amend(t.Context(), driver.AmendRequest{Key: rec.Key, Token: rec.Token, FromStatus: rec.Status, Status: string(charge.Debited),
				Detail: "REF-X", History: append(rec.History, "renotified "+b.clock.Now().UTC().Format(time.RFC3339)+" by ops on sms: notice sent; was DEBITED_NOTIFICATION_FAILED; why: x"),
				Now: b.clock.Now()}); err != nil {
				t.Fatal(err)
			}
			b.clock.Advance(time.Hour) // the daily reconcile runs after
			found := false
			for _, p := range []statement.Period{period, {From: period.To, To: period.To.AddDate(0, 0, 1)}} {
				rep, err := reconcile.Run(t.Context(), reconcile.Options{Store: s, Fingerprints: b.fp, Period: p, Now: b.clock.Now()}, b.postings_())
				if err != nil {
					t.Fatal(err)
				}
				if findBreak(rep, c.ID) != nil {
					found = true
				}
			}
			if !found {
				t.Fatalf("%s is DONE (debited 25.00, notice renotified %s later) and no statement posted it: neither its day's nor the renotify's day's report has a recorded_not_posted break", c.ID, tc.after)
			}
		})
	}
}

// The adoption records the posting it adopts by scanning every posting
// read under the key and keeping the LAST non-reversal one — not the one
// that stands after pairing, which is the one Run checked against the
// fingerprint. A statement with the good posting first, then a wrong one
// (another account, another amount) that the bank reversed: Run checks the
// good one, the break is posted_not_recorded, and the adoption writes the
// reversed posting's reference, amount and account into the record and
// the notice kept for renotify.
func TestAttack2AdoptionRecordsTheReversedPosting(t *testing.T) {
	b, c := oneCharge(t, "ATK2-", "adopt", (*books).crashed)
	good := b.post(c, 1, 2500, true)
	bad := b.post(c, 1, 99900, true)
	bad.Account = "009999999999"
	b.postings[len(b.postings)-1] = bad
	b.reverse(bad)
	b.wantBreak(t, c, reconcile.PostedNotRecorded)
	res, err := attackResolve(t, b, period, c.ID)
	if err != nil || res.Action != "adopted" {
		t.Fatalf("resolve: %v %v", res.Action, err)
	}
	rec, _ := b.store.Get(t.Context(), c.ID, b.clock.Now())
	ref := charge.ReferenceOf(rec.Status, rec.Detail)
	n, _ := charge.PendingNotice(rec.Status, rec.Detail)
	if ref != good.Reference || n.Amount.Minor != 2500 || n.Account != charge.MaskAccount(c.AccountID) {
		t.Fatalf("adopted %s with reference %q (want the standing posting's %q), notice amount %d to %s (the charge is 2500 to %s): the reversed posting was recorded; history %q",
			c.ID, ref, good.Reference, n.Amount.Minor, n.Account, charge.MaskAccount(c.AccountID), rec.History)
	}
}

// The same with a posting outside the period: Resolve's kept list is
// filled before Run drops the postings booked outside the period, so a
// posting Run left out ("booked outside the period") is the one adopted.
func TestAttack2AdoptionRecordsAPostingOutsideThePeriod(t *testing.T) {
	b, c := oneCharge(t, "ATK2-", "adoptout", (*books).crashed)
	good := b.post(c, 1, 2500, true)
	bad := b.post(c, 1, 4400, true)
	bad.BookingDate = day.AddDate(0, 0, -3)
	b.postings[len(b.postings)-1] = bad
	res, err := attackResolve(t, b, period, c.ID)
	if err != nil || res.Action != "adopted" {
		t.Fatalf("resolve: %v %v", res.Action, err)
	}
	rec, _ := b.store.Get(t.Context(), c.ID, b.clock.Now())
	if ref := charge.ReferenceOf(rec.Status, rec.Detail); ref != good.Reference {
		t.Fatalf("adopted %s with reference %q, not the period's posting %q: a posting booked outside the period (left out of the run) was recorded; history %q", c.ID, ref, good.Reference, rec.History)
	}
}

// reopenRace is a store on which a consumer's redelivery arrives right
// after a Reopen: what any delivery in flight does.
type reopenRace struct {
	*memstore.Store
	onReopen func()
}

func (s *reopenRace) Reopen(ctx context.Context, r driver.ReopenRequest) (driver.Record, error) {
	rec, err := s.Store.Reopen(ctx, r)
	if err == nil && s.onReopen != nil {
		f := s.onReopen
		s.onReopen = nil
		f()
	}
	return rec, err
}

// A failed_but_posted break resolved as collected: Resolve Reopens the
// FAILED record (which makes it one "the next delivery claims at once"),
// then claims it to adopt. Between the two, a redelivery of the charge
// (a retry topic, a replay) claims the record and debits the customer a
// second time; the resolve then fails and leaves the consumer to it.
func TestAttack2CollectReopensForAConsumer(t *testing.T) {
	s := &reopenRace{Store: memstore.New()}
	b := newBooks(t, s, "ATK2-")
	c := b.charge("collect", 2500)
	b.failed(t, c)
	b.post(c, 1, 2500, true)
	consumer, err := idempotency.NewGuard(s, idempotency.Options{Lease: time.Minute, Retention: 30 * 24 * time.Hour, Clock: b.clock, SkewMargin: -1})
	if err != nil {
		t.Fatal(err)
	}
	var got idempotency.Outcome
	s.onReopen = func() {
		cl, err := consumer.Claim(context.Background(), c.ID, c.Fingerprint(b.fp))
		if err == nil {
			got = cl.Outcome
		}
	}
	res, err := attackResolve(t, b, period, c.ID)
	if got.Owned() {
		t.Fatalf("while resolve collected %s's posting (%s, %v), a redelivery claimed the record (%s): the consumer debits the customer a second time", c.ID, res.Action, err, got)
	}
}

// A record FAILED at generation 2 (generation 1 declined, reopened into
// a new generation, which failed too). The bank posted generation 1 anyway
// and posted-then-reversed generation 2. What stands is generation 1's
// posting, under a declined key: failed_but_posted, "have the bank refund
// the posting under the declined key". But the break's BankKeys hold the
// current key (its reversed pair), so Resolve's default "collects" it:
// the record is reopened and adopted DONE with the REVERSED generation-2
// posting's reference. Once the bank refunds generation 1 as advised, the
// charge is DONE (never debited again) with no money collected.
func TestAttack2CollectAdoptsReversedCurrentGeneration(t *testing.T) {
	b := newBooks(t, memstore.New(), "ATK2-")
	c := b.charge("gen2", 2500)
	b.declinedTwice(t, c)
	if rec, _ := b.store.Get(t.Context(), c.ID, b.clock.Now()); rec.Generation != 2 {
		t.Fatalf("generation %d", rec.Generation)
	}
	b.post(c, 1, 2500, true)
	g2 := b.post(c, 2, 2500, true)
	b.reverse(g2)
	b.wantBreak(t, c, reconcile.FailedButPosted)
	// Fixed: what stands (generation 1's posting) is what is collected —
	// the default for a FAILED record the bank posted (the money kept; see
	// TestAttackResolvedFailedButPostedStaysReopenable, its declined
	// generation's row), and what the break
	// now advises — never generation 2's reversed posting.
	res, err := attackResolve(t, b, period, c.ID)
	rec, _ := b.store.Get(t.Context(), c.ID, b.clock.Now())
	if ref := charge.ReferenceOf(rec.Status, rec.Detail); err != nil || res.Action != "adopted" || rec.State != driver.StateDone || ref == g2.Reference || ref != "REF-"+c.ID {
		t.Fatalf("the declined generation 1 stands and generation 2 was reversed; resolve %s (%v): the record is %s %s reference %q (want generation 1's %q, never the reversed %q); history %q",
			res.Action, err, rec.State, rec.Status, ref, "REF-"+c.ID, g2.Reference, rec.History)
	}
}

// A bank's reference is text from outside, and banks put the account in it
// ("UPI/<account>/…", "NEFT-<account>-…"). Posted.Reference and the
// posted_not_recorded detail carry it as read; the text, CSV and JSON
// reports, and the adopted record (its reference, its notice, its history
// line) keep the customer's full account number. "Accounts are always
// masked" (reconciliation.md); charge.MaskText exists for such text.
func TestAttack2BankReferenceCarriesTheFullAccount(t *testing.T) {
	b, c := oneCharge(t, "ATK2-", "refacct", (*books).crashed)
	p := b.post(c, 1, 2500, true)
	p.Reference = "UPI/" + c.AccountID + "/771"
	b.postings[len(b.postings)-1] = p
	rep := b.run(t)
	text, csv, js := written(t, rep)
	for what, out := range map[string]string{"text": text, "csv": csv, "json": js} {
		if strings.Contains(out, c.AccountID) {
			t.Errorf("the %s report holds the full account %s (from the bank's reference)", what, c.AccountID)
		}
	}
	if _, err := attackResolve(t, b, period, c.ID); err != nil {
		t.Fatal(err)
	}
	rec, _ := b.store.Get(t.Context(), c.ID, b.clock.Now())
	if strings.Contains(rec.Detail, c.AccountID) || strings.Contains(strings.Join(rec.History, "\n"), c.AccountID) {
		t.Errorf("the adopted record keeps the full account %s: detail %q, history %q", c.AccountID, rec.Detail, rec.History)
	}
}

// The break id (what a proposal freezes, and ResolveRequest.BreakID
// checks) leaves out the posting's account. An unverified adoption (no
// narrative: the operator and the approver checked the account by hand)
// proposed over a posting from the charge's account is run, after the
// statement changed, over a posting from ANOTHER account with the same
// key, amount, day and reference: the same id, so it adopts — the charge
// is recorded collected from a customer who was never debited.
//
// A record written with its summary compares the account's last four on
// every posting (the break is then amount_mismatch): the attack stands for
// a record written before summaries.
func TestAttack2BreakIDIgnoresTheAccount(t *testing.T) {
	b := newBooks(t, memstore.New(), "ATK2-")
	b.noSummary = true
	c := b.charge("acctswap", 2500)
	b.crashed(t, c)
	b.post(c, 1, 2500, false)
	rep := b.run(t)
	br := findBreak(rep, c.ID)
	if br == nil || br.Kind != reconcile.PostedNotRecorded || !br.Unverified {
		t.Fatalf("want an unverified posted_not_recorded, got %+v", br)
	}
	frozen := br.ID
	b.postings[len(b.postings)-1].Account = "009999999999" // another customer's debit
	res, err := reconcile.Resolve(t.Context(), reconcile.Options{Store: b.store, Fingerprints: b.fp, Period: period, Now: b.clock.Now()}, b.postings_(),
		reconcile.ResolveRequest{ChargeID: c.ID, Kind: reconcile.PostedNotRecorded, Reason: "approved", Operator: "run", Guard: b.guard,
			BreakID: frozen, Unverified: true})
	if err == nil || res.Action == "adopted" {
		t.Fatalf("the break frozen was a posting from %s; the posting now is from ********9999; same break id %s → %s (%v)",
			charge.MaskAccount(c.AccountID), frozen, res.Action, err)
	}
}

// Reversals across two statements. Day 1: the charge posted twice —
// posted_twice, "have the bank refund every posting but one". Day 2: the
// bank's refund of the duplicate, a reversal. Day 2's report says
// recorded_not_posted, "the bank reversed its posting: the money is back
// with the customer … the billing system raises it again under a new
// charge id" — but one debit still stands (day 1's): following the advice
// charges the customer twice.
func TestAttack2RefundOfADuplicateReportedAsMoneyBack(t *testing.T) {
	b, c := oneCharge(t, "ATK2-", "dupfix", (*books).done)
	b.post(c, 1, 2500, true)
	dup := b.post(c, 1, 2500, true)
	day1 := b.run(t)
	if br := findBreak(day1, c.ID); br == nil || br.Kind != reconcile.PostedTwice {
		t.Fatalf("day 1: want posted_twice, got %+v", br)
	}
	// Day 2's statement: the duplicate's reversal only.
	rev := dup
	rev.Reversal, rev.BookingDate = true, day.AddDate(0, 0, 1)
	rep := b.runNextDay(t, rev)
	if br := findBreak(rep, c.ID); br != nil && br.Kind == reconcile.RecordedNotPosted {
		t.Fatalf("day 2: the duplicate refunded as advised is reported %s: %q / do: %q (one debit of 25.00 still stands, day 1's)", br.Kind, br.Detail, br.Action)
	}
}

// The bank corrects a posting: day 1 posts it, day 2 reverses it and posts
// it again (the same amount, a new reference). The customer paid once, the
// right amount. Day 2's report pairs the reversal with the NEW posting
// (the same amount; the reversal's reference is no posting's of this
// statement) and says recorded_not_posted, "the money is back with the
// customer … raise it again under a new charge id": a second charge.
func TestAttack2CorrectionAcrossStatementsReportedAsMoneyBack(t *testing.T) {
	b, c := oneCharge(t, "ATK2-", "corrected", (*books).done)
	first := b.post(c, 1, 2500, true)
	rev := first
	rev.Reversal, rev.BookingDate = true, day.AddDate(0, 0, 1)
	again := first
	again.Reference, again.BookingDate = "REF-CORRECTED", day.AddDate(0, 0, 1)
	rep := b.runNextDay(t, rev, again)
	if br := findBreak(rep, c.ID); br != nil && (br.Kind == reconcile.AmountMismatch || br.Kind == reconcile.RecordedNotPosted) {
		t.Fatalf("day 2: a reversal of day 1's 25.00 and a new posting of 25.00 (REF-CORRECTED, standing) reported %s: %q / do: %q", br.Kind, br.Detail, br.Action)
	}
}

// declinedAndWaiting is what the retry schedule (--retry-declines
// INSUFFICIENT_FUNDS=24h×3) leaves after generation 1's decline: the
// record WAITING under generation 2 until the next attempt.
func (b *books) declinedAndWaiting(t *testing.T, c charge.Charge, until time.Time) {
	t.Helper()
	res, err := b.guard.Do(t.Context(), c.ID, c.Fingerprint(b.fp), func(context.Context, idempotency.Run) (idempotency.Done, error) {
		return idempotency.Done{}, &idempotency.Wait{Until: until, Status: string(charge.RetryScheduled), NextGeneration: true,
			Detail: "next attempt (attempt 2 of 4, after INSUFFICIENT_FUNDS)"}
	}, idempotency.DoOptions{})
	if err != nil || res.Outcome != idempotency.Waiting {
		t.Fatalf("decline of generation 1: %v %v", res.Outcome, err)
	}
	if rec, _ := b.store.Get(t.Context(), c.ID, b.clock.Now()); rec.State != driver.StateWaiting || rec.Generation != 2 {
		t.Fatalf("record %s generation %d, want WAITING generation 2", rec.State, rec.Generation)
	}
}

// waiting is a charge of 25.00 declined under generation 1 and WAITING
// under generation 2 for its next attempt, a day later.
func (b *books) waiting(t *testing.T, name string) charge.Charge {
	t.Helper()
	c := b.charge(name, 2500)
	b.declinedAndWaiting(t, c, b.clock.Now().Add(24*time.Hour))
	return c
}

// The bank declined generation 1 (INSUFFICIENT_FUNDS) and the schedule
// put the charge WAITING for its next attempt under generation 2; then
// the bank's statement shows generation 1 posted after all (the break
// failed_but_posted exists for exactly this: "the bank posted generation
// 1, which it had declined"). With a retry schedule a declined generation
// is no longer an operator's rare reopen but every insufficient-funds
// charge, and the record WAITS while the statement comes in. Resolve's
// default (the money kept: collect it) must record the charge collected,
// as it does for a FAILED record; it only MARKED the break, the record
// stayed WAITING, and at its next attempt the schedule debited the
// customer a second time, under generation 2.
func TestAttackWaitingChargeWhoseDeclinedGenerationPostedIsDebitedAgain(t *testing.T) {
	for name, open := range backends {
		t.Run(name, func(t *testing.T) {
			b := newBooks(t, open(t), "ATKW-")
			c := b.charge("waitgen1", 2500)
			next := b.clock.Now().Add(24 * time.Hour)
			b.declinedAndWaiting(t, c, next)
			b.post(c, 1, 2500, true) // the bank posted the declined generation 1

			rep := b.run(t)
			br := findBreak(rep, c.ID)
			if br == nil || br.Kind != reconcile.FailedButPosted || br.State != string(driver.StateWaiting) {
				t.Fatalf("want failed_but_posted on the WAITING record, got %+v", br)
			}
			if !strings.Contains(br.Action, "WAITING") {
				t.Errorf("the break's action does not say what to do with a waiting charge (its next attempt debits again): %q", br.Action)
			}
			res, err := attackResolve(t, b, period, c.ID)
			rec, _ := b.store.Get(t.Context(), c.ID, b.clock.Now())
			if err != nil || res.Action != "adopted" || rec.State != driver.StateDone {
				t.Errorf("resolve (the money kept, not --refunded): %s (%v); the record is %s %s generation %d: want it collected (DONE)",
					res.Action, err, rec.State, rec.Status, rec.Generation)
			}

			// The schedule's next attempt comes.
			b.clock.Advance(25 * time.Hour)
			debits := 0
			out, err := b.guard.Do(t.Context(), c.ID, c.Fingerprint(b.fp), func(_ context.Context, run idempotency.Run) (idempotency.Done, error) {
				debits++ // the debit under charge.BankKey(c.ID, run.Generation)
				return idempotency.Done{Status: string(charge.Debited), Detail: "REF-" + charge.BankKey(c.ID, run.Generation)}, nil
			}, idempotency.DoOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if debits != 0 {
				t.Fatalf("the bank posted generation 1 and the operator resolved the break keeping the money; the next attempt debited again (%s): two debits of one charge",
					out.Outcome)
			}
		})
	}
}

// With --refunded (the bank gave generation 1's money back) the break is
// marked and the schedule goes on: the next attempt is the one debit.
func TestWaitingChargeRefundedDeclinedGenerationKeepsItsSchedule(t *testing.T) {
	b := newBooks(t, memstore.New(), "ATKW-")
	c := b.waiting(t, "waitrefund")
	b.post(c, 1, 2500, true)
	res, err := reconcile.Resolve(t.Context(), reconcile.Options{Store: b.store, Fingerprints: b.fp, Period: period, Now: b.clock.Now()}, b.postings_(),
		reconcile.ResolveRequest{ChargeID: c.ID, Reason: "the bank refunded it", Operator: "op", Guard: b.guard, Refunded: true})
	if err != nil || res.Action != "marked" {
		t.Fatalf("resolve --refunded: %s %v", res.Action, err)
	}
	if rec, _ := b.store.Get(t.Context(), c.ID, b.clock.Now()); rec.State != driver.StateWaiting || rec.Generation != 2 {
		t.Fatalf("record %s generation %d, want WAITING generation 2 (its schedule kept)", rec.State, rec.Generation)
	}
}

// earlier is p as booked in an earlier statement: taken out of this one
// (its reversal may still be in it).
func (b *books) earlier(p statement.Posting) {
	for i := len(b.postings) - 1; i >= 0; i-- {
		if b.postings[i].Reference == p.Reference && !b.postings[i].Reversal {
			b.postings = append(b.postings[:i], b.postings[i+1:]...)
			return
		}
	}
}

// doneAtGeneration2 is a charge declined under generation 1, reopened into
// generation 2 by an operator, and debited under generation 2: DONE at 2.
func (b *books) doneAtGeneration2(t *testing.T, c charge.Charge) {
	t.Helper()
	b.atGeneration2(t, c, b.done, driver.StateDone)
}

// atGeneration2 is a charge declined under generation 1 (FAILED), reopened
// by an operator into generation 2, and finished there by second: want at
// generation 2.
func (b *books) atGeneration2(t *testing.T, c charge.Charge, second func(*testing.T, charge.Charge), want driver.State) {
	t.Helper()
	b.failed(t, c)
	if _, err := b.guard.Reopen(t.Context(), c.ID, "the customer paid in", idempotency.ReopenOptions{NewGeneration: true, Operator: "op"}); err != nil {
		t.Fatal(err)
	}
	second(t, c)
	if rec, _ := b.store.Get(t.Context(), c.ID, b.clock.Now()); rec.State != want || rec.Generation != 2 {
		t.Fatalf("record %s generation %d, want %s generation 2", rec.State, rec.Generation, want)
	}
}

// Attack 3a: a WAITING record is at the generation of its NEXT attempt
// (declinedAndWaiting: generation 2, key ~2 never presented). A posting
// under that key is a posting under the record's "own" key, so judge
// skips the new other-key rules (unknown_posting for a generation never
// presented) and falls to the final switch, whose default case is DONE:
// the charge is counted as matched, no break. The statement says money
// moved under a key the collector never sent, and the record is still
// WAITING to debit.
func TestAttack3WaitingRecordsUnpresentedKeyPostingCountsAsMatched(t *testing.T) {
	for name, open := range collectStores {
		t.Run(name, func(t *testing.T) {
			b := newBooks(t, open(t), "A3W-")
			c := b.waiting(t, "waiting")
			b.post(c, 2, c.Amount.Minor, true) // ~2: the key of the attempt not yet made
			rep := b.run(t)
			if findBreak(rep, c.ID) == nil {
				rec, _ := b.store.Get(t.Context(), c.ID, b.clock.Now())
				t.Fatalf("record %s generation %d (its next attempt not made), the bank posted %s: breaks %v, matched %d; "+
					"want a break (a key never presented, and the record not DONE), not a match",
					rec.State, rec.Generation, charge.BankKey(c.ID, 2), b.mine(rep), rep.Matched)
			}
		})
	}
}

// Attack 3b: a DONE record with exactly one posting standing under
// another key than its own, its own posting reversed (this statement, or
// a reversal of an earlier statement's posting). One debit stands for the
// charge, but judge only looks at the one standing posting: it is a
// posted_twice "the record's own stands" advising the refund of the only
// money the bank holds for the charge. Followed, the customer paid
// nothing and the record is DONE (never debited again).
func TestAttack3OwnPostingReversedOtherKeyStandsAdvisedRefunded(t *testing.T) {
	for name, open := range collectStores {
		for _, tc := range []struct {
			name string
			// setup returns the key of the posting left standing.
			setup func(t *testing.T, b *books, c charge.Charge) string
		}{
			{"collected ~1 reversed, ~2 posted", func(t *testing.T, b *books, c charge.Charge) string {
				b.declinedAndWaiting(t, c, b.clock.Now().Add(24*time.Hour))
				p1 := b.post(c, 1, c.Amount.Minor, true)
				if res, err := attackResolve(t, b, period, c.ID); err != nil || res.Action != "adopted" {
					t.Fatalf("collect ~1: %s %v", res.Action, err)
				}
				// The next statement: the bank reverses ~1 (it had
				// declined it) and generation 2's (zombie) debit posts.
				b.postings = nil
				b.reverse(p1)
				return b.post(c, 2, c.Amount.Minor, true).BankKey
			}},
			{"debited ~2 reversed (earlier statement), declined ~1 booked", func(t *testing.T, b *books, c charge.Charge) string {
				b.doneAtGeneration2(t, c)
				p2 := b.post(c, 2, c.Amount.Minor, true)
				b.earlier(p2) // booked in an earlier statement
				b.reverse(p2) // reversed in this one
				return b.post(c, 1, c.Amount.Minor, true).BankKey
			}},
			{"debited ~2 posted and reversed here, declined ~1 booked", func(t *testing.T, b *books, c charge.Charge) string {
				b.doneAtGeneration2(t, c)
				p2 := b.post(c, 2, c.Amount.Minor, true)
				b.reverse(p2)
				return b.post(c, 1, c.Amount.Minor, true).BankKey
			}},
		} {
			t.Run(name+"/"+tc.name, func(t *testing.T) {
				b := newBooks(t, open(t), "A3R-")
				c := b.charge("rev", 2500)
				standing := tc.setup(t, b, c)
				rep := b.run(t)
				br := findBreak(rep, c.ID)
				if br == nil {
					return // nothing advised: no refund of the one debit
				}
				if br.Kind == reconcile.PostedTwice || strings.Contains(br.Action, "refund the posting under "+standing) {
					t.Fatalf("the record's own posting is reversed, one posting (%s) stands: break %s %q, action %q; "+
						"want no advice to refund the only debit standing (the customer would have paid nothing)", standing, br.Kind, br.Detail, br.Action)
				}
			})
		}
	}
}

// Attack 3c: a posted_twice break of a record that is NOT DONE (WAITING
// after generation 1's decline, the bank booked ~1 twice; FAILED at 2
// after a declined reopen, the bank booked both ~1 and ~2). The action is
// "have the bank refund every posting but one" — so one stays, the charge
// is paid — but Resolve only MARKS a posted_twice break: the record stays
// WAITING (its next attempt debits ~2) or FAILED (reopenable for ~3), and
// the statement that showed the posting is never read again. The customer
// is debited again on top of the posting kept.
func TestAttack3PostedTwiceOfAnOpenRecordIsMarkedAndDebitedAgain(t *testing.T) {
	for name, open := range collectStores {
		t.Run(name+"/WAITING, ~1 booked twice", func(t *testing.T) {
			b := newBooks(t, open(t), "A3T-")
			bank := corebanksim.NewLedger(corebanksim.Faults{})
			c := b.waiting(t, "twice")
			bankPosted(t, b, bank, c, 1)
			b.post(c, 1, c.Amount.Minor, true) // booked a second time (the statement's)
			rep := b.run(t)
			br := findBreak(rep, c.ID)
			if br == nil || br.Kind != reconcile.PostedTwice {
				t.Fatalf("want posted_twice, got %v", b.mine(rep))
			}
			res, err := attackResolve(t, b, period, c.ID)
			rec, _ := b.store.Get(t.Context(), c.ID, b.clock.Now())
			t.Logf("resolve: %q %v; record %s generation %d", res.Action, err, rec.State, rec.Generation)
			b.clock.Advance(25 * time.Hour)
			out := deliver(t, b, bank, c)
			if out != idempotency.DuplicateDone {
				n, keys := postingsOf(bank, c)
				t.Fatalf("posted_twice resolved (%q %v) over a WAITING record: the next attempt %s, the ledger has %d postings (%v) plus the statement's second ~1; "+
					"the bank refunds one as advised and the customer still paid twice", res.Action, err, out, n, keys)
			}
		})
		t.Run(name+"/FAILED at 2, ~1 and ~2 both booked", func(t *testing.T) {
			b := newBooks(t, open(t), "A3T-")
			c := b.charge("both", 2500)
			b.declinedAgainAtGeneration2(t, c)
			b.post(c, 1, c.Amount.Minor, true)
			b.post(c, 2, c.Amount.Minor, true)
			b.wantBreak(t, c, reconcile.PostedTwice)
			res, err := attackResolve(t, b, period, c.ID)
			if err == nil {
				_, rerr := b.guard.Reopen(t.Context(), c.ID, "customer paid in", idempotency.ReopenOptions{NewGeneration: true, Operator: "op", Eligible: charge.EligibleForNewGeneration})
				rec, _ := b.store.Get(t.Context(), c.ID, b.clock.Now())
				if rec.State != driver.StateDone {
					t.Fatalf("posted_twice of a FAILED record resolved (%q): the record is %s generation %d (reopen: %v) — the posting kept is recorded nowhere, "+
						"and the charge is open to a third debit under %s", res.Action, rec.State, rec.Generation, rerr, charge.BankKey(c.ID, rec.Generation))
				}
			}
		})
	}
}

// Attack 3d: a DONE record (debited under ~2) and the bank books the
// declined ~1 late, of ANOTHER amount. verify runs before the DONE check,
// so this second debit is an amount_mismatch whose action is to have the
// bank "refund and post again, or adjust": the bank posts the charge
// again (or adjusts it to the charge's amount) and the customer pays the
// charge twice. A second debit of a DONE charge is to be refunded whole.
func TestAttack3SecondDebitOfAnotherAmountAdvisedPostedAgain(t *testing.T) {
	for name, open := range collectStores {
		t.Run(name, func(t *testing.T) {
			b := newBooks(t, open(t), "A3A-")
			c := b.charge("amt", 2500)
			b.doneAtGeneration2(t, c)
			p2 := b.post(c, 2, c.Amount.Minor, true)
			b.earlier(p2)
			b.post(c, 1, 999900, true)
			rep := b.run(t)
			br := findBreak(rep, c.ID)
			if br == nil {
				t.Fatalf("no break: %v", b.mine(rep))
			}
			if strings.Contains(br.Action, "post again") || strings.Contains(br.Action, "adjust") {
				t.Fatalf("DONE under ~2, the bank also booked ~1 (9999.00): break %s %q, action %q; want it refunded whole (a second debit), not posted again or adjusted",
					br.Kind, br.Detail, br.Action)
			}
		})
	}
}

// Attack 3e: a collection records the bank's reference MASKED (the
// account in "UPI/<account>/…" is starred), and the record's reference is
// what a later reversal is matched against (reversesRecorded). The bank
// reverses the very posting collected, in the next statement, under its
// real reference: it does not equal the masked one, so the run files it
// as "a refunded duplicate; nothing to do" (a note) — no break. The
// customer has the money back and the record is DONE, never collected.
func TestAttack3ReversalOfACollectedPostingWithAccountInReferenceIsANote(t *testing.T) {
	for name, open := range collectStores {
		t.Run(name, func(t *testing.T) {
			b := newBooks(t, open(t), "A3M-")
			c := b.waiting(t, "masked")
			p1 := b.post(c, 1, c.Amount.Minor, true)
			p1.Reference = "UPI/" + c.AccountID + "/771"
			b.postings[len(b.postings)-1] = p1
			if res, err := attackResolve(t, b, period, c.ID); err != nil || res.Action != "adopted" {
				t.Fatalf("collect ~1: %s %v", res.Action, err)
			}
			b.postings = nil
			b.reverse(p1) // the next statement: the collected posting reversed
			rep := b.run(t)
			if br := findBreak(rep, c.ID); br == nil {
				t.Fatalf("the one posting collected is reversed: no break (notes %q); want recorded_not_posted (the money is back with the customer)", rep.Notes)
			}
		})
	}
}

// Attack 3h (issue 52's known defects, fixed): an operator's reopen
// --new-attempt leaves the record claimable at generation 2 before any
// delivery presents ~2 (the history's last line is the reopen's, the lease
// never taken since). A posting under ~2 then is under a key the collector
// never sent: unknown_posting, and resolve does not adopt it (it was
// posted_not_recorded and adopted: the charge closed DONE on a debit
// nobody of ours made). Once a delivery has claimed ~2 (and died after
// its debit), the same posting is the record's own: posted_not_recorded,
// adopted.
func TestAttack3ReopenedGenerationPostedBeforeItIsPresented(t *testing.T) {
	for name, open := range collectStores {
		for _, tc := range []struct {
			name      string
			presented bool
			want      reconcile.Kind
			action    string
			state     driver.State
		}{
			{"never presented", false, reconcile.UnknownPosting, "marked", driver.StateInProgress},
			{"presented by a delivery that died after its debit", true, reconcile.PostedNotRecorded, "adopted", driver.StateDone},
		} {
			t.Run(name+"/"+tc.name, func(t *testing.T) {
				b := newBooks(t, open(t), "A3H-")
				c := b.charge("reopened", 2500)
				b.failed(t, c)
				if _, err := b.guard.Reopen(t.Context(), c.ID, "the customer paid in", idempotency.ReopenOptions{NewGeneration: true, Operator: "op"}); err != nil {
					t.Fatal(err)
				}
				if tc.presented {
					if cl, err := b.guard.Claim(t.Context(), c.ID, c.Fingerprint(b.fp)); err != nil || !cl.Outcome.Owned() || cl.Record.Generation != 2 {
						t.Fatalf("claim after the reopen: %v %v generation %d", cl.Outcome, err, cl.Record.Generation)
					}
					b.clock.Advance(2 * time.Minute) // the delivery died; its lease passed
				}
				b.post(c, 2, c.Amount.Minor, true)
				rep := b.run(t)
				br := findBreak(rep, c.ID)
				if br == nil || br.Kind != tc.want {
					t.Fatalf("breaks %v, want %s", b.mine(rep), tc.want)
				}
				res, err := attackResolve(t, b, period, c.ID)
				if err != nil || res.Action != tc.action {
					t.Fatalf("resolve: %q %v, want %q", res.Action, err, tc.action)
				}
				after, _ := b.store.Get(t.Context(), c.ID, b.clock.Now())
				if after.State != tc.state || after.Generation != 2 {
					t.Fatalf("record %s generation %d after resolve, want %s generation 2", after.State, after.Generation, tc.state)
				}
			})
		}
	}
}

// Attack 3g (issue 52's known defects, fixed): the declined generation ~1
// of a WAITING charge booked late of another amount is an amount_mismatch
// (attack 50), whose action is to have the bank correct it — the bank
// adjusts it to the charge's amount, the money stays under ~1. Resolve
// refused it and the record stayed WAITING: its next attempt debited ~2,
// the customer paying the charge twice. Now resolve records the ~1
// posting as collected (DONE at generation 1: the schedule ends, its next
// delivery is a duplicate and debits nothing), and the amount is not taken
// for the charge's: the next run still reports amount_mismatch on the DONE
// record until the bank's correction matches the charge; once it does
// (the statement's posting of 25.00), it matches.
func TestAttack3AmountMismatchOfAWaitingChargeIsCollectedAndStaysABreak(t *testing.T) {
	for name, open := range collectStores {
		t.Run(name, func(t *testing.T) {
			b := newBooks(t, open(t), "A3G-")
			bank := corebanksim.NewLedger(corebanksim.Faults{})
			c := b.waiting(t, "adjust")
			b.post(c, 1, 999900, true)
			rep := b.run(t)
			br := findBreak(rep, c.ID)
			if br == nil || br.Kind != reconcile.AmountMismatch || !br.Collects(false) || br.Collects(true) {
				t.Fatalf("want amount_mismatch that resolve collects (and --refunded marks), got %v", b.mine(rep))
			}
			if !strings.Contains(br.Action, "WAITING") || !strings.Contains(br.Action, "debits the customer again") {
				t.Fatalf("action %q: want it to say the schedule debits again unless resolved", br.Action)
			}
			res, err := attackResolve(t, b, period, c.ID)
			if err != nil || res.Action != "adopted" || res.Record == nil || res.Record.State != driver.StateDone || res.Record.Generation != 1 {
				t.Fatalf("resolve: %q %v %+v; want the ~1 posting collected (DONE at generation 1)", res.Action, err, res.Record)
			}
			if strings.Contains(res.Record.Detail, "999900") || !strings.Contains(res.Record.History[len(res.Record.History)-1], "no notice built") {
				t.Fatalf("collected with detail %q, history %q: want no notice built from the posting of another amount", res.Record.Detail, res.Record.History[len(res.Record.History)-1])
			}
			b.clock.Advance(25 * time.Hour)
			if out := deliver(t, b, bank, c); out != idempotency.DuplicateDone {
				n, keys := postingsOf(bank, c)
				t.Fatalf("the next delivery %s, debiting %v (%d): want a duplicate of the DONE record, no debit", out, keys, n)
			}
			if n, _ := postingsOf(bank, c); n != 0 {
				t.Fatalf("the bank was debited %d time(s) after the collection", n)
			}
			// The same statement: the wrong amount is still a break.
			again := b.run(t)
			if br := findBreak(again, c.ID); br == nil || br.Kind != reconcile.AmountMismatch || br.State != string(driver.StateDone) {
				t.Fatalf("after the collection, the posting of 9999.00 stands: breaks %v, want amount_mismatch on the DONE record", b.mine(again))
			}
			// The bank's correction: the posting now of the charge's amount.
			b.postings[len(b.postings)-1].Amount.Minor = c.Amount.Minor
			if fixed := b.run(t); findBreak(fixed, c.ID) != nil {
				t.Fatalf("the posting corrected to 25.00: breaks %v, want it matched", b.mine(fixed))
			}
		})
	}
}

// Attack 52: statements written by hand from the ISO 20022 element names
// (camt.053 / camt.054), in the shapes banks send, NOT with
// statement.WriteCamt053, fed to the reconciliation against records made
// through the Guard (memstore). Each test asserts what a payments engineer
// expects of the matching.

// x52tx is one TxDtls.
type x52tx struct {
	e2e, ref   string // Refs/EndToEndId, Refs/AcctSvcrRef ("" = absent)
	amt        string // TxDtls/Amt ("" = absent)
	txAmt      string // AmtDtls/TxAmt/Amt ("" = absent)
	instd      string // AmtDtls/InstdAmt/Amt ("" = absent)
	instdCcy   string
	dbtr       string // RltdPties/DbtrAcct/Id/Othr/Id
	ustrd      string // RmtInf/Ustrd ("" = no RmtInf)
	rtr        string // RtrInf/Rsn/Cd ("" = no RtrInf)
	addtlTxInf string
}

// x52ntry is one Ntry.
type x52ntry struct {
	amt, ind, sts string // Ntry/Amt, CdtDbtInd, Sts/Cd
	rvsl          bool
	bookg, val    string
	ref           string // Ntry/AcctSvcrRef
	bktx          string // "PMNT/IDDT/UPDD"
	btch          bool   // NtryDtls/Btch with NbOfTxs and TtlAmt
	addtl         string // AddtlNtryInf
	txs           []x52tx
}

type x52stmt struct {
	acct     string
	from, to string // FrDtTm / ToDtTm
	entries  []x52ntry
}

func x52esc(s string) string {
	r := strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;")
	return r.Replace(s)
}

// x52doc writes a camt.05N.001.VV Document (msg "053" or "054").
func x52doc(msg, ver string, stmts ...x52stmt) string {
	var b strings.Builder
	body, st := "BkToCstmrStmt", "Stmt"
	if msg == "054" {
		body, st = "BkToCstmrDbtCdtNtfctn", "Ntfctn"
	}
	fmt.Fprintf(&b, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Document xmlns=\"urn:iso:std:iso:20022:tech:xsd:camt.%s.001.%s\">\n<%s>\n", msg, ver, body)
	fmt.Fprintf(&b, "<GrpHdr><MsgId>A52-%s</MsgId><CreDtTm>2026-12-02T01:00:00Z</CreDtTm></GrpHdr>\n", msg)
	for i, s := range stmts {
		fmt.Fprintf(&b, "<%s><Id>A52-%s-%d</Id><CreDtTm>2026-12-02T01:00:00Z</CreDtTm>\n", st, msg, i+1)
		from, to := s.from, s.to
		if from == "" {
			from, to = "2026-12-01T00:00:00Z", "2026-12-01T23:59:59Z"
		}
		fmt.Fprintf(&b, "<FrToDt><FrDtTm>%s</FrDtTm><ToDtTm>%s</ToDtTm></FrToDt>\n", from, to)
		fmt.Fprintf(&b, "<Acct><Id><Othr><Id>%s</Id></Othr></Id><Ccy>INR</Ccy></Acct>\n", s.acct)
		for n, e := range s.entries {
			fmt.Fprintf(&b, "<Ntry><NtryRef>%d</NtryRef><Amt Ccy=\"INR\">%s</Amt><CdtDbtInd>%s</CdtDbtInd>", n+1, e.amt, e.ind)
			if e.rvsl {
				b.WriteString("<RvslInd>true</RvslInd>")
			}
			sts := e.sts
			if sts == "" {
				sts = "BOOK"
			}
			if ver >= "08" {
				fmt.Fprintf(&b, "<Sts><Cd>%s</Cd></Sts>", sts)
			} else {
				fmt.Fprintf(&b, "<Sts>%s</Sts>", sts)
			}
			bookg := e.bookg
			if bookg == "" {
				bookg = "2026-12-01"
			}
			fmt.Fprintf(&b, "<BookgDt><Dt>%s</Dt></BookgDt>", bookg)
			val := e.val
			if val == "" {
				val = bookg
			}
			fmt.Fprintf(&b, "<ValDt><Dt>%s</Dt></ValDt>", val)
			if e.ref != "" {
				fmt.Fprintf(&b, "<AcctSvcrRef>%s</AcctSvcrRef>", e.ref)
			}
			if e.bktx != "" {
				p := strings.Split(e.bktx, "/")
				fmt.Fprintf(&b, "<BkTxCd><Domn><Cd>%s</Cd><Fmly><Cd>%s</Cd><SubFmlyCd>%s</SubFmlyCd></Fmly></Domn></BkTxCd>", p[0], p[1], p[2])
			}
			b.WriteString("\n<NtryDtls>")
			if e.btch {
				fmt.Fprintf(&b, "<Btch><NbOfTxs>%d</NbOfTxs><TtlAmt Ccy=\"INR\">%s</TtlAmt><CdtDbtInd>%s</CdtDbtInd></Btch>", len(e.txs), e.amt, e.ind)
			}
			for _, t := range e.txs {
				b.WriteString("\n<TxDtls><Refs>")
				if t.ref != "" {
					fmt.Fprintf(&b, "<AcctSvcrRef>%s</AcctSvcrRef>", t.ref)
				}
				fmt.Fprintf(&b, "<EndToEndId>%s</EndToEndId></Refs>", t.e2e)
				if t.amt != "" {
					fmt.Fprintf(&b, "<Amt Ccy=\"INR\">%s</Amt>", t.amt)
				}
				if t.txAmt != "" || t.instd != "" {
					b.WriteString("<AmtDtls>")
					if t.instd != "" {
						fmt.Fprintf(&b, "<InstdAmt><Amt Ccy=\"%s\">%s</Amt></InstdAmt>", t.instdCcy, t.instd)
					}
					if t.txAmt != "" {
						fmt.Fprintf(&b, "<TxAmt><Amt Ccy=\"INR\">%s</Amt></TxAmt>", t.txAmt)
					}
					b.WriteString("</AmtDtls>")
				}
				if t.dbtr != "" {
					fmt.Fprintf(&b, "<RltdPties><DbtrAcct><Id><Othr><Id>%s</Id></Othr></Id></DbtrAcct></RltdPties>", t.dbtr)
				}
				if t.ustrd != "" {
					fmt.Fprintf(&b, "<RmtInf><Ustrd>%s</Ustrd></RmtInf>", x52esc(t.ustrd))
				}
				if t.rtr != "" {
					fmt.Fprintf(&b, "<RtrInf><Rsn><Cd>%s</Cd></Rsn></RtrInf>", t.rtr)
				}
				if t.addtlTxInf != "" {
					fmt.Fprintf(&b, "<AddtlTxInf>%s</AddtlTxInf>", x52esc(t.addtlTxInf))
				}
				b.WriteString("</TxDtls>")
			}
			b.WriteString("</NtryDtls>")
			if e.addtl != "" {
				fmt.Fprintf(&b, "<AddtlNtryInf>%s</AddtlNtryInf>", x52esc(e.addtl))
			}
			b.WriteString("</Ntry>\n")
		}
		fmt.Fprintf(&b, "</%s>\n", st)
	}
	fmt.Fprintf(&b, "</%s>\n</Document>\n", body)
	return b.String()
}

const x52fees = "FEES-001"

// x52run writes the documents to files and reconciles them (read from the
// collection account's side when coll is set) against b's records.
func x52run(t *testing.T, b *books, coll string, docs ...string) reconcile.Report {
	t.Helper()
	var files []string
	for i, d := range docs {
		f := filepath.Join(t.TempDir(), fmt.Sprintf("stmt%d.xml", i))
		if err := os.WriteFile(f, []byte(d), 0o600); err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	rep, err := reconcile.Run(t.Context(), reconcile.Options{Store: b.store, Fingerprints: b.fp, Now: b.clock.Now()},
		reconcile.ReadFiles(files, statement.Options{CollectionAccount: coll}))
	if err != nil {
		t.Fatalf("Run: %v\n%s", err, docs[0])
	}
	return rep
}

func x52breaks(b *books, rep reconcile.Report) string {
	return strings.Join(b.mine(rep), "; ")
}

func x52want(t *testing.T, b *books, rep reconcile.Report, what string, want ...string) {
	t.Helper()
	slices.Sort(want)
	if got := x52breaks(b, rep); got != strings.Join(want, "; ") {
		t.Fatalf("%s:\n  breaks  %q\n  want    %q\n  postings %d (reversals %d), matched %d (unverified %d); notes %q",
			what, got, strings.Join(want, "; "), rep.Postings, rep.Reversals, rep.Matched, rep.Unverified, rep.Notes)
	}
}

// x52wantMatched is x52want with want matched charges on top.
func x52wantMatched(t *testing.T, b *books, rep reconcile.Report, what string, matched int, want ...string) {
	t.Helper()
	x52want(t, b, rep, what, want...)
	if rep.Matched != matched {
		t.Fatalf("%s: matched %d, want %d", what, rep.Matched, matched)
	}
}

// x52batch is the collection account's credit of txs as a batch: one entry
// (Btch) under ref, the transactions without references of their own.
func x52batch(amt, ref string, txs ...x52tx) x52ntry {
	return x52ntry{amt: amt, ind: "CRDT", ref: ref, bktx: "PMNT/IDDT/ESDD", btch: true, txs: txs}
}

// x52in is c's 25.00 in a batch, its remittance information ustrd.
func x52in(c charge.Charge, ustrd string) x52tx {
	return x52tx{e2e: c.ID, amt: "25.00", dbtr: c.AccountID, ustrd: ustrd}
}

// x52credit is the collection account's credit of c (one transaction).
func x52credit(c charge.Charge, amt, ref string) x52ntry {
	return x52ntry{amt: amt, ind: "CRDT", ref: ref, bktx: "PMNT/IDDT/ESDD",
		txs: []x52tx{{e2e: c.ID, amt: amt, dbtr: c.AccountID, ustrd: c.DebitRequestFor(1).Narrative}}}
}

// x52two is x52books of two charges, each DONE.
func x52two(t *testing.T, prefix string) (b *books, c, d charge.Charge) {
	b, cs := x52books(t, prefix, 2)
	return b, cs[0], cs[1]
}

func x52books(t *testing.T, prefix string, n int) (*books, []charge.Charge) {
	b := newBooks(t, memstore.New(), prefix)
	var cs []charge.Charge
	for i := range n {
		c := b.charge(fmt.Sprint(i+1), 2500)
		b.done(t, c)
		cs = append(cs, c)
	}
	return b, cs
}

// 1. A partial reversal under a reference of its own (banks give a
// reversal its own AcctSvcrRef): the collection account is credited 25.00,
// then debited 10.00 with RvslInd true under the same EndToEndId. The doc:
// "A reversal of another amount than the posting's is a partial reversal
// (amount_mismatch)". The same with a return of another amount (RtrInf,
// the return fee booked in the transaction amount: InstdAmt 25.00, TxAmt
// 30.00).
func TestAttack52PartialReversalWithItsOwnReference(t *testing.T) {
	for _, tc := range []struct {
		name string
		rv   func(c charge.Charge) x52ntry
		want string
	}{
		{"reversal RvslInd 10.00 of 25.00", func(c charge.Charge) x52ntry {
			return x52ntry{amt: "10.00", ind: "DBIT", rvsl: true, ref: "RVSL-000001", bktx: "PMNT/IDDT/PRDD",
				txs: []x52tx{{e2e: c.ID, ref: "RVSL-000001", amt: "10.00", dbtr: c.AccountID}}}
		}, "amount_mismatch 1"},
		{"return AM04 with its fee in TxAmt (InstdAmt 25.00, TxAmt 30.00)", func(c charge.Charge) x52ntry {
			return x52ntry{amt: "30.00", ind: "DBIT", ref: "RTN-000001", bktx: "PMNT/IDDT/UPDD",
				txs: []x52tx{{e2e: c.ID, ref: "RTN-000001", instd: "25.00", instdCcy: "INR", txAmt: "30.00", dbtr: c.AccountID, rtr: "AM04"}}}
		}, "*"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, cs := x52books(t, "A52P-", 1)
			c := cs[0]
			doc := x52doc("053", "08", x52stmt{acct: x52fees, entries: []x52ntry{
				x52credit(c, "25.00", "REF-"+c.ID),
				tc.rv(c),
			}})
			rep := x52run(t, b, x52fees, doc)
			if tc.want == "*" {
				if findBreak(rep, c.ID) == nil {
					t.Fatalf("the debit was returned (30.00 out of the collection account under its key, own reference): breaks %q, matched %d, reversals %d, notes %q; want a break (recorded_not_posted, returned), not a match",
						x52breaks(b, rep), rep.Matched, rep.Reversals, rep.Notes)
				}
				return
			}
			x52want(t, b, rep, "25.00 credited, 10.00 reversed under its own reference", tc.want)
		})
	}
}

// 3. A batch (Btch, NbOfTxs 2, one Ntry/AcctSvcrRef) credits the same
// EndToEndId twice: the customer was debited twice. The TxDtls carry no
// Refs/AcctSvcrRef of their own (optional in the standard, often absent),
// so both take the entry's; the de-duplication ("the same reference, day
// and amount: read twice") drops the second. Want posted_twice.
func TestAttack52BatchWithTheSameKeyTwiceIsDeduplicated(t *testing.T) {
	b, c, d := x52two(t, "A52B-")
	n := c.DebitRequestFor(1).Narrative
	doc := x52doc("054", "02", x52stmt{acct: x52fees, entries: []x52ntry{
		x52batch("75.00", "BATCH-0001",
			x52tx{e2e: c.ID, txAmt: "25.00", dbtr: c.AccountID, ustrd: n},
			x52tx{e2e: d.ID, txAmt: "25.00", dbtr: d.AccountID, ustrd: n},
			x52tx{e2e: c.ID, txAmt: "25.00", dbtr: c.AccountID, ustrd: n},
		),
	}})
	rep := x52run(t, b, x52fees, doc)
	x52want(t, b, rep, "one batch of 75.00: 1, 2 and 1 again (three transactions, NbOfTxs 3, summing to the entry)", "posted_twice 1")
}

// 3b. The same double posting in two entries of one statement, the bank's
// AcctSvcrRef being per instruction (the same on both entries). Two Ntry of
// one Stmt are two bookings, whatever their reference.
func TestAttack52TwoEntriesOfOneStatementWithOneReference(t *testing.T) {
	b, cs := x52books(t, "A52D-", 1)
	c := cs[0]
	doc := x52doc("053", "08", x52stmt{acct: x52fees, entries: []x52ntry{
		x52credit(c, "25.00", "INSTR-4711"),
		x52credit(c, "25.00", "INSTR-4711"),
	}})
	rep := x52run(t, b, x52fees, doc)
	x52want(t, b, rep, "two booked entries of one statement, one AcctSvcrRef", "posted_twice 1")
}

// 4b. The plain overlap: the camt.054 repeats the camt.053's entries with
// the same references. Counted once (sanity).
func TestAttack52Camt054RepeatingCamt053CountsOnce(t *testing.T) {
	b, c, d := x52two(t, "A52O-")
	entries := []x52ntry{x52credit(c, "25.00", "REF-"+c.ID), x52credit(d, "25.00", "REF-"+d.ID)}
	rep := x52run(t, b, x52fees,
		x52doc("053", "08", x52stmt{acct: x52fees, entries: entries}),
		x52doc("054", "08", x52stmt{acct: x52fees, entries: entries}))
	x52wantMatched(t, b, rep, "camt.054 repeating the camt.053", 2)
}

// 5. Pending entries are not postings: 1 booked, 2 pending (PDNG), and a
// PDNG reversal of 1 that must not cancel it (sanity).
func TestAttack52PendingIsNotPosted(t *testing.T) {
	b, c, d := x52two(t, "A52S-")
	pd := x52credit(d, "25.00", "REF-"+d.ID)
	pd.sts = "PDNG"
	rv := x52ntry{amt: "25.00", ind: "DBIT", rvsl: true, sts: "PDNG", ref: "RVSL-PD", txs: []x52tx{{e2e: c.ID, ref: "RVSL-PD", amt: "25.00", dbtr: c.AccountID}}}
	for _, ver := range []string{"02", "08", "13"} {
		rep := x52run(t, b, x52fees, x52doc("053", ver, x52stmt{acct: x52fees, entries: []x52ntry{x52credit(c, "25.00", "REF-"+c.ID), pd, rv}}))
		x52want(t, b, rep, "camt.053."+ver+": 1 booked, 2 pending, a pending reversal of 1", "recorded_not_posted 2")
	}
}

// 7. Amounts as banks write them: "25" and "0025.00" and "25.5" (a charge
// of 25.50) are the charge's amounts (sanity).
func TestAttack52AmountFormats(t *testing.T) {
	b := newBooks(t, memstore.New(), "A52F-")
	c1, c2, c3 := b.charge("1", 2500), b.charge("2", 2500), b.charge("3", 2550)
	for _, c := range []charge.Charge{c1, c2, c3} {
		b.done(t, c)
	}
	rep := x52run(t, b, x52fees, x52doc("053", "08", x52stmt{acct: x52fees, entries: []x52ntry{
		x52credit(c1, "25", "R1"), x52credit(c2, "0025.00", "R2"), x52credit(c3, "25.5", "R3"),
	}}))
	x52want(t, b, rep, `"25", "0025.00", "25.5"`)
	if rep.Matched != 3 || rep.Unverified != 0 {
		t.Fatalf("matched %d (unverified %d), want 3 (0)", rep.Matched, rep.Unverified)
	}
}

// 8. Customers' side: several statements (one per account) in one file,
// and an account with no entry; a debit of another amount on one (sanity).
func TestAttack52SeveralAccountsCustomersSide(t *testing.T) {
	b, cs := x52books(t, "A52A-", 3)
	deb := func(c charge.Charge, amt string) x52ntry {
		return x52ntry{amt: amt, ind: "DBIT", ref: "REF-" + c.ID, bktx: "PMNT/IDDT/ESDD",
			txs: []x52tx{{e2e: c.ID, ustrd: c.DebitRequestFor(1).Narrative}}}
	}
	rep := x52run(t, b, "", x52doc("053", "04",
		x52stmt{acct: cs[0].AccountID, entries: []x52ntry{deb(cs[0], "25.00")}},
		x52stmt{acct: "0099999999999"},
		x52stmt{acct: cs[1].AccountID, entries: []x52ntry{deb(cs[1], "26.00")}},
		x52stmt{acct: cs[2].AccountID, entries: []x52ntry{deb(cs[2], "25.00")}},
	))
	x52want(t, b, rep, "three customers' statements, one debited 26.00", "amount_mismatch 2")
}

// 9. A credit on the collection account from another account than the
// charge's (DbtrAcct is not the customer's) under the charge's key: the
// fee was collected from the wrong customer.
func TestAttack52CreditFromAnotherAccount(t *testing.T) {
	b, cs := x52books(t, "A52W-", 1)
	c := cs[0]
	e := x52credit(c, "25.00", "REF-"+c.ID)
	e.txs[0].dbtr = "0077777777777"
	rep := x52run(t, b, x52fees, x52doc("053", "08", x52stmt{acct: x52fees, entries: []x52ntry{e}}))
	x52want(t, b, rep, "credit from another account", "amount_mismatch 1")
}

// 11. Cross-currency details: the entry and TxAmt in the account's INR,
// the instructed amount in USD (sanity: the INR amount is the posting's).
func TestAttack52InstructedAmountInAnotherCurrency(t *testing.T) {
	b, c, d := x52two(t, "A52X-")
	e1 := x52credit(c, "25.00", "R-X1")
	e1.txs[0].amt, e1.txs[0].instd, e1.txs[0].instdCcy, e1.txs[0].txAmt = "", "0.30", "USD", "25.00"
	e2 := x52credit(d, "25.00", "R-X2")
	e2.txs[0].amt, e2.txs[0].instd, e2.txs[0].instdCcy = "", "0.30", "USD" // no TxAmt: the entry's Amt
	rep := x52run(t, b, x52fees, x52doc("053", "08", x52stmt{acct: x52fees, entries: []x52ntry{e1, e2}}))
	x52wantMatched(t, b, rep, "InstdAmt USD beside INR amounts", 2)
}

// 12. Booked after the cut-off: the record was DONE on 12-01, the bank
// booked it 12-02 (value date 12-01). The 12-01 statement alone: one
// recorded_not_posted (documented); both days' statements together: matched.
func TestAttack52BookedAfterTheCutOff(t *testing.T) {
	b, c, d := x52two(t, "A52V-")
	late := x52credit(d, "25.00", "REF-"+d.ID)
	late.bookg, late.val = "2026-12-02", "2026-12-01"
	day1 := x52doc("053", "08", x52stmt{acct: x52fees, entries: []x52ntry{x52credit(c, "25.00", "REF-"+c.ID)}})
	day2 := x52doc("053", "08", x52stmt{acct: x52fees, from: "2026-12-02T00:00:00Z", to: "2026-12-02T23:59:59Z", entries: []x52ntry{late}})
	x52want(t, b, x52run(t, b, x52fees, day1), "12-01 alone", "recorded_not_posted 2")
	rep := x52run(t, b, x52fees, day1, day2)
	x52wantMatched(t, b, rep, "12-01 and 12-02 together", 2)
}

// 4. The camt.054 of the day notified each credit as it was booked (an
// entry a transaction, its own AcctSvcrRef); the camt.053 books them as a
// batch (one Ntry, Btch, its AcctSvcrRef; TxDtls without references). Both
// given for the day: the same credits read twice. The doc: "a camt.054
// repeating the camt.053 counts once".
func TestAttack52Camt054BesideBatchedCamt053DoubleCounts(t *testing.T) {
	b, c, d := x52two(t, "A52N-")
	n := c.DebitRequestFor(1).Narrative
	stmt053 := x52doc("053", "08", x52stmt{acct: x52fees, entries: []x52ntry{
		x52batch("50.00", "BATCH-0009", x52in(c, n), x52in(d, n)),
	}})
	ntf054 := x52doc("054", "08", x52stmt{acct: x52fees, entries: []x52ntry{
		x52credit(c, "25.00", "NTF-000001"),
		x52credit(d, "25.00", "NTF-000002"),
	}})
	rep := x52run(t, b, x52fees, stmt053, ntf054)
	x52want(t, b, rep, "camt.053 (batch) and camt.054 (entry a transaction) of the same day")
}

// 10. A customers' side file that holds the bank's fee account too (a
// bank's export of every account of the branch): the fee account's
// return of the charge (a DBIT with RtrInf, no RvslInd) is read as a
// second DEBIT of the charge on the account FEES-001, and the customer's
// return cancels the customer's debit: the returned charge is reported as
// an amount_mismatch on the fee account, not as returned.
func TestAttack52CustomersSideFileWithTheFeeAccountsReturn(t *testing.T) {
	b, cs := x52books(t, "A52C-", 1)
	c := cs[0]
	n := c.DebitRequestFor(1).Narrative
	rep := x52run(t, b, "", x52doc("053", "08",
		x52stmt{acct: c.AccountID, entries: []x52ntry{
			{amt: "25.00", ind: "DBIT", ref: "REF-" + c.ID, txs: []x52tx{{e2e: c.ID, ustrd: n}}},
			{amt: "25.00", ind: "CRDT", ref: "RTN-CUST-1", txs: []x52tx{{e2e: c.ID, ref: "RTN-CUST-1", rtr: "MD06"}}},
		}},
		x52stmt{acct: x52fees, entries: []x52ntry{
			{amt: "25.00", ind: "CRDT", ref: "REF-FEES-1", txs: []x52tx{{e2e: c.ID, dbtr: c.AccountID, ustrd: n}}},
			{amt: "25.00", ind: "DBIT", ref: "RTN-FEES-1", bktx: "PMNT/IDDT/UPDD", txs: []x52tx{{e2e: c.ID, ref: "RTN-FEES-1", dbtr: c.AccountID, rtr: "MD06"}}},
		}},
	))
	x52want(t, b, rep, "customer's debit returned MD06; the file also holds the fee account's credit and return", "recorded_not_posted 1")
}

// returnOf is the return (or reversal) shown on br, and whether there is
// one.
func returnOf(br *reconcile.Break) (reconcile.Posted, bool) {
	for _, p := range br.Posted {
		if p.Reversal {
			return p, true
		}
	}
	return reconcile.Posted{}, false
}

// A return as many banks book it (issue 52, found by the reviewer): a
// booked entry in the direction opposite to ours under the charge's
// EndToEndId, RvslInd absent, no RtrInf, its bank transaction code a
// direct debit's return (PMNT/IDDT/UPDD on the collection account,
// PMNT/RDDT/UPDD on the customer's), the reason only in the narrative.
// Money went back under our key: the charge is recorded_not_posted with
// the return shown (amount, reason read from the narrative), never
// matched. The same entry under a code that is no return stays skipped.
func TestAttack52ReturnWithoutRtrInf(t *testing.T) {
	for _, tc := range []struct {
		name       string
		collection bool
		bktx       string
		addtl      string // AddtlNtryInf and AddtlTxInf
		want       string // the break ("" none: matched)
		reason     string
	}{
		{"UPDD, reason in the narrative", true, "PMNT/IDDT/UPDD", "RETURN AC04 ACCOUNT CLOSED", "recorded_not_posted 1", "AC04"},
		{"UPDD, no narrative", true, "PMNT/IDDT/UPDD", "", "recorded_not_posted 1", ""},
		{"PRDD (reversal due to a payment return), AM04", true, "PMNT/IDDT/PRDD", "UNPAID AM04", "recorded_not_posted 1", "AM04"},
		{"RCDD (cancellation request)", true, "PMNT/IDDT/RCDD", "REFUND MD06 REQUESTED", "recorded_not_posted 1", "MD06"},
		{"customer's account, RDDT/UPDD", false, "PMNT/RDDT/UPDD", "RETURN AC04", "recorded_not_posted 1", "AC04"},
		{"a debit of another kind (ESDD) is not ours", true, "PMNT/IDDT/ESDD", "RETURN AC04", "", ""},
		{"a word that merely looks like a code is not read", true, "PMNT/IDDT/UPDD", "RETURNAC04 AC04X", "recorded_not_posted 1", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, cs := x52books(t, "A52R-", 1)
			c := cs[0]
			st := x52stmt{acct: x52fees, entries: []x52ntry{
				x52credit(c, "25.00", "REF-"+c.ID),
				{amt: "25.00", ind: "DBIT", ref: "RTN-000777", bktx: tc.bktx, addtl: tc.addtl,
					txs: []x52tx{{e2e: c.ID, ref: "RTN-000777", amt: "25.00", dbtr: c.AccountID, addtlTxInf: tc.addtl}}},
			}}
			coll := x52fees
			if !tc.collection {
				coll = ""
				st = x52stmt{acct: c.AccountID, entries: []x52ntry{
					{amt: "25.00", ind: "DBIT", ref: "REF-" + c.ID, bktx: "PMNT/RDDT/ESDD", txs: []x52tx{{e2e: c.ID, ustrd: c.DebitRequestFor(1).Narrative}}},
					{amt: "25.00", ind: "CRDT", ref: "RTN-000777", bktx: tc.bktx, addtl: tc.addtl, txs: []x52tx{{e2e: c.ID, ref: "RTN-000777", addtlTxInf: tc.addtl}}},
				}}
			}
			rep := x52run(t, b, coll, x52doc("053", "08", st))
			if got := x52breaks(b, rep); got != tc.want {
				t.Fatalf("breaks %q, want %q (matched %d, reversals %d, notes %q)", got, tc.want, rep.Matched, rep.Reversals, rep.Notes)
			}
			if tc.want == "" {
				if rep.Matched != 1 || rep.Reversals != 0 {
					t.Fatalf("matched %d, reversals %d: want the charge matched, the debit of another kind skipped", rep.Matched, rep.Reversals)
				}
				return
			}
			br := findBreak(rep, c.ID)
			rt, ok := returnOf(br)
			if !ok || !rt.Return || rt.ReturnReason != tc.reason || rt.Minor != 2500 || rt.Currency != "INR" || rt.Reference != "RTN-000777" {
				t.Fatalf("the return shown: %+v (found %t); want a return of INR 25.00, reason %q, reference RTN-000777", rt, ok, tc.reason)
			}
			if !strings.Contains(br.Detail, "returned, reason "+statementReason(tc.reason)) || rep.Reversals != 1 || rep.Matched != 0 {
				t.Fatalf("detail %q, reversals %d, matched %d", br.Detail, rep.Reversals, rep.Matched)
			}
		})
	}
}

func statementReason(code string) string {
	switch code {
	case "":
		return "no reason code"
	case "AC04":
		return "AC04 (closed account number)"
	case "AM04":
		return "AM04 (insufficient funds)"
	case "MD06":
		return "MD06 (refund request by end customer)"
	}
	return code
}

// A bank's own reversal (storno) of a credit on the collection account,
// without the originator's end-to-end id (EndToEndId NOTPROVIDED, or no
// TxDtls at all), naming the posting it reverses by its AcctSvcrRef
// (issue 52, found by the reviewer: it was counted in Header.Unkeyed and
// dropped). It pairs with the posting of that reference when one is read
// (the charge recorded_not_posted, the storno shown under its key; of
// another amount, a partial reversal: amount_mismatch); else it is a
// warning naming its amount and reference, never nothing.
func TestAttack52UnkeyedReversal(t *testing.T) {
	for _, tc := range []struct {
		name    string
		storno  func(c charge.Charge) x52ntry
		want    string
		note    string // a note that must be there ("" none about a reversal without a key)
		ref     string // what the note says of its reference
		matched int
	}{
		{"NOTPROVIDED, the posting's AcctSvcrRef", func(c charge.Charge) x52ntry {
			return x52ntry{amt: "25.00", ind: "DBIT", rvsl: true, ref: "REF-" + c.ID, addtl: "STORNO REF-" + c.ID,
				txs: []x52tx{{e2e: "NOTPROVIDED", ref: "REF-" + c.ID, amt: "25.00", dbtr: c.AccountID}}}
		}, "recorded_not_posted 1", "", "", 0},
		{"NOTPROVIDED, no DbtrAcct, its own entry reference and the posting's in Refs", func(c charge.Charge) x52ntry {
			return x52ntry{amt: "25.00", ind: "DBIT", rvsl: true, ref: "STORNO-000031",
				txs: []x52tx{{e2e: "NOTPROVIDED", ref: "REF-" + c.ID, amt: "25.00"}}}
		}, "recorded_not_posted 1", "", "", 0},
		{"no TxDtls, the entry's AcctSvcrRef", func(c charge.Charge) x52ntry {
			return x52ntry{amt: "25.00", ind: "DBIT", rvsl: true, ref: "REF-" + c.ID}
		}, "recorded_not_posted 1", "", "", 0},
		{"of another amount: a partial reversal", func(c charge.Charge) x52ntry {
			return x52ntry{amt: "10.00", ind: "DBIT", rvsl: true, ref: "REF-" + c.ID,
				txs: []x52tx{{e2e: "NOTPROVIDED", ref: "REF-" + c.ID, amt: "10.00", dbtr: c.AccountID}}}
		}, "amount_mismatch 1", "", "", 0},
		{"a reference no posting read has", func(c charge.Charge) x52ntry {
			return x52ntry{amt: "30.00", ind: "DBIT", rvsl: true, ref: "REF-ELSEWHERE-9",
				txs: []x52tx{{e2e: "NOTPROVIDED", ref: "REF-ELSEWHERE-9", amt: "30.00", dbtr: c.AccountID}}}
		}, "", "warning: a reversal of INR 30.00 booked ", "bank reference REF-ELSEWHERE-9", 1},
		{"no reference at all", func(c charge.Charge) x52ntry {
			return x52ntry{amt: "30.00", ind: "DBIT", rvsl: true,
				txs: []x52tx{{e2e: "NOTPROVIDED", amt: "30.00", dbtr: c.AccountID}}}
		}, "", "warning: a reversal of INR 30.00 booked ", "no bank reference", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, cs := x52books(t, "A52U-", 1)
			c := cs[0]
			rep := x52run(t, b, x52fees, x52doc("053", "08", x52stmt{acct: x52fees, entries: []x52ntry{
				x52credit(c, "25.00", "REF-"+c.ID), tc.storno(c),
			}}))
			if got := x52breaks(b, rep); got != tc.want || rep.Matched != tc.matched {
				t.Fatalf("breaks %q, matched %d; want %q, %d (reversals %d, notes %q)", got, rep.Matched, tc.want, tc.matched, rep.Reversals, rep.Notes)
			}
			keyless := slices.IndexFunc(rep.Notes, func(n string) bool { return strings.Contains(n, "without a bank key") })
			switch {
			case tc.note != "" && (keyless < 0 || !strings.Contains(rep.Notes[keyless], tc.note) || !strings.Contains(rep.Notes[keyless], tc.ref)):
				t.Fatalf("notes %q: want one naming the reversal's amount and reference (%q)", rep.Notes, tc.note)
			case tc.note == "" && keyless >= 0 && tc.want != "":
				t.Fatalf("paired, yet a note says it was not: %q", rep.Notes[keyless])
			}
			if tc.want == "" {
				return
			}
			br := findBreak(rep, c.ID)
			rv, ok := returnOf(br)
			if !ok || rv.BankKey != c.ID || rv.Return || rv.Currency != "INR" {
				t.Fatalf("the storno shown: %+v (found %t); want a reversal under %s", rv, ok, c.ID)
			}
			if rep.Reversals != 1 {
				t.Fatalf("reversals %d, want 1", rep.Reversals)
			}
		})
	}
}

// The same storno read from two files (the camt.053 and a camt.054 that
// repeats it) is one reversal: paired once, or noted once.
func TestAttack52UnkeyedReversalReadTwice(t *testing.T) {
	for _, tc := range []struct {
		name, ref string
		want      string
		notes     int
	}{
		{"paired", "", "recorded_not_posted 1", 0},
		{"unpaired", "REF-ELSEWHERE-9", "", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, cs := x52books(t, "A52T-", 1)
			c := cs[0]
			ref := tc.ref
			if ref == "" {
				ref = "REF-" + c.ID
			}
			storno := x52ntry{amt: "25.00", ind: "DBIT", rvsl: true, ref: "STORNO-1", txs: []x52tx{{e2e: "NOTPROVIDED", ref: ref, amt: "25.00"}}}
			rep := x52run(t, b, x52fees,
				x52doc("053", "08", x52stmt{acct: x52fees, entries: []x52ntry{x52credit(c, "25.00", "REF-"+c.ID), storno}}),
				x52doc("054", "08", x52stmt{acct: x52fees, entries: []x52ntry{storno}}))
			keyless := 0
			for _, n := range rep.Notes {
				if strings.Contains(n, "without a bank key") {
					keyless++
				}
			}
			if got := x52breaks(b, rep); got != tc.want || keyless != tc.notes {
				t.Fatalf("breaks %q, %d note(s) of a reversal without a key; want %q, %d (notes %q)", got, keyless, tc.want, tc.notes, rep.Notes)
			}
			if tc.want != "" && (rep.Reversals != 1 || len(findBreak(rep, c.ID).Posted) != 2) {
				t.Fatalf("reversals %d, posted %+v: want the storno once", rep.Reversals, findBreak(rep, c.ID).Posted)
			}
		})
	}
}

// A storno naming a batch's reference (the entry's AcctSvcrRef, which its
// transactions without references of their own all carry) names several
// postings of its amount: it pairs with none, and is noted. Resolve, which
// judges one charge alone, pairs it as the whole run does: no break.
func TestAttack52UnkeyedReversalOfABatchReference(t *testing.T) {
	b, c, d := x52two(t, "A52B-")
	n := c.DebitRequestFor(1).Narrative
	doc := x52doc("053", "08", x52stmt{acct: x52fees, entries: []x52ntry{
		x52batch("50.00", "BATCH-0031", x52in(c, n), x52in(d, d.DebitRequestFor(1).Narrative)),
		{amt: "25.00", ind: "DBIT", rvsl: true, ref: "STORNO-31", txs: []x52tx{{e2e: "NOTPROVIDED", ref: "BATCH-0031", amt: "25.00"}}},
	}})
	f := filepath.Join(t.TempDir(), "stmt.xml")
	if err := os.WriteFile(f, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	read := reconcile.ReadFiles([]string{f}, statement.Options{CollectionAccount: x52fees})
	opts := reconcile.Options{Store: b.store, Fingerprints: b.fp, Now: b.clock.Now()}
	rep, err := reconcile.Run(t.Context(), opts, read)
	if err != nil {
		t.Fatal(err)
	}
	if got := x52breaks(b, rep); got != "" || rep.Matched != 2 || len(rep.Notes) != 1 || !strings.Contains(rep.Notes[0], "a reversal of INR 25.00") || !strings.Contains(rep.Notes[0], "BATCH-0031") {
		t.Fatalf("breaks %q, matched %d, notes %q: want both matched and the storno noted", got, rep.Matched, rep.Notes)
	}
	_, err = reconcile.Resolve(t.Context(), opts, read, reconcile.ResolveRequest{ChargeID: c.ID, Reason: "r", Operator: "op", Guard: b.guard})
	if !errors.Is(err, reconcile.ErrNoBreak) {
		t.Fatalf("resolve of %s: %v; want ErrNoBreak (the storno pairs with no one posting in the whole run either)", c.ID, err)
	}
}

// Attack 52s: the summary a record keeps in clear (driver.Record.Summary,
// "2500 INR 7890") and reconciliation's comparison of every matched
// posting with it. A payments engineer's question each time: can a debit
// of another amount, currency or account slip through as matched (or be
// collected by resolve), and does any output show more of an account than
// its last four?

// Every posting of a DONE record with a summary is compared with it, with
// or without our narrative: amount, currency and the account's last four.
func TestAttack52sEveryPostingIsComparedWithTheSummary(t *testing.T) {
	for _, tc := range []struct {
		name      string
		narrative bool
		change    func(p *statement.Posting, c charge.Charge)
		mismatch  bool
	}{
		{"the charge's posting, no narrative", false, func(*statement.Posting, charge.Charge) {}, false},
		{"the charge's posting, our narrative", true, func(*statement.Posting, charge.Charge) {}, false},
		{"one paisa more", false, func(p *statement.Posting, _ charge.Charge) { p.Amount.Minor++ }, true},
		{"one paisa less", false, func(p *statement.Posting, _ charge.Charge) { p.Amount.Minor-- }, true},
		{"the same minor units in USD", false, func(p *statement.Posting, _ charge.Charge) { p.Amount.Currency = "USD" }, true},
		{"the same minor units in JPY (no minor digits: 2500 yen)", false, func(p *statement.Posting, _ charge.Charge) { p.Amount.Currency = "JPY" }, true},
		{"the same amount in USD with our narrative", true, func(p *statement.Posting, _ charge.Charge) { p.Amount.Currency = "USD" }, true},
		{"another account's last four", false, func(p *statement.Posting, c charge.Charge) { p.Account = c.AccountID[:len(c.AccountID)-1] + "9" }, true},
		{"an account of four characters, the charge's last four", false, func(p *statement.Posting, c charge.Charge) { p.Account = c.AccountID[len(c.AccountID)-4:] }, true},
		{"the account as an IBAN ending in the same digits", false, func(p *statement.Posting, c charge.Charge) { p.Account = "IN55BANK" + c.AccountID }, false},
		{"the account as the bank masks it", false, func(p *statement.Posting, c charge.Charge) { p.Account = "XXXXXXXX" + c.AccountID[len(c.AccountID)-4:] }, false},
		{"another customer with the same last four, our narrative", true, func(p *statement.Posting, c charge.Charge) { p.Account = "77" + c.AccountID[2:] }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newBooks(t, memstore.New(), "A52S-E-")
			c := b.charge("1", 2500)
			b.done(t, c)
			b.post(c, 1, 2500, tc.narrative)
			tc.change(&b.postings[0], c)
			rep := b.run(t)
			got := strings.Join(b.mine(rep), "; ")
			switch {
			case tc.mismatch && got != "amount_mismatch 1":
				t.Fatalf("posting %s from %s: breaks %q, matched %d; want amount_mismatch", b.postings[0].Amount, b.postings[0].Account, got, rep.Matched)
			case !tc.mismatch && (got != "" || rep.Matched != 1 || rep.Unverified != 0 || len(rep.KeyOnly) != 0):
				t.Fatalf("posting %s from %s: breaks %q, matched %d, unverified %d (%q); want matched and checked", b.postings[0].Amount, b.postings[0].Account, got, rep.Matched, rep.Unverified, rep.KeyOnly)
			}
		})
	}
}

// A posting of another amount is never collected as the charge's (no
// narrative: only the summary can tell): FAILED and IN_PROGRESS with its
// lease passed are refused; WAITING with the declined generation posted
// is collected to stop the schedule debiting again, and stays an
// amount_mismatch. The charge's own amount is checked (not
// "unverified") on the same paths.
func TestAttack52sAnotherAmountIsNeverCollected(t *testing.T) {
	for _, tc := range []struct {
		name  string
		plant func(t *testing.T, b *books, c charge.Charge)
		gen   int
		kind  reconcile.Kind // with the charge's amount
	}{
		{"FAILED", func(t *testing.T, b *books, c charge.Charge) { b.failed(t, c) }, 1, reconcile.FailedButPosted},
		{"IN_PROGRESS, lease passed", func(t *testing.T, b *books, c charge.Charge) {
			b.claimed(t, c)
			b.clock.Advance(2 * time.Minute)
		}, 1, reconcile.PostedNotRecorded},
		{"WAITING at generation 2, generation 1 posted", func(t *testing.T, b *books, c charge.Charge) {
			cl := b.claim(t, c)
			now := b.clock.Now()
			if err := b.store.Finish(t.Context(), driver.FinishRequest{Key: c.ID, Token: cl.Record.Token, State: driver.StateWaiting,
				Status: string(charge.RetryScheduled), Detail: "next attempt", Now: now, ExpiresAt: now.Add(30 * 24 * time.Hour),
				NotBefore: now.Add(24 * time.Hour), Generation: 2}); err != nil {
				t.Fatal(err)
			}
		}, 1, reconcile.FailedButPosted},
	} {
		for _, amount := range []int64{2600, 2500} {
			t.Run(fmt.Sprintf("%s, posted %d", tc.name, amount), func(t *testing.T) {
				b := newBooks(t, memstore.New(), "A52S-C-")
				c := b.charge("1", 2500)
				tc.plant(t, b, c)
				b.post(c, tc.gen, amount, false)
				rep := b.run(t)
				br := findBreak(rep, c.ID)
				before, _ := b.store.Get(t.Context(), c.ID, b.clock.Now())
				res, err := reconcile.Resolve(t.Context(), reconcile.Options{Store: b.store, Fingerprints: b.fp, Period: period, Now: b.clock.Now()}, b.postings_(),
					reconcile.ResolveRequest{ChargeID: c.ID, Reason: "the bank posted it", Operator: "op", Guard: b.guard})
				after, _ := b.store.Get(t.Context(), c.ID, b.clock.Now())
				if amount != 2500 {
					if br == nil || br.Kind != reconcile.AmountMismatch {
						t.Fatalf("breaks %q; want amount_mismatch", b.mine(rep))
					}
					if before.State == driver.StateWaiting {
						// A WAITING charge's declined generation booked with another
						// amount: resolve collects it (DONE), or the schedule's next
						// attempt debits the customer again; the mismatch stays a break
						// until the bank corrects the amount (issue 52, attack 3g).
						again := b.run(t)
						if err != nil || after.State != driver.StateDone || findBreak(again, c.ID) == nil || findBreak(again, c.ID).Kind != reconcile.AmountMismatch {
							t.Fatalf("resolve of a posting of %d for a waiting charge of 2500: %q %v; record %s → %s, then %q; want collected (DONE) and still amount_mismatch", amount, res.Action, err, before.State, after.State, b.mine(again))
						}
						return
					}
					if !errors.Is(err, reconcile.ErrNotCollectable) || after.State != before.State || after.Token != before.Token {
						t.Fatalf("resolve of a posting of %d for a charge of 2500: %q %v; record %s → %s; want refused, nothing written", amount, res.Action, err, before.State, after.State)
					}
					return
				}
				if br == nil || br.Kind != tc.kind || br.Unverified {
					t.Fatalf("breaks %q (%+v); want %s, checked against the summary", b.mine(rep), br, tc.kind)
				}
				if err != nil || res.Action != "adopted" || after.State != driver.StateDone || after.Summary != "2500 INR "+c.AccountID[len(c.AccountID)-4:] {
					t.Fatalf("resolve: %q %v; record %s summary %q; want adopted, DONE, the summary kept", res.Action, err, after.State, after.Summary)
				}
			})
		}
	}
}

// posted_twice on a record still open to a debit: resolve records ONE
// posting as collected, and it must be the charge's — not a posting of
// another amount or account read first.
func TestAttack52sPostedTwiceCollectsTheChargesPosting(t *testing.T) {
	for _, tc := range []struct {
		name  string
		first func(p *statement.Posting)
	}{
		{"another amount read first", func(p *statement.Posting) { p.Amount.Minor = 2600 }},
		{"another currency read first", func(p *statement.Posting) { p.Amount.Currency = "USD" }},
		{"another account read first", func(p *statement.Posting) { p.Account = p.Account[:len(p.Account)-4] + "0000" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newBooks(t, memstore.New(), "A52S-T-")
			c := b.charge("1", 2500)
			b.claimed(t, c)
			b.clock.Advance(2 * time.Minute)
			b.post(c, 1, 2500, false)
			b.post(c, 1, 2500, false)
			tc.first(&b.postings[0])
			right := b.postings[1].Reference
			rep := b.run(t)
			if br := findBreak(rep, c.ID); br == nil || br.Kind != reconcile.PostedTwice || br.Unverified {
				t.Fatalf("breaks %q; want posted_twice, checked", b.mine(rep))
			}
			res, err := reconcile.Resolve(t.Context(), reconcile.Options{Store: b.store, Fingerprints: b.fp, Period: period, Now: b.clock.Now()}, b.postings_(),
				reconcile.ResolveRequest{ChargeID: c.ID, Reason: "keep one, refund the other", Operator: "op", Guard: b.guard})
			if err != nil || res.Action != "adopted" || res.Record == nil {
				t.Fatalf("resolve: %q %v", res.Action, err)
			}
			last := res.Record.History[len(res.Record.History)-1]
			if !strings.Contains(last, "INR 25.00") || !strings.Contains(last, right) {
				t.Fatalf("collected %q; want the charge's posting (INR 25.00, reference %s)", last, right)
			}
		})
	}
	t.Run("none is the charge's", func(t *testing.T) {
		b := newBooks(t, memstore.New(), "A52S-T-")
		c := b.charge("1", 2500)
		b.claimed(t, c)
		b.clock.Advance(2 * time.Minute)
		b.post(c, 1, 2600, false)
		b.post(c, 1, 2400, false)
		_, err := reconcile.Resolve(t.Context(), reconcile.Options{Store: b.store, Fingerprints: b.fp, Period: period, Now: b.clock.Now()}, b.postings_(),
			reconcile.ResolveRequest{ChargeID: c.ID, Reason: "keep one", Operator: "op", Guard: b.guard})
		if rec, _ := b.store.Get(t.Context(), c.ID, b.clock.Now()); err == nil || rec.State == driver.StateDone {
			t.Fatalf("resolve collected one of two postings of another amount: %v, record %s", err, rec.State)
		}
	})
}

// Reversals pair with a posting by reference, else by amount: the one that
// stands afterwards is compared with the summary (the wrong one left
// standing is a break; the right one left standing matches).
func TestAttack52sReversalLeavesAPostingThatIsCompared(t *testing.T) {
	for _, tc := range []struct {
		name     string
		reversal func(right, wrong statement.Posting) statement.Posting
		want     string
	}{
		{"the charge's posting reversed under its own reference", func(right, _ statement.Posting) statement.Posting {
			right.Reference = "RVSL-1"
			return right
		}, "amount_mismatch 1"},
		{"the charge's posting reversed by its reference", func(right, _ statement.Posting) statement.Posting { return right }, "amount_mismatch 1"},
		{"the posting of another amount reversed, no reference", func(_, wrong statement.Posting) statement.Posting {
			wrong.Reference = ""
			return wrong
		}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newBooks(t, memstore.New(), "A52S-R-")
			c := b.charge("1", 2500)
			b.done(t, c)
			right := b.post(c, 1, 2500, false)
			wrong := b.post(c, 1, 2600, false)
			b.reverse(tc.reversal(right, wrong))
			rep := b.run(t)
			if got := strings.Join(b.mine(rep), "; "); got != tc.want {
				t.Fatalf("breaks %q, matched %d; want %q", got, rep.Matched, tc.want)
			}
		})
	}
}

// From the collection account's camt.053 without narratives: a batch of two
// transactions (TxAmt each), one of another amount; a transaction whose
// instructed amount is the charge's and whose booked amount is not.
func TestAttack52sCamtWithoutNarrativeComparesTheBookedAmount(t *testing.T) {
	b, cs := x52books(t, "A52S-X-", 3)
	c1, c2, c3 := cs[0], cs[1], cs[2]
	doc := x52doc("053", "08", x52stmt{acct: x52fees, entries: []x52ntry{
		{amt: "51.00", ind: "CRDT", ref: "BATCH-1", bktx: "PMNT/IDDT/ESDD", btch: true, txs: []x52tx{
			{e2e: c1.ID, txAmt: "25.00", dbtr: c1.AccountID},
			{e2e: c2.ID, txAmt: "26.00", dbtr: c2.AccountID},
		}},
		{amt: "26.00", ind: "CRDT", ref: "R-3", txs: []x52tx{{e2e: c3.ID, instd: "25.00", instdCcy: "INR", txAmt: "26.00", dbtr: c3.AccountID}}},
	}})
	rep := x52run(t, b, x52fees, doc)
	x52want(t, b, rep, "a batch with one transaction of 26.00; InstdAmt 25.00 booked 26.00", "amount_mismatch 2", "amount_mismatch 3")
	if rep.Matched != 1 || rep.Unverified != 0 {
		t.Fatalf("matched %d (unverified %d), want 1 (0)", rep.Matched, rep.Unverified)
	}
}

// A record written before summaries is matched by key only and listed;
// the list, the note and the JSON report never show a full account, even
// when the charge id holds it.
func TestAttack52sKeyOnlyListShowsNoAccount(t *testing.T) {
	b := newBooks(t, memstore.New(), "")
	b.noSummary = true
	c := b.charge("x", 2500)
	delete(b.charges, c.ID)
	c.ID = "FEE" + c.AccountID // a billing system that keys charges by account
	b.charges[c.ID] = c
	b.done(t, c)
	b.post(c, 1, 2500, false)
	rep := b.run(t)
	if rep.Unverified != 1 || len(rep.KeyOnly) != 1 {
		t.Fatalf("unverified %d, key only %q; want the older record listed", rep.Unverified, rep.KeyOnly)
	}
	out, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(out), c.AccountID) || strings.Contains(strings.Join(rep.Notes, "\n"), c.AccountID) {
		t.Fatalf("the report shows the full account %s: key only %q, notes %q", c.AccountID, rep.KeyOnly, rep.Notes)
	}
}

// An amount_mismatch says what the charge is from its summary: the
// account's last four, never the posting's full account.
func TestAttack52sMismatchDetailShowsLastFourOnly(t *testing.T) {
	b := newBooks(t, memstore.New(), "A52S-M-")
	c := b.charge("1", 2500)
	b.done(t, c)
	b.post(c, 1, 2600, false)
	b.postings[0].Account = "IN55BANK" + c.AccountID
	rep := b.run(t)
	br := findBreak(rep, c.ID)
	if br == nil || br.Kind != reconcile.AmountMismatch {
		t.Fatalf("breaks %q", b.mine(rep))
	}
	out, _ := json.Marshal(rep)
	if strings.Contains(string(out), c.AccountID) || strings.Contains(string(out), c.AccountID[len(c.AccountID)-8:]) {
		t.Fatalf("the report shows more than the last four: %s", br.Detail)
	}
	if !strings.Contains(br.Detail, "the charge is INR 25.00 to ****"+c.AccountID[len(c.AccountID)-4:]) {
		t.Fatalf("detail %q does not say what the charge is", br.Detail)
	}
}

// A record written before summaries that keeps its notice
// (DEBITED_NOTIFICATION_FAILED) is compared with the notice's amount and
// last four; one whose notice is not ours to read (another currency code,
// not JSON) falls back to matched by key only, listed — never compared
// with a wrong amount, never silent.
func TestAttack52sOlderRecordsNoticeIsTheSummary(t *testing.T) {
	for _, tc := range []struct {
		name   string
		detail func(c charge.Charge) string
		minor  int64
		want   string
		listed bool
	}{
		{"its notice, the charge's amount", notice52s, 2500, "", false},
		{"its notice, another amount", notice52s, 2600, "amount_mismatch 1", false},
		{"its notice, another account", func(c charge.Charge) string {
			c.AccountID = c.AccountID[:len(c.AccountID)-1] + "9"
			return notice52s(c)
		}, 2500, "amount_mismatch 1", false},
		{"a notice that is not JSON", func(charge.Charge) string { return "REF-1" }, 2600, "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newBooks(t, memstore.New(), "A52S-N-")
			b.noSummary = true
			c := b.charge("1", 2500)
			cl := b.claim(t, c)
			if err := b.guard.Complete(t.Context(), cl.Lease(), string(charge.DebitedNotificationFailed), tc.detail(c)); err != nil {
				t.Fatal(err)
			}
			b.post(c, 1, tc.minor, false)
			rep := b.run(t)
			if got := strings.Join(b.mine(rep), "; "); got != tc.want || (len(rep.KeyOnly) == 1) != tc.listed {
				t.Fatalf("breaks %q, key only %q; want %q, listed %v", got, rep.KeyOnly, tc.want, tc.listed)
			}
		})
	}
}

func notice52s(c charge.Charge) string {
	n, err := charge.NoticeOf(c, charge.DebitReceipt{Reference: "REF-1"}, day).Marshal()
	if err != nil {
		panic(err)
	}
	return string(n)
}

// The key-only list is cut at MaxKeyOnly: it must be the first charges
// in order, the same on every run of the same statement — not whichever
// the concurrent judges reached first (it listed 061…070 among the first
// 50 of 80, and another set on the next run).
func TestAttack52sKeyOnlyListIsTheSameOnEveryRun(t *testing.T) {
	b := newBooks(t, memstore.New(), "A52S-L-")
	b.noSummary = true
	var ids []string
	for i := range 80 {
		c := b.charge(fmt.Sprintf("%03d", i), 2500)
		b.done(t, c)
		b.post(c, 1, 2500, false)
		ids = append(ids, c.ID)
	}
	slices.Sort(ids)
	for n := range 10 {
		rep, err := reconcile.Run(t.Context(), reconcile.Options{Store: b.store, Fingerprints: b.fp, Period: period, Now: b.clock.Now(), Concurrency: 32}, b.postings_())
		if err != nil {
			t.Fatal(err)
		}
		if rep.Unverified != 80 || !slices.Equal(rep.KeyOnly, ids[:reconcile.MaxKeyOnly]) {
			t.Fatalf("run %d: %d key only, listed %q…; want the first %d in order", n, rep.Unverified, rep.KeyOnly[reconcile.MaxKeyOnly-10:], reconcile.MaxKeyOnly)
		}
	}
}

// golden runs the reconciliation of a hand-written statement in testdata
// (written from the standard's element names, not by our writer) against
// books whose charges are DONE, each under the reference the statement's
// posting has (REF-<id>), their accounts 0012345600001, …02, … in order.
func golden(t *testing.T, file, collection string, names ...string) (*books, reconcile.Report) {
	t.Helper()
	b := newBooks(t, memstore.New(), "CHG-R-")
	for _, n := range names {
		b.done(t, b.charge(n, 2500))
	}
	rep, err := reconcile.Run(t.Context(), reconcile.Options{Store: b.store, Fingerprints: b.fp, Now: b.clock.Now()},
		reconcile.ReadFiles([]string{filepath.Join("testdata", file)}, statement.Options{CollectionAccount: collection}))
	if err != nil {
		t.Fatalf("Run %s: %v", file, err)
	}
	return b, rep
}

// wantCounts wants rep to count so many postings, reversals among them,
// and matched charges.
func wantCounts(t *testing.T, rep reconcile.Report, postings, reversals, matched int) {
	t.Helper()
	if rep.Postings != postings || rep.Reversals != reversals || rep.Matched != matched {
		t.Fatalf("%d postings (%d reversals), %d matched; want %d (%d), %d", rep.Postings, rep.Reversals, rep.Matched, postings, reversals, matched)
	}
}

func wantBreaks(t *testing.T, rep reconcile.Report, want ...string) {
	t.Helper()
	var got []string
	for _, br := range rep.Breaks {
		got = append(got, string(br.Kind)+" "+br.ChargeID)
	}
	if strings.Join(got, "; ") != strings.Join(want, "; ") {
		t.Fatalf("breaks %q, want %q; notes %q", got, want, rep.Notes)
	}
}

// A reversal by the standard's rule (DBIT, RvslInd true, the same
// EndToEndId) with an AcctSvcrRef of its own cancels the posting of its
// end-to-end id and amount: CHG-R-8 is recorded_not_posted, not matched.
func TestReconcileReversalWithItsOwnReference(t *testing.T) {
	_, rep := golden(t, "camt053_001_08_reversal_own_ref.xml", "FEES-001", "7", "8")
	wantBreaks(t, rep, "recorded_not_posted CHG-R-8")
	wantCounts(t, rep, 2, 1, 1)
	br := rep.Breaks[0]
	if !strings.Contains(br.Detail, "reversed") || len(br.Posted) != 2 || !br.Posted[1].Reversal || br.Posted[1].Reference != "RVSL-000091" {
		t.Fatalf("break %q, posted %+v", br.Detail, br.Posted)
	}
	for _, n := range rep.Notes {
		if strings.Contains(n, "earlier statement") {
			t.Fatalf("the reversal was taken for one of an earlier statement: %q", n)
		}
	}
}

// A return (a DBIT entry without RvslInd, its own AcctSvcrRef, RtrInf
// reason AC04) is the return of CHG-R-9's posting, reported with its code
// in the text, CSV and JSON reports.
func TestReconcileReturnWithReasonCode(t *testing.T) {
	_, rep := golden(t, "camt054_001_08_return_ac04.xml", "FEES-001", "9")
	wantBreaks(t, rep, "recorded_not_posted CHG-R-9")
	br := rep.Breaks[0]
	if len(br.Posted) != 2 || !br.Posted[1].Return || br.Posted[1].ReturnReason != "AC04" || br.Posted[1].Reference != "RTN-000417" {
		t.Fatalf("posted %+v", br.Posted)
	}
	if !strings.Contains(br.Detail, "returned, reason AC04 (closed account number)") {
		t.Fatalf("detail %q", br.Detail)
	}
	text, csv, js := written(t, rep)
	for name, out := range map[string]string{"text": text, "csv": csv} {
		if !strings.Contains(out, "return AC04 (closed account number) CHG-R-9 INR 25.00 2026-12-01 RTN-000417") {
			t.Errorf("%s report does not name the return and its code:\n%s", name, out)
		}
	}
	if !strings.Contains(js, `"return":true,"returnReason":"AC04"`) {
		t.Errorf("JSON report: %s", js)
	}
}

// A booked debit and its reversal on a customer's own account
// (camt.053.001.02, the reversal's AcctSvcrRef its own, on the entry).
func TestReconcileBookedAndReversedPair(t *testing.T) {
	_, rep := golden(t, "camt053_001_02_booked_reversed.xml", "", "10")
	wantBreaks(t, rep, "recorded_not_posted CHG-R-10")
	wantCounts(t, rep, 1, 1, 0)
}

// A batch entry credits three charges (several TxDtls in one Ntry); a
// batch of returns gives two of them back, each with its own code.
func TestReconcileBatchEntryAndBatchReturns(t *testing.T) {
	_, rep := golden(t, "camt054_001_02_batch.xml", "IN12 FEES 0000 0000 0001", "20", "21", "22")
	wantBreaks(t, rep, "recorded_not_posted CHG-R-21", "recorded_not_posted CHG-R-22")
	wantCounts(t, rep, 3, 2, 1)
	for i, code := range []string{"AM04 (insufficient funds)", "MD06 (refund request by end customer)"} {
		if !strings.Contains(rep.Breaks[i].Detail, "reason "+code) {
			t.Errorf("%s: %q", rep.Breaks[i].ChargeID, rep.Breaks[i].Detail)
		}
	}
}

// A reversal with a reference of its own pairs only a posting booked on
// or before it, of its amount: one of another amount is a partial
// reversal's mismatch, never cancelled.
func TestReconcileOwnReferenceReversalNeedsItsAmount(t *testing.T) {
	b, c := oneCharge(t, "CHG-R-", "30", (*books).done)
	p := b.post(c, 1, 2500, true)
	rv := p
	rv.Reversal, rv.Reference, rv.Amount.Minor = true, "RVSL-OWN", 1000
	b.postings = append(b.postings, rv)
	rep := b.run(t)
	if br := findBreak(rep, c.ID); br != nil && br.Kind == reconcile.RecordedNotPosted {
		t.Fatalf("a reversal of 10.00 cancelled a posting of 25.00: %+v", br)
	}
}

// A collection account's statement read as customers' statements (no
// --collection-account) is refused, naming the flag and the account;
// with it, it is read.
func TestReconcileCollectionStatementReadAsCustomers(t *testing.T) {
	for _, tc := range []struct{ file, account string }{
		{"camt053_001_08_reversal_own_ref.xml", "FEES-001"},
		{"camt054_001_08_return_ac04.xml", "FEES-001"},
		{"camt054_001_02_batch.xml", "IN12FEES000000000001"},
	} {
		_, err := statement.ReadFile(filepath.Join("testdata", tc.file), statement.Options{}, func(statement.Posting) error { return nil })
		var cs *statement.CollectionSideError
		if !errors.As(err, &cs) || cs.Account != tc.account || !strings.Contains(err.Error(), "--collection-account "+tc.account) {
			t.Fatalf("%s read without the collection account: %v", tc.file, err)
		}
	}
	// A customer's statement (its debits) is read as it was.
	if _, err := statement.ReadFile(filepath.Join("testdata", "camt053_001_02_booked_reversed.xml"), statement.Options{}, func(statement.Posting) error { return nil }); err != nil {
		t.Fatal(err)
	}
}

// A day of the period with no entry of ours at all, when records were
// DONE that day, is a warning (the statement lacks the day), not a
// recorded_not_posted break for each; a day with entries still reports
// the charges it lacks.
func TestReconcileEmptyDayIsAWarning(t *testing.T) {
	b := newBooks(t, memstore.New(), "CHG-E-")
	for _, n := range []string{"1", "2", "3"} {
		b.done(t, b.charge(n, 2500)) // day 1, 09:00
	}
	b.clock.Advance(24 * time.Hour)
	posted := b.charge("4", 2500)
	b.done(t, posted) // day 2
	lost := b.charge("5", 2500)
	b.done(t, lost) // day 2, never posted
	p := b.post(posted, 1, 2500, true)
	p.BookingDate = day.AddDate(0, 0, 1)
	b.postings = []statement.Posting{p}
	rep, err := reconcile.Run(t.Context(), reconcile.Options{Store: b.store, Fingerprints: b.fp,
		Period: statement.Period{From: day, To: day.AddDate(0, 0, 2)}, Now: b.clock.Now()}, b.postings_())
	if err != nil {
		t.Fatal(err)
	}
	wantBreaks(t, rep, "recorded_not_posted CHG-E-5")
	if len(rep.Notes) != 1 || !strings.Contains(rep.Notes[0], "warning: the statement has no entry of ours on 2026-12-01, and 3 record(s) were DONE that day") {
		t.Fatalf("notes %q", rep.Notes)
	}
}

// Across two days read together: a posting of day 1 and its reversal of
// day 2 under a reference of its own are paired; a reversal booked before
// the posting is not.
func TestReconcileOwnReferenceReversalAcrossDays(t *testing.T) {
	two := statement.Period{From: day, To: day.AddDate(0, 0, 2)}
	for _, tc := range []struct {
		name         string
		posted, rvsl time.Time
		wantReversed bool
	}{
		{"reversed the next day", day, day.AddDate(0, 0, 1), true},
		{"a reversal booked before the posting", day.AddDate(0, 0, 1), day, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, c := oneCharge(t, "CHG-X-", "1", (*books).done)
			p := b.post(c, 1, 2500, true)
			p.BookingDate = tc.posted
			rv := p
			rv.Reversal, rv.Reference, rv.BookingDate = true, "RVSL-OWN-1", tc.rvsl
			b.postings = []statement.Posting{p, rv}
			rep, err := reconcile.Run(t.Context(), reconcile.Options{Store: b.store, Fingerprints: b.fp, Period: two, Now: b.clock.Now()}, b.postings_())
			if err != nil {
				t.Fatal(err)
			}
			br := findBreak(rep, c.ID)
			if got := br != nil && br.Kind == reconcile.RecordedNotPosted && strings.Contains(br.Detail, "reversed the posting recorded"); got != tc.wantReversed {
				t.Fatalf("reversed: %v, want %v (%+v, notes %q)", got, tc.wantReversed, br, rep.Notes)
			}
		})
	}
}

// A return booked with no RtrInf — a DBIT entry on the collection account
// under the original EndToEndId, no RvslInd, the bank transaction code
// PMNT/IDDT/UPDD, the reason only in the narrative — is CHG-R-12's
// return, its code read from the narrative; CHG-R-11 stands.
func TestReconcileReturnByBankTransactionCode(t *testing.T) {
	_, rep := golden(t, "camt053_001_08_return_bktxcd_narrative.xml", "FEES-001", "11", "12")
	wantBreaks(t, rep, "recorded_not_posted CHG-R-12")
	wantCounts(t, rep, 2, 1, 1)
	br := rep.Breaks[0]
	if len(br.Posted) != 2 || !br.Posted[1].Return || br.Posted[1].ReturnReason != "AC04" || br.Posted[1].Minor != 2500 || br.Posted[1].Reference != "RTN-000777" {
		t.Fatalf("posted %+v", br.Posted)
	}
	if !strings.Contains(br.Detail, "returned, reason AC04 (closed account number)") {
		t.Fatalf("detail %q", br.Detail)
	}
}

// A bank's storno without our key (EndToEndId NOTPROVIDED) naming by its
// Refs/AcctSvcrRef the posting it reverses pairs with it: CHG-R-13 is
// recorded_not_posted, the storno shown under its key. A storno whose
// reference no posting read has is a warning with its amount and
// reference.
func TestReconcileStornoWithoutKey(t *testing.T) {
	_, rep := golden(t, "camt053_001_08_storno_notprovided.xml", "FEES-001", "13")
	wantBreaks(t, rep, "recorded_not_posted CHG-R-13")
	wantCounts(t, rep, 1, 1, 0)
	br := rep.Breaks[0]
	if len(br.Posted) != 2 || !br.Posted[1].Reversal || br.Posted[1].BankKey != "CHG-R-13" || br.Posted[1].Minor != 2500 || !strings.Contains(br.Detail, "reversed") {
		t.Fatalf("break %q, posted %+v", br.Detail, br.Posted)
	}
	if len(rep.Notes) != 1 || !strings.Contains(rep.Notes[0], "warning: a reversal of INR 30.00 booked 2026-12-01 without a bank key") || !strings.Contains(rep.Notes[0], "bank reference REF-CHG-R-99") {
		t.Fatalf("notes %q: want one warning naming the unpaired storno's amount and reference", rep.Notes)
	}
}
