package webhook_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/app/webhook"
	"github.com/finedge/idempotent-consumer/idemhttp"
	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
	"github.com/finedge/idempotent-consumer/idempotency/storetest"
	"github.com/finedge/idempotent-consumer/memstore"
)

// bank posts every debit once per key.
type bank struct {
	mu    sync.Mutex
	posts map[string]int
}

func (b *bank) Debit(_ context.Context, req charge.DebitRequest) (charge.DebitReceipt, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.posts == nil {
		b.posts = map[string]int{}
	}
	b.posts[req.IdempotencyKey]++
	return charge.DebitReceipt{Reference: "TXN-" + req.IdempotencyKey}, nil
}

// lostWaits fails every WAITING write while on: the process died between
// sending the advance notice and recording it.
type lostWaits struct {
	driver.Store
	mu sync.Mutex
	on bool
}

func (s *lostWaits) Finish(ctx context.Context, f driver.FinishRequest) error {
	s.mu.Lock()
	on := s.on
	s.mu.Unlock()
	if on && f.State == driver.StateWaiting {
		return driver.Unavailable("finish", errors.New("connection reset"))
	}
	return s.Store.Finish(ctx, f)
}

// A re-send of the advance notice (after a crash between sending it and
// recording it) must be the same request under its Idempotency-Key: a
// receiver that implements the Idempotency-Key draft — this module's own
// idemhttp — answers another body under a key it holds with 422, and
// the charge then waits for a notice that can never be "sent": no debit,
// ever (until the receiver forgets the key and the customer gets a second
// notice with another date).
func TestAnAdvanceNoticeSentAgainIsTheSameRequest(t *testing.T) {
	rg, err := idempotency.NewGuard(memstore.New(), idempotency.Options{})
	if err != nil {
		t.Fatal(err)
	}
	// One sender (this module's webhook channel): one key space, said so.
	mw, err := idemhttp.Middleware(idemhttp.Options{Guard: rg, Unscoped: true})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var shown []charge.AdvanceNotice
	srv := httptest.NewServer(mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var n charge.AdvanceNotice
		b, _ := io.ReadAll(r.Body)
		_ = json.Unmarshal(b, &n)
		mu.Lock()
		shown = append(shown, n)
		mu.Unlock()
		w.WriteHeader(http.StatusAccepted)
	})))
	defer srv.Close()
	channel, err := webhook.New(webhook.Options{URL: srv.URL + "/notices"})
	if err != nil {
		t.Fatal(err)
	}

	const lead, lease = 24 * time.Hour, time.Minute
	clock := storetest.NewClock(storetest.Epoch)
	store := &lostWaits{Store: memstore.New(), on: true}
	g, err := idempotency.NewGuard(store, idempotency.Options{Lease: lease, Clock: clock, SkewMargin: -1})
	if err != nil {
		t.Fatal(err)
	}
	b := &bank{}
	svc, err := charge.NewService(charge.Options{Guard: g, Debiter: b, Notifier: channel, NoticeLead: lead,
		FinishTimeout: time.Second, FinishAttempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	c := fee()
	ctx := t.Context()
	if res := svc.Process(ctx, c, nil); res.Outcome != charge.RetryLater {
		t.Fatalf("first delivery: %+v, want retry_later (the WAITING record lost)", res)
	}
	store.mu.Lock()
	store.on = false
	store.mu.Unlock()

	// The next delivery, after the lease: the notice is sent again.
	clock.Advance(lease)
	res := svc.Process(ctx, c, nil)
	if res.Outcome != charge.Waiting {
		t.Fatalf("the delivery after the crash: %s %q; want waiting (the receiver recognised the notice)", res.Outcome, res.Reason)
	}
	clock.Advance(lead)
	res = svc.Process(ctx, c, nil)
	if res.Outcome != charge.Processed {
		t.Fatalf("after the lead: %s %q; want processed", res.Outcome, res.Reason)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(shown) != 1 || b.posts[c.ID] != 1 {
		t.Fatalf("the customer was shown %d notices, %d debits; want one of each", len(shown), b.posts[c.ID])
	}
	// The debit still waited the lead from the last send.
	if r, err := g.Get(ctx, c.ID); err != nil || r.State != driver.StateDone {
		t.Fatalf("record %+v %v", r, err)
	}
}

// A refused advance notice's answer is kept in the result's reason (the
// decision's log line): it must not carry the charge's full account,
// whatever its shape (an account of letters and digits has no run of
// digits long enough for the digit rule), as the notice after the debit
// does not.
func TestARefusedAdvanceNoticeLogsNoFullAccount(t *testing.T) {
	const account = "AB12CD34EF56GH78"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusUnprocessableEntity)
		_, _ = io.WriteString(w, `{"error":"no customer holds account `+account+`"}`)
	}))
	defer srv.Close()
	channel, err := webhook.New(webhook.Options{URL: srv.URL + "/notices"})
	if err != nil {
		t.Fatal(err)
	}
	g, err := idempotency.NewGuard(memstore.New(), idempotency.Options{})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := charge.NewService(charge.Options{Guard: g, Debiter: &bank{}, Notifier: channel, NoticeLead: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	c := fee()
	c.AccountID = account
	res := svc.Process(t.Context(), c, nil)
	if res.Outcome != charge.RetryLater {
		t.Fatalf("%+v, want retry_later", res)
	}
	for what, s := range map[string]string{"reason": res.Reason, "error": res.Err.Error()} {
		if strings.Contains(s, account) || strings.Contains(s, account[:12]) {
			t.Errorf("the %s holds the full account: %s", what, s)
		}
	}
	// And so does the notice after a debit (the reference behaviour).
	perr := channel.NotifyPreDebit(t.Context(), c, charge.DebitReceipt{Reference: "CBS1"})
	if perr == nil || strings.Contains(perr.Error(), account) {
		t.Fatalf("the notice after the debit: %v", perr)
	}
}
