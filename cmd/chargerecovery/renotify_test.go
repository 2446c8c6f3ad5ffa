package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/app/service/backend"
	"github.com/finedge/idempotent-consumer/app/service/operate"
	"github.com/finedge/idempotent-consumer/idempotency"
)

// noticeSink is a webhook that counts the deliveries of each notice, each
// taking a while (so that two runs at once overlap).
type noticeSink struct {
	mu    sync.Mutex
	count map[string]int // notification key → deliveries
	srv   *httptest.Server
}

func newNoticeSink(t *testing.T, latency time.Duration) *noticeSink {
	s := &noticeSink{count: map[string]int{}}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var nt charge.Notice
		if err := json.Unmarshal(body, &nt); err != nil {
			t.Errorf("notice %s: %v", body, err)
		}
		time.Sleep(latency)
		s.mu.Lock()
		s.count[nt.NotificationKey]++
		s.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *noticeSink) deliveries(key string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.count[key]
}

// missedNotices writes n DEBITED_NOTIFICATION_FAILED records, each keeping
// its notice, on a new embedded backend; it returns the env that names it,
// the backend and the charge ids.
func missedNotices(t *testing.T, sink *noticeSink, n int) (map[string]string, *backend.Backend, []string) {
	t.Helper()
	env := map[string]string{"IC_BACKEND": "embedded", "IC_DB": filepath.Join(t.TempDir(), "renotify.db"), "IC_LOG_LEVEL": "warn",
		"IC_NOTIFY": "webhook", "IC_NOTIFY_URL": sink.srv.URL + "/notices", "IC_OPERATOR": "olga"}
	b, err := backend.Open(t.Context(), *backendFor(env), 3*time.Second, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	g, err := idempotency.NewGuard(b.Store, idempotency.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for i := range n {
		c := charge.Charge{ID: fmt.Sprintf("CHG-RN-%03d", i), AccountID: fmt.Sprintf("0098765%05d", i),
			Amount: charge.Money{Minor: 1000 + int64(i), Currency: "INR"}, Type: charge.ChequeBookFee, DueDate: time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)}
		cl, err := g.Claim(t.Context(), c.ID, "fp-"+c.ID)
		if err != nil || cl.Outcome != idempotency.Acquired {
			t.Fatal(cl.Outcome, err)
		}
		notice, err := charge.NoticeOf(c, charge.DebitReceipt{Reference: fmt.Sprintf("CBS%010d", i)}, time.Now()).Marshal()
		if err != nil {
			t.Fatal(err)
		}
		if err := g.Complete(t.Context(), cl.Lease(), string(charge.DebitedNotificationFailed), string(notice)); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, c.ID)
	}
	return env, b, ids
}

// Two `renotify --all` at once (two operators after an incident) send each
// missed notice exactly once between them: each claims a notice in the
// store before sending it, and the other skips it; every record ends
// DEBITED with one audit line.
func TestTwoConcurrentRenotifyRunsSendEachNoticeOnce(t *testing.T) {
	const n = 20
	sink := newNoticeSink(t, 10*time.Millisecond)
	env, b, ids := missedNotices(t, sink, n)
	var wg sync.WaitGroup
	results := make([]result, 2)
	for i := range results {
		wg.Go(func() {
			results[i] = runCmd(t.Context(), env, "renotify", "--all", "--reason", fmt.Sprintf("INC-77: run %d", i), "--json")
		})
	}
	wg.Wait()
	sent := 0
	for i, r := range results {
		if r.code != 0 {
			t.Fatalf("run %d: exit %d\n%s\n%s", i, r.code, r.stdout, r.stderr)
		}
		var out struct{ Records []operate.Renotified }
		if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
			t.Fatalf("run %d: %v\n%s", i, err, r.stdout)
		}
		for _, rn := range out.Records {
			switch rn.Result {
			case "sent":
				sent++
			case "skipped":
			default:
				t.Errorf("run %d: %+v, want sent or skipped", i, rn)
			}
		}
	}
	for _, id := range ids {
		if d := sink.deliveries(charge.NotificationKey(id)); d != 1 {
			t.Errorf("%s: notice delivered %d times, want once", id, d)
		}
		rec, err := b.Store.Get(t.Context(), id, time.Now())
		if err != nil || rec.Status != string(charge.Debited) || len(rec.History) != 1 || !strings.Contains(rec.History[0], "INC-77") {
			t.Errorf("%s: %s %q %v, want DEBITED with one audit line", id, rec.Status, rec.History, err)
		}
	}
	if sent != n {
		t.Fatalf("the two runs report %d sent between them, want %d", sent, n)
	}
}

