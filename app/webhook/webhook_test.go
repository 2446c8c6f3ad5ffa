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

var due = time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)

func fee() charge.Charge {
	return charge.Charge{ID: "CHG/2026/11/7", AccountID: "001234567890", Amount: charge.Money{Minor: 2500, Currency: "INR"},
		Type: charge.LockerRent, DueDate: due}
}

func TestTheNoticeIsPostedWithItsKeyAndNoFullAccount(t *testing.T) {
	var got charge.Notice
	var key, ctype string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key, ctype = r.Header.Get("Idempotency-Key"), r.Header.Get("Content-Type")
		b, _ := io.ReadAll(r.Body)
		if strings.Contains(string(b), "001234567890") {
			t.Errorf("the body holds the full account: %s", b)
		}
		_ = json.Unmarshal(b, &got)
		w.WriteHeader(http.StatusAccepted)
	}))
	defer srv.Close()
	n, err := webhook.New(webhook.Options{URL: srv.URL + "/notices", Now: func() time.Time { return due.Add(time.Hour) }})
	if err != nil {
		t.Fatal(err)
	}
	if err := n.NotifyPreDebit(t.Context(), fee(), charge.DebitReceipt{Reference: "CBS0000000001"}); err != nil {
		t.Fatal(err)
	}
	want := charge.Notice{Type: "PRE_DEBIT", NotificationKey: "CHG/2026/11/7:pre-debit", ChargeID: "CHG/2026/11/7", Account: "********7890",
		Amount: charge.NoticeAmt{Minor: 2500, Currency: "INR"}, ChargeType: charge.LockerRent, DueDate: "2026-11-30",
		Reference: "CBS0000000001", DebitedAt: due.Add(time.Hour)}
	if got != want || key != "CHG/2026/11/7:pre-debit" || ctype != "application/json" {
		t.Fatalf("posted %+v with key %q (%s), want %+v", got, key, ctype, want)
	}
}

// Only a 2xx is sent: every other answer and no answer is a failed
// notification, its text clipped, masked and free of control characters.
func TestEveryOtherAnswerIsAFailedNotification(t *testing.T) {
	for name, h := range map[string]http.HandlerFunc{
		"500": func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(500) },
		"409": func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(409) },
		"302": func(w http.ResponseWriter, _ *http.Request) {
			http.Redirect(w, &http.Request{}, "/elsewhere", http.StatusFound)
		},
		"timeout": func(w http.ResponseWriter, r *http.Request) { _, _ = io.Copy(io.Discard, r.Body); <-r.Context().Done() },
		"drop":    func(w http.ResponseWriter, _ *http.Request) { c, _, _ := w.(http.Hijacker).Hijack(); c.Close() },
		"400 text": func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(400)
			io.WriteString(w, "bad account 001234567890 \x1b[31m"+strings.Repeat("x", 5000))
		},
	} {
		t.Run(name, func(t *testing.T) {
			srv := httptest.NewServer(h)
			defer srv.Close()
			n, err := webhook.New(webhook.Options{URL: srv.URL, Timeout: 200 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			err = n.NotifyPreDebit(t.Context(), fee(), charge.DebitReceipt{Reference: "CBS1"})
			var we *webhook.Error
			if !errors.As(err, &we) {
				t.Fatalf("err = %v, want a *webhook.Error", err)
			}
			if msg := err.Error(); strings.Contains(msg, "001234567890") || strings.Contains(msg, "\x1b") || len(msg) > 400 {
				t.Fatalf("error text %q: unmasked, unclipped or with control characters", msg)
			}
		})
	}
}

func TestABadURLIsRefused(t *testing.T) {
	for _, u := range []string{"", "ftp://h/x", "https://", "https://user:s3cret@h/x"} {
		if _, err := webhook.New(webhook.Options{URL: u}); err == nil || strings.Contains(err.Error(), "s3cret") {
			t.Errorf("URL %q: %v, want a refusal that does not print the secret", u, err)
		}
	}
}

// The advance notice is posted before the debit with its own key, so that
// the receiver drops a re-send after a crash; a failure is an error (the
// charge is then not debited), its text masked.
func TestTheAdvanceNoticeIsPostedWithItsOwnKey(t *testing.T) {
	var bodies []charge.AdvanceNotice
	var keys []string
	status := http.StatusAccepted
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if strings.Contains(string(b), "001234567890") {
			t.Errorf("the body holds the full account: %s", b)
		}
		var n charge.AdvanceNotice
		_ = json.Unmarshal(b, &n)
		bodies, keys = append(bodies, n), append(keys, r.Header.Get("Idempotency-Key"))
		w.WriteHeader(status)
		io.WriteString(w, "account 001234567890 unknown")
	}))
	defer srv.Close()
	n, err := webhook.New(webhook.Options{URL: srv.URL + "/notices"})
	if err != nil {
		t.Fatal(err)
	}
	notice := charge.AdvanceNoticeOf(fee(), due.Add(33*time.Hour))
	for range 2 { // sent, then sent again after a crash
		if err := n.NotifyAdvance(t.Context(), notice); err != nil {
			t.Fatal(err)
		}
	}
	if len(bodies) != 2 || bodies[0] != notice || keys[0] != "CHG/2026/11/7:advance-notice" || keys[1] != keys[0] ||
		bodies[0].Text != "₹25.00 will be debited on or after 2026-12-01 09:00 UTC" {
		t.Fatalf("posted %+v with keys %q, want %+v twice under CHG/2026/11/7:advance-notice", bodies, keys, notice)
	}
	status = http.StatusServiceUnavailable
	err = n.NotifyAdvance(t.Context(), notice)
	var we *webhook.Error
	if !errors.As(err, &we) || we.Status != 503 || strings.Contains(err.Error(), "001234567890") {
		t.Fatalf("err = %v, want a *webhook.Error with 503, the account masked", err)
	}
}

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
