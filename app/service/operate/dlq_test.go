package operate

import (
	"bytes"
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
	"github.com/finedge/idempotent-consumer/memqueue"
	"github.com/finedge/idempotent-consumer/memstore"
	"github.com/finedge/idempotent-consumer/queue"
)

// An entry over the size limit is shown as one: its size, that it cannot
// be redriven, and the command that removes it, by its id.
func TestAnEntryOverTheSizeLimitIsShownWithItsSizeAndTheWayOut(t *testing.T) {
	const size = queue.MaxMessageBytes + 77
	e := queue.DLQEntry{ID: "4711", Reason: queue.TooLargeReason(size), TooLarge: true, Size: size, At: time.Now()}
	v := View(e, time.Now(), true)
	if v.Size != size || v.Code != string(queue.CodeTooLarge) || v.Body != "" {
		t.Fatalf("view %+v: want its size, code too_large and no body", v)
	}
	for _, want := range []string{strconv.Itoa(size) + " bytes", "cannot be redriven", "chargerecovery dlq purge 4711"} {
		if !strings.Contains(v.Unreadable, want) {
			t.Errorf("view says %q, want it to say %q", v.Unreadable, want)
		}
	}
}

func deadLettered(t *testing.T, ids ...string) *memqueue.Queue {
	t.Helper()
	q := memqueue.New(memqueue.Options{})
	for _, id := range ids {
		if _, err := q.Send(t.Context(), []byte(`{"chargeId":"`+id+`"}`), nil); err != nil {
			t.Fatal(err)
		}
		msgs, err := q.Receive(t.Context(), 1)
		if err != nil || len(msgs) != 1 {
			t.Fatalf("receive: %v %d", err, len(msgs))
		}
		if err := q.DeadLetter(t.Context(), msgs[0], queue.Reason{Code: "debit_failed", Detail: "declined"}); err != nil {
			t.Fatal(err)
		}
	}
	return q
}

// TestRedriveNamesTheIDsThatMatchedNothing: redrive --charge-id of ids not
// on the DLQ used to say "moved 0" and exit 0; it moves what matches and
// names the rest in its error (exit 1).
func TestRedriveNamesTheIDsThatMatchedNothing(t *testing.T) {
	for _, tc := range []struct {
		name      string
		ids       []string
		dry       bool
		max       int
		wantMoved int
		wantErr   string // "" none
	}{
		{"none match", []string{"CHG-NOPE"}, false, 0, 0, "CHG-NOPE"},
		{"partial", []string{"CHG-1", "CHG-NOPE", "CHG-NOPE2"}, false, 0, 1, "CHG-NOPE, CHG-NOPE2"},
		{"all match", []string{"CHG-1", "CHG-2"}, false, 0, 2, ""},
		{"dry run", []string{"CHG-NOPE"}, true, 0, 0, "CHG-NOPE"},
		{"max reached: the rest not looked at", []string{"CHG-1", "CHG-NOPE"}, false, 1, 1, ""},
		{"no ids: every entry", nil, false, 0, 2, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := deadLettered(t, "CHG-1", "CHG-2")
			var out, audit bytes.Buffer
			now := time.Now().Add(time.Second)
			o := RedriveRun{RedriveOptions: RedriveAt(now, idempotency.DefaultRetention), ChargeIDs: tc.ids, Out: &out, Audit: &audit, Operator: "t"}
			o.DryRun, o.Max = tc.dry, tc.max
			err := Redrive(t.Context(), q, o)
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), "no DLQ entry for charge id(s) "+tc.wantErr+":")) {
				t.Fatalf("err = %v, want one naming %q", err, tc.wantErr)
			}
			d, _ := q.Depth(t.Context())
			if moved := 2 - d.DLQ; !tc.dry && moved != tc.wantMoved {
				t.Errorf("moved %d, want %d (%s)", moved, tc.wantMoved, out.String())
			}
		})
	}
}

