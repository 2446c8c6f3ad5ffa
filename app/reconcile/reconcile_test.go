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