// A renotify that stopped after claiming a notice (a crash) holds it only
// for its lease: a run meanwhile skips it and sends nothing; a run after
// the lease takes the claim over and sends it, once.
func TestRenotifyAfterACrashedRunSendsOnceTheLeaseHasPassed(t *testing.T) {
	sink := newNoticeSink(t, 0)
	env, b, ids := missedNotices(t, sink, 1)
	id := ids[0]
	rec, err := b.Store.Get(t.Context(), id, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	notice, ok := charge.PendingNotice(rec.Status, rec.Detail)
	if !ok {
		t.Fatal("no notice kept")
	}
	// The crashed run: its claim, as renotify makes it, never finished.
	const lease = 1500 * time.Millisecond
	crashed, err := idempotency.NewGuard(b.Store, idempotency.Options{Lease: lease, SkewMargin: -1})
	if err != nil {
		t.Fatal(err)
	}
	claimedAt := time.Now()
	if cl, err := crashed.Claim(t.Context(), operate.NoticeClaimKey(notice), rec.Token); err != nil || cl.Outcome != idempotency.Acquired {
		t.Fatalf("the crashed run's claim: %v %v", cl.Outcome, err)
	}
	args := []string{"renotify", "--all", "--reason", "INC-78", "--lease", "2s", "--notify-timeout", "500ms", "--skew-margin", "0s"}
	r := runCmd(t.Context(), env, args...)
	if r.code != 0 || !strings.Contains(r.stdout, "0 sent") || !strings.Contains(r.stdout, "1 skipped") || !strings.Contains(r.stdout, "another renotify is sending it") {
		t.Fatalf("renotify while the crashed run's claim is live: %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	if time.Since(claimedAt) < lease && sink.deliveries(notice.NotificationKey) != 0 {
		t.Fatal("sent while another run held the claim")
	}
	time.Sleep(time.Until(claimedAt.Add(lease + 50*time.Millisecond)))
	r = runCmd(t.Context(), env, args...)
	if r.code != 0 || !strings.Contains(r.stdout, "1 sent") {
		t.Fatalf("renotify after the lease: %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	if d := sink.deliveries(notice.NotificationKey); d != 1 {
		t.Fatalf("notice delivered %d times, want once", d)
	}
	if rec, err := b.Store.Get(t.Context(), id, time.Now()); err != nil || rec.Status != string(charge.Debited) {
		t.Fatalf("record %s %v, want DEBITED", rec.Status, err)
	}
	if r := runCmd(t.Context(), env, args...); r.code != 0 || !strings.Contains(r.stdout, "0 record(s)") {
		t.Fatalf("a third run: %d %s, want nothing left", r.code, r.stdout)
	}
}

// A run that sent a notice and stopped before it recorded the send leaves
// the claim DONE: a later run records the record DEBITED without sending
// the notice again.
func TestRenotifyAfterARunThatSentButDidNotRecordSendsNothing(t *testing.T) {
	sink := newNoticeSink(t, 0)
	env, b, ids := missedNotices(t, sink, 1)
	rec, err := b.Store.Get(t.Context(), ids[0], time.Now())
	if err != nil {
		t.Fatal(err)
	}
	notice, _ := charge.PendingNotice(rec.Status, rec.Detail)
	g, err := idempotency.NewGuard(b.Store, idempotency.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cl, err := g.Claim(t.Context(), operate.NoticeClaimKey(notice), rec.Token)
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Complete(t.Context(), cl.Lease(), operate.SentStatus, notice.Reference); err != nil {
		t.Fatal(err)
	}
	r := runCmd(t.Context(), env, "renotify", "--all", "--reason", "INC-79")
	if r.code != 0 || !strings.Contains(r.stdout, "0 sent") || !strings.Contains(r.stdout, "recorded DEBITED now") {
		t.Fatalf("renotify: %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	if d := sink.deliveries(notice.NotificationKey); d != 0 {
		t.Fatalf("notice delivered %d times, want none (it was sent before)", d)
	}
	if rec, err := b.Store.Get(t.Context(), ids[0], time.Now()); err != nil || rec.Status != string(charge.Debited) ||
		len(rec.History) != 1 || !strings.Contains(rec.History[0], "sent earlier by another renotify") {
		t.Fatalf("record %s %q %v, want DEBITED with a line saying it was sent earlier", rec.Status, rec.History, err)
	}
}

// ATTACK (surface 4): renotify's claims live in the charges' own key space.
// The key renotify/CHARGE_ID:pre-debit is itself a valid charge id (the
// wire pattern allows '/' and ':'), and every tool that reads the store
// takes the claim for a charge:
//   - a renotify run that stopped after claiming leaves an IN_PROGRESS
//     record past its lease, which `stuck` lists as a charge stuck mid-debit
//     ("Each is reclaimed by its next delivery; if the message is gone, see
//     the DLQ") and serve's stuck-claims gauge counts (its alert fires): an
//     operator chases a charge that does not exist;
//   - a charge event whose id is renotify/CHG-RN-000:pre-debit parses as
//     valid, and once CHG-RN-000's notice was resent its claim meets the
//     notice's DONE record with another fingerprint: a Conflict, so a real
//     charge is dead-lettered as "charge id reused with another payload"
//     and never collected (and the other way round, renotify skips the
//     notice if that charge came first).
func TestReview35RenotifyClaimsAreTakenForCharges(t *testing.T) {
	sink := newNoticeSink(t, 0)
	env, b, ids := missedNotices(t, sink, 2)

	// CHG-RN-001: a renotify that stopped right after claiming its notice.
	rec, err := b.Store.Get(t.Context(), ids[1], time.Now())
	if err != nil {
		t.Fatal(err)
	}
	notice, _ := charge.PendingNotice(rec.Status, rec.Detail)
	crashed, err := idempotency.NewGuard(b.Store, idempotency.Options{Lease: 100 * time.Millisecond, SkewMargin: -1})
	if err != nil {
		t.Fatal(err)
	}
	if cl, err := crashed.Claim(t.Context(), operate.NoticeClaimKey(notice), rec.Token); err != nil || cl.Outcome != idempotency.Acquired {
		t.Fatalf("the crashed run's claim: %v %v", cl.Outcome, err)
	}
	time.Sleep(300 * time.Millisecond) // past its lease
	var problems []string
	if r := runCmd(t.Context(), env, "stuck"); strings.Contains(r.stdout, "renotify/") {
		problems = append(problems, "stuck lists a renotify claim as a charge stuck mid-debit:\n"+r.stdout)
	}

	// CHG-RN-000: its notice resent (the claim DONE SENT), then a charge
	// whose id is that claim's key.
	if r := runCmd(t.Context(), env, "renotify", ids[0], "--reason", "INC-35"); r.code != 0 || !strings.Contains(r.stdout, "1 sent") {
		t.Fatalf("renotify %s: %d\n%s\n%s", ids[0], r.code, r.stdout, r.stderr)
	}
	twin := charge.Charge{ID: "renotify/" + charge.NotificationKey(ids[0]), AccountID: "009876500077",
		Amount: charge.Money{Minor: 4200, Currency: "INR"}, Type: charge.ChequeBookFee, DueDate: time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)}
	body, err := charge.MarshalEvent(twin)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := charge.ParseEvent(body); err != nil {
		t.Fatalf("the twin charge does not parse (the collision needs a valid id): %v", err)
	}
	g, err := idempotency.NewGuard(b.Store, idempotency.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if cl, err := g.Claim(t.Context(), twin.ID, "fp-of-the-twin-charge"); err != nil || cl.Outcome != idempotency.Acquired {
		problems = append(problems, "the first delivery of charge "+twin.ID+" claims as "+cl.Outcome.String()+
			" (record "+string(cl.Record.State)+" "+cl.Record.Status+"): a real charge is refused because a notice's claim holds its id")
	}
	if len(problems) > 0 {
		t.Fatal(strings.Join(problems, "\n"))
	}
}