// guarded is a store in memory and a guard over it.
func guarded(t *testing.T) (*memstore.Store, *idempotency.Guard) {
	t.Helper()
	store := memstore.New()
	g, err := idempotency.NewGuard(store, idempotency.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return store, g
}

// TestRenotifyNamesTheIDsWithNoRecord: renotify CHG-NOPE used to stop at
// the first id without a record; the others are notified, and the error
// names the ids with none.
func TestRenotifyNamesTheIDsWithNoRecord(t *testing.T) {
	ctx := t.Context()
	store, g := guarded(t)
	cl, err := g.Claim(ctx, "CHG-DONE", "fp")
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Complete(ctx, cl.Lease(), "DEBITED", "CBS1"); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	recs, err := Pending(ctx, store, []string{"CHG-NOPE", "CHG-DONE"}, false, 10, now)
	if err != nil || len(recs) != 2 {
		t.Fatalf("Pending: %v %d", err, len(recs))
	}
	rn, err := NewRenotifier(store, nil, RenotifierOptions{Lease: time.Minute, Retention: time.Hour, Timeout: time.Second, Channel: "log"})
	if err != nil {
		t.Fatal(err)
	}
	var out, audit bytes.Buffer
	err = rn.Renotify(ctx, recs, RenotifyRun{DryRun: true, Now: now, Out: &out, Audit: &audit})
	if err == nil || !strings.Contains(err.Error(), "no idempotency record for CHG-NOPE") {
		t.Fatalf("err = %v, want one naming CHG-NOPE", err)
	}
	if !strings.Contains(out.String(), "not_found") || !strings.Contains(out.String(), "skipped   CHG-DONE") || !strings.Contains(out.String(), "1 not found") {
		t.Errorf("report:\n%s", out.String())
	}
}

// TestReopenRefusesADeclineUnderTheSameKey: the rule the command line and
// the console share.
func TestReopenRefusesADeclineUnderTheSameKey(t *testing.T) {
	ctx := t.Context()
	store, g := guarded(t)
	fail := func(id, detail string) {
		cl, err := g.Claim(ctx, id, "fp")
		if err != nil {
			t.Fatal(err)
		}
		if err := g.Fail(ctx, cl.Lease(), "FAILED", detail); err != nil {
			t.Fatal(err)
		}
	}
	fail("CHG-DECL", "debit declined: INSUFFICIENT_FUNDS: no funds")
	fail("CHG-OTHER", "invalid charge: bad currency")
	if !charge.DeclinedDetail("debit declined: INSUFFICIENT_FUNDS: no funds") {
		t.Fatal("the test's detail is not a decline")
	}
	if rec, err := Reopen(ctx, g, "CHG-DECL", "funds arrived", false, "t"); !errors.Is(err, ErrDeclinedSameKey) || rec.Key != "CHG-DECL" {
		t.Fatalf("plain reopen of a decline: %v", err)
	}
	if rec, _ := g.Get(ctx, "CHG-DECL"); rec.State != driver.StateFailed {
		t.Fatalf("the refused reopen changed the record: %+v", rec)
	}
	if _, err := Reopen(ctx, g, "CHG-OTHER", "fixed", false, "t"); err != nil {
		t.Fatalf("plain reopen of another failure: %v", err)
	}
	if rec, err := Reopen(ctx, g, "CHG-DECL", "funds arrived", true, "t"); err != nil || rec.Generation != 2 {
		t.Fatalf("reopen --new-attempt of a decline: %+v %v", rec, err)
	}
	var out, audit bytes.Buffer
	fail("CHG-DECL2", "debit declined: ACCOUNT_CLOSED")
	err := ReopenCharge(context.Background(), store, ReopenOptions{ID: "CHG-DECL2", Reason: "why", Retention: time.Hour * 48, Out: &out, Audit: &audit})
	if err == nil || !strings.Contains(err.Error(), `use: chargerecovery reopen --new-attempt --reason "why" CHG-DECL2`) {
		t.Fatalf("ReopenCharge: %v", err)
	}
	if err := ReopenCharge(context.Background(), store, ReopenOptions{ID: "CHG-DECL2", Reason: "why", SameKey: true, Retention: time.Hour * 48, Out: &out, Audit: &audit}); err != nil {
		t.Fatalf("--same-key: %v", err)
	}
	if err := ReopenCharge(context.Background(), store, ReopenOptions{ID: "CHG-NOPE", Reason: "why", Retention: time.Hour * 48, Out: &out, Audit: &audit}); err == nil || !strings.Contains(err.Error(), "no idempotency record for CHG-NOPE") {
		t.Fatalf("reopen CHG-NOPE: %v", err)
	}
}

// dlq list's detail column is cut before a word, never inside a masked
// account (issue 54 item 7: "account ********78…" read as another mask).
func TestDLQListCutsTheDetailBeforeAWord(t *testing.T) {
	long := "debit declined: INSUFFICIENT_FUNDS: declined by core banking: account ********7801"
	got := clipDetail(long)
	if strings.Contains(got, "********78") || !strings.HasSuffix(got, " …") || len(got) > 84 {
		t.Fatalf("clipDetail(%q) = %q", long, got)
	}
	if got != "debit declined: INSUFFICIENT_FUNDS: declined by core banking: account …" {
		t.Fatalf("clipDetail = %q", got)
	}
	if short := "debit declined: ACCOUNT_CLOSED"; clipDetail(short) != short {
		t.Fatalf("a short detail is cut: %q", clipDetail(short))
	}
	// One long word: cut inside it, as before.
	word := strings.Repeat("x", 100)
	if got := clipDetail(word); got != strings.Repeat("x", 80)+" …" {
		t.Fatalf("clipDetail(word) = %q", got)
	}
}
