package webhook_test

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/app/webhook"
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
