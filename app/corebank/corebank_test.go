package corebank_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/app/corebank"
	"github.com/finedge/idempotent-consumer/app/corebanksim"
)

func serve(t *testing.T, f corebanksim.Faults, timeout time.Duration) (*corebanksim.Ledger, *corebank.Client, string) {
	t.Helper()
	l := corebanksim.NewLedger(f)
	srv := httptest.NewServer(corebanksim.Handler(l))
	t.Cleanup(srv.Close)
	c, err := corebank.NewClient(srv.URL, corebank.ClientOptions{Timeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	return l, c, srv.URL
}

// adminFor is the simulator's admin API (ledger, faults, reset) at url.
func adminFor(t *testing.T, url string) *corebanksim.Admin {
	t.Helper()
	a, err := corebanksim.NewAdmin(url, nil)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func req(key, account string, minor int64) charge.DebitRequest {
	return charge.DebitRequest{IdempotencyKey: key, AccountID: account, Amount: charge.Money{Minor: minor, Currency: "INR"}, ChargeType: charge.LockerRent}
}

func TestSameKeyAndBodyReplaysWithoutASecondPosting(t *testing.T) {
	l, c, url := serve(t, corebanksim.Faults{}, time.Second)
	admin := adminFor(t, url)
	first, err := c.Debit(t.Context(), req("CHG-1", "001234567890", 50000))
	if err != nil {
		t.Fatal(err)
	}
	again, err := c.Debit(t.Context(), req("CHG-1", "001234567890", 50000))
	if err != nil {
		t.Fatal(err)
	}
	if first.Reference == "" || again.Reference != first.Reference {
		t.Fatalf("references %q and %q, want the same one", first.Reference, again.Reference)
	}
	entries, err := admin.Ledger(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].IdempotencyKey != "CHG-1" || entries[0].AmountMinor != 50000 || entries[0].AccountID != "001234567890" {
		t.Fatalf("ledger = %+v", entries)
	}
	if l.Calls("CHG-1") != 2 {
		t.Fatalf("calls = %d", l.Calls("CHG-1"))
	}
}

func TestReplayAnswers200WithTheReplayHeader(t *testing.T) {
	_, _, url := serve(t, corebanksim.Faults{}, time.Second)
	post := func() *http.Response {
		r, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, url+"/v1/debits",
			strings.NewReader(`{"accountId":"001234567890","amount":{"minor":100,"currency":"INR"},"chargeType":"SMS_ALERT_FEE"}`))
		r.Header.Set(corebank.IdempotencyHeader, "K")
		resp, err := http.DefaultClient.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	if r := post(); r.StatusCode != http.StatusCreated || r.Header.Get(corebank.ReplayedHeader) != "" {
		t.Fatalf("first: %d %v", r.StatusCode, r.Header)
	}
	if r := post(); r.StatusCode != http.StatusOK || r.Header.Get(corebank.ReplayedHeader) != "true" {
		t.Fatalf("replay: %d %v", r.StatusCode, r.Header)
	}
}

func TestSameKeyDifferentBodyIsRejectedNotDeclined(t *testing.T) {
	l, c, _ := serve(t, corebanksim.Faults{}, time.Second)
	if _, err := c.Debit(t.Context(), req("CHG-2", "001234567890", 100)); err != nil {
		t.Fatal(err)
	}
	_, err := c.Debit(t.Context(), req("CHG-2", "001234567890", 999))
	// Not a decline of the charge: our request is wrong. Never final; alert.
	if charge.Classify(err) != charge.ClassRetryable || !charge.IsRejected(err) || !strings.Contains(err.Error(), "422") {
		t.Fatalf("err = %v, want a rejected (not final) 422", err)
	}
	if len(l.Entries()) != 1 {
		t.Fatal("the reused key posted again")
	}
}

func TestDeclineIsPermanentWithItsCode(t *testing.T) {
	_, c, _ := serve(t, corebanksim.Faults{DeclineAccounts: map[string]string{"007777777777": "ACCOUNT_CLOSED"}}, time.Second)
	_, err := c.Debit(t.Context(), req("CHG-3", "007777777777", 100))
	var d *charge.DeclineError
	if !errors.As(err, &d) || d.Code != "ACCOUNT_CLOSED" || charge.Classify(err) != charge.ClassPermanent {
		t.Fatalf("err = %v, want DeclineError ACCOUNT_CLOSED", err)
	}
}

func TestOutagesAndTimeoutsAreTransient(t *testing.T) {
	tests := []struct {
		name   string
		faults corebanksim.Faults
	}{
		{"503", corebanksim.Faults{TransientRate: 1}},
		{"timeout", corebanksim.Faults{TimeoutRate: 1}},
		{"lost response", corebanksim.Faults{TransientAfterPostRate: 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, c, _ := serve(t, tt.faults, 100*time.Millisecond)
			_, err := c.Debit(t.Context(), req("CHG-4", "001234567890", 100))
			if err == nil || charge.Classify(err) != charge.ClassRetryable {
				t.Fatalf("err = %v, want a retryable error", err)
			}
			l.SetFaults(corebanksim.Faults{})
			if _, err := c.Debit(t.Context(), req("CHG-4", "001234567890", 100)); err != nil {
				t.Fatalf("retry after the fault: %v", err)
			}
			if n := len(l.Entries()); n != 1 {
				t.Fatalf("%d postings after fault + retry, want 1", n)
			}
		})
	}
}

func TestStatusClassification(t *testing.T) {
	for status, want := range map[int]charge.BankFailure{
		http.StatusTooManyRequests: charge.BankUnavailable, http.StatusRequestTimeout: charge.BankUnavailable,
		http.StatusConflict: charge.BankUnavailable, http.StatusBadGateway: charge.BankUnavailable,
		http.StatusBadRequest: charge.BankRejected, http.StatusUnauthorized: charge.BankRejected,
		http.StatusForbidden: charge.BankRejected, http.StatusNotFound: charge.BankRejected,
		http.StatusMovedPermanently: charge.BankRejected,
	} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Location", "/v1/debits")
			w.WriteHeader(status)
		}))
		c, _ := corebank.NewClient(srv.URL, corebank.ClientOptions{})
		_, err := c.Debit(context.Background(), req("K", "001234567890", 1))
		srv.Close()
		var be *charge.BankError
		if !errors.As(err, &be) || be.Kind != want || be.Status != status || charge.Classify(err) != charge.ClassRetryable || !charge.MayHavePosted(err) {
			t.Errorf("HTTP %d: err %v, want a %v BankError, retryable", status, err, want)
		}
	}
}

func TestMissingIdempotencyKeyIs400(t *testing.T) {
	_, _, url := serve(t, corebanksim.Faults{}, time.Second)
	resp, err := http.Post(url+"/v1/debits", "application/json", strings.NewReader(`{"accountId":"1","amount":{"minor":1,"currency":"INR"}}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("status %d, want 400", resp.StatusCode)
	}
}

func TestFaultsAndResetOverHTTP(t *testing.T) {
	l, c, url := serve(t, corebanksim.Faults{}, time.Second)
	admin := adminFor(t, url)
	if err := admin.SetFaults(t.Context(), corebanksim.FaultsBody{TransientRate: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Debit(t.Context(), req("CHG-5", "001234567890", 1)); err == nil {
		t.Fatal("fault not applied")
	}
	if err := admin.SetFaults(t.Context(), corebanksim.FaultsBody{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Debit(t.Context(), req("CHG-5", "001234567890", 1)); err != nil {
		t.Fatal(err)
	}
	if err := admin.Reset(t.Context()); err != nil {
		t.Fatal(err)
	}
	if len(l.Entries()) != 0 {
		t.Fatal("reset kept postings")
	}
}

func TestNewClientRefusesABadURL(t *testing.T) {
	for _, u := range []string{"", "localhost:8080", "ftp://x", "http://"} {
		if _, err := corebank.NewClient(u, corebank.ClientOptions{}); err == nil {
			t.Errorf("NewClient(%q) accepted", u)
		}
	}
}

func TestDuplicateRequestsCountOnlyRequestsAfterAConfirmedDebit(t *testing.T) {
	l, c, url := serve(t, corebanksim.Faults{}, time.Second)
	admin := adminFor(t, url)
	l.SetFaults(corebanksim.Faults{TransientAfterPostRate: 1}) // posts, answers 503
	if _, err := c.Debit(t.Context(), req("CHG-6", "001234567890", 100)); err == nil {
		t.Fatal("want the lost response")
	}
	l.SetFaults(corebanksim.Faults{})
	if _, err := c.Debit(t.Context(), req("CHG-6", "001234567890", 100)); err != nil { // the retry: not a duplicate
		t.Fatal(err)
	}
	if _, err := c.Debit(t.Context(), req("CHG-6", "001234567890", 100)); err != nil { // after a confirmation: a duplicate
		t.Fatal(err)
	}
	rep, err := admin.LedgerReport(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if rep.Count != 1 || rep.DuplicateRequests["CHG-6"] != 1 {
		t.Fatalf("report = %+v, want one posting and one duplicate request", rep)
	}
}

func TestInProgress409WhileAnEarlierRequestRuns(t *testing.T) {
	l, c, _ := serve(t, corebanksim.Faults{InProgress409: true, Latency: 300 * time.Millisecond}, time.Second)
	first := make(chan error, 1)
	go func() {
		_, err := c.Debit(context.Background(), req("CHG-409", "001234567890", 100))
		first <- err
	}()
	time.Sleep(100 * time.Millisecond) // the first request is being processed
	_, err := c.Debit(t.Context(), req("CHG-409", "001234567890", 100))
	var be *charge.BankError
	if !errors.As(err, &be) || be.Status != http.StatusConflict || be.Code != "REQUEST_IN_PROGRESS" || be.Kind != charge.BankUnavailable {
		t.Fatalf("second request: %v, want 409 REQUEST_IN_PROGRESS (unavailable)", err)
	}
	if err := <-first; err != nil {
		t.Fatalf("first request: %v", err)
	}
	if len(l.Entries()) != 1 {
		t.Fatalf("postings = %d, want 1", len(l.Entries()))
	}
}

func TestSlowPostOutlastsTheCallerAndPostsAllTheSame(t *testing.T) {
	l, c, _ := serve(t, corebanksim.Faults{SlowRate: 1, SlowLatency: 300 * time.Millisecond}, 50*time.Millisecond)
	_, err := c.Debit(t.Context(), req("CHG-SLOW", "001234567890", 100))
	if err == nil || !charge.MayHavePosted(err) {
		t.Fatalf("err = %v, want a timeout that may have posted", err)
	}
	if len(l.Entries()) != 0 {
		t.Fatal("posted before the slow post finished")
	}
	deadline := time.Now().Add(5 * time.Second)
	for len(l.Entries()) != 1 {
		if time.Now().After(deadline) {
			t.Fatal("the slow post never posted after the caller gave up")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestAnswersLostAfterPostingAreNotFinal(t *testing.T) {
	for name, f := range map[string]corebanksim.Faults{
		"502 after posting":   {BadGatewayAfterPostRate: 1},
		"reset after posting": {ResetAfterPostRate: 1},
	} {
		t.Run(name, func(t *testing.T) {
			l, c, _ := serve(t, f, time.Second)
			_, err := c.Debit(t.Context(), req("CHG-LOST", "001234567890", 100))
			if err == nil || charge.Classify(err) != charge.ClassRetryable || !charge.MayHavePosted(err) {
				t.Fatalf("err = %v, want not final, may have posted", err)
			}
			if len(l.Entries()) != 1 {
				t.Fatalf("postings = %d, want 1 (it posted before the answer was lost)", len(l.Entries()))
			}
			l.SetFaults(corebanksim.Faults{})
			r, err := c.Debit(t.Context(), req("CHG-LOST", "001234567890", 100))
			if err != nil || r.Reference != l.Entries()[0].Reference || len(l.Entries()) != 1 {
				t.Fatalf("retry: %v %v, postings %d; want the first posting replayed", r, err, len(l.Entries()))
			}
		})
	}
}

func TestOutageWindowAnswersItsStatusEverywhereThenEnds(t *testing.T) {
	l, c, url := serve(t, corebanksim.Faults{}, time.Second)
	admin := adminFor(t, url)
	if err := admin.SetFaults(t.Context(), corebanksim.FaultsBody{OutageStatus: 401, OutageMS: 300}); err != nil {
		t.Fatal(err)
	}
	_, err := c.Debit(t.Context(), req("CHG-OUT", "001234567890", 100))
	var be *charge.BankError
	if !errors.As(err, &be) || be.Status != 401 || be.Kind != charge.BankRejected {
		t.Fatalf("debit in a 401 window: %v, want a rejected 401", err)
	}
	if _, err := c.Enquire(t.Context(), "CHG-OUT"); !errors.As(err, &be) || be.Status != 401 {
		t.Fatalf("enquiry in a 401 window: %v", err)
	}
	if err := c.Probe(t.Context()); err == nil {
		t.Fatal("health answered 200 during the outage")
	}
	if len(l.Entries()) != 0 {
		t.Fatal("posted during the outage")
	}
	time.Sleep(350 * time.Millisecond)
	if err := c.Probe(t.Context()); err != nil {
		t.Fatalf("health after the window: %v", err)
	}
	if _, err := c.Debit(t.Context(), req("CHG-OUT", "001234567890", 100)); err != nil {
		t.Fatalf("debit after the window: %v", err)
	}
}

func TestStatusEnquiry(t *testing.T) {
	l, c, _ := serve(t, corebanksim.Faults{DeclineAccounts: map[string]string{"007777777777": "ACCOUNT_CLOSED"}, InProgress409: true}, time.Second)
	e, err := c.Enquire(t.Context(), "CHG-NEVER")
	if err != nil || e.State != charge.DebitNotFound {
		t.Fatalf("unknown key: %+v %v, want NOT_FOUND", e, err)
	}
	r, err := c.Debit(t.Context(), req("CHG-E1", "001234567890", 100))
	if err != nil {
		t.Fatal(err)
	}
	if e, err := c.Enquire(t.Context(), "CHG-E1"); err != nil || e.State != charge.DebitPosted || e.Reference != r.Reference {
		t.Fatalf("posted key: %+v %v, want POSTED %s", e, err, r.Reference)
	}
	_, _ = c.Debit(t.Context(), req("CHG-E2", "007777777777", 100))
	if e, err := c.Enquire(t.Context(), "CHG-E2"); err != nil || e.State != charge.DebitDeclined || e.Decline == nil || e.Decline.Code != "ACCOUNT_CLOSED" {
		t.Fatalf("declined key: %+v %v", e, err)
	}
	l.SetFaults(corebanksim.Faults{Latency: 300 * time.Millisecond})
	go func() { _, _ = c.Debit(context.Background(), req("CHG-E3", "001234567890", 100)) }()
	time.Sleep(100 * time.Millisecond)
	if e, err := c.Enquire(t.Context(), "CHG-E3"); err != nil || e.State != charge.DebitInProgress {
		t.Fatalf("key being processed: %+v %v, want IN_PROGRESS", e, err)
	}
}

func TestBare404IsNotNotFound(t *testing.T) {
	// A status enquiry against a bank (or a URL) without the endpoint must
	// never read as "never posted".
	srv := httptest.NewServer(http.NotFoundHandler())
	defer srv.Close()
	c, _ := corebank.NewClient(srv.URL, corebank.ClientOptions{})
	if e, err := c.Enquire(t.Context(), "CHG-X"); err == nil || !charge.IsRejected(err) {
		t.Fatalf("bare 404: %+v %v, want a rejected error", e, err)
	}
}

func TestParseDeclineRules(t *testing.T) {
	got, err := corebank.ParseDeclineRules("422:DECLINED, 402:NSF")
	if err != nil || len(got) != 2 || got[1] != (corebank.DeclineRule{Status: 402, Error: "NSF"}) {
		t.Fatalf("%v %v", got, err)
	}
	for _, bad := range []string{"", "422", "500:X", "abc:X", "422:"} {
		if _, err := corebank.ParseDeclineRules(bad); err == nil {
			t.Errorf("ParseDeclineRules(%q) accepted", bad)
		}
	}
}

// idAlphabet is what the wire format allows in a charge id.
const idAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._:/-"

// chargeID maps arbitrary bytes onto a charge id of the wire format's
// alphabet (a letter or digit first).
func chargeID(b []byte) string {
	if len(b) == 0 {
		return "A"
	}
	out := make([]byte, 0, len(b)+1)
	out = append(out, idAlphabet[int(b[0])%62])
	for _, c := range b[1:min(len(b), 127)] {
		out = append(out, idAlphabet[int(c)%len(idAlphabet)])
	}
	return string(out)
}

// checkEnquiries posts every id in posted and asks about every id in ids:
// the answer must be about that very key — its own reference for a posted
// one, NOT_FOUND for any other, never another charge's.
func checkEnquiries(t *testing.T, c *corebank.Client, posted []string, ids []string) {
	t.Helper()
	refs := map[string]string{}
	for _, id := range posted {
		if _, done := refs[id]; done {
			continue
		}
		r, err := c.Debit(t.Context(), req(id, "001234567890", 100))
		if err != nil {
			t.Fatalf("post %q: %v", id, err)
		}
		refs[id] = r.Reference
	}
	for _, id := range ids {
		e, err := c.Enquire(t.Context(), id)
		if err != nil {
			t.Fatalf("enquiry %q: %v", id, err)
		}
		switch ref, ok := refs[id]; {
		case ok && (e.State != charge.DebitPosted || e.Reference != ref):
			t.Errorf("enquiry %q: %v %q, want POSTED with its own reference %q", id, e.State, e.Reference, ref)
		case !ok && e.State != charge.DebitNotFound:
			t.Errorf("enquiry %q (never posted): %v %q, want NOT_FOUND", id, e.State, e.Reference)
		}
	}
}

// A charge id may hold '/' and '.': the enquiry sends it as one escaped
// path segment, so that no id can name another's URL.
func TestEnquiryAsksAboutExactlyItsOwnKey(t *testing.T) {
	_, c, _ := serve(t, corebanksim.Faults{}, time.Second)
	posted := []string{"B", "CHG/2026/11/000123", "a.b", "x/y", "A//B", "A/./B", "..x", "CHG-7"}
	others := []string{"A/../B", "A/./../B", "Z/../CHG/2026/11/000123", "CHG/2026/11/000123/..", "x/y/.", "x/./y",
		"A/B", "a..b", "CHG/2026/11/000123/", "C:/x", "CHG-7.", "CHG-7/"}
	checkEnquiries(t, c, posted, append(append([]string{}, posted...), others...))
}

// FuzzEnquiryKey drives the charge-id alphabet through post → enquiry
// against the simulator over HTTP.
func FuzzEnquiryKey(f *testing.F) {
	for _, s := range []string{"A/../B", "CHG/2026/11/000123", "x/./y", "a..b", "A//B", "1:2:3", "Z/..", "A/%2e%2e/B"} {
		f.Add([]byte(s), []byte("B"), true)
	}
	f.Fuzz(func(t *testing.T, a, b []byte, postA bool) {
		_, c, _ := serve(t, corebanksim.Faults{}, 5*time.Second)
		idA, idB := chargeID(a), chargeID(b)
		posted := []string{idB}
		if postA {
			posted = append(posted, idA)
		}
		checkEnquiries(t, c, posted, []string{idA, idB})
	})
}

// An answer about another key (a gateway that cleaned the path, a bank bug)
// says nothing about ours: never POSTED, DECLINED or NOT_FOUND.
func TestAnEnquiryAnswerAboutAnotherKeyIsNeverAnAnswer(t *testing.T) {
	for name, body := range map[string]string{
		"posted":    `{"idempotencyKey":"CHG-OTHER","status":"POSTED","reference":"CBS0000000009"}`,
		"declined":  `{"idempotencyKey":"CHG-OTHER","status":"DECLINED","code":"ACCOUNT_CLOSED"}`,
		"no key":    `{"status":"POSTED","reference":"CBS0000000009"}`,
		"not found": `{"idempotencyKey":"CHG-OTHER","status":"NOT_FOUND"}`,
	} {
		t.Run(name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				code := http.StatusOK
				if strings.Contains(body, "NOT_FOUND") {
					code = http.StatusNotFound
				}
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(code)
				_, _ = w.Write([]byte(body))
			}))
			defer srv.Close()
			c, _ := corebank.NewClient(srv.URL, corebank.ClientOptions{})
			e, err := c.Enquire(t.Context(), "CHG/1")
			var be *charge.BankError
			if err == nil || !errors.As(err, &be) || be.Code != "ENQUIRY_KEY_MISMATCH" || errors.Is(err, charge.ErrPermanent) {
				t.Fatalf("answer about another key: %+v %v, want a not-final mismatch error", e, err)
			}
		})
	}
}

// A PENDING debit posts once, later: replays meanwhile answer PENDING
// again, the enquiry says IN_PROGRESS, and the client never reads it as
// posted.
func TestPendingDebitPostsOnceLater(t *testing.T) {
	l, c, _ := serve(t, corebanksim.Faults{PendingRate: 1, PendingLatency: 200 * time.Millisecond}, time.Second)
	for range 2 {
		_, err := c.Debit(t.Context(), req("CHG-P", "001234567890", 100))
		var be *charge.BankError
		if !errors.As(err, &be) || be.Status != http.StatusAccepted || be.Code != "PENDING" || !charge.MayHavePosted(err) {
			t.Fatalf("pending debit: %v, want a not-final 202 PENDING", err)
		}
	}
	if e, err := c.Enquire(t.Context(), "CHG-P"); err != nil || e.State != charge.DebitInProgress {
		t.Fatalf("enquiry while pending: %+v %v", e, err)
	}
	time.Sleep(300 * time.Millisecond)
	e, err := c.Enquire(t.Context(), "CHG-P")
	if err != nil || e.State != charge.DebitPosted || len(l.Entries()) != 1 {
		t.Fatalf("after the latency: %+v %v, %d postings; want POSTED once", e, err, len(l.Entries()))
	}
	if r, err := c.Debit(t.Context(), req("CHG-P", "001234567890", 100)); err != nil || r.Reference != e.Reference {
		t.Fatalf("replay after posting: %+v %v", r, err)
	}
}

func TestAHealthCheckThatLiesThroughAnOutage(t *testing.T) {
	_, c, url := serve(t, corebanksim.Faults{}, time.Second)
	admin := adminFor(t, url)
	if err := admin.SetFaults(t.Context(), corebanksim.FaultsBody{OutageStatus: 503, OutageMS: 500, OutageHealthy: true}); err != nil {
		t.Fatal(err)
	}
	if err := c.Probe(t.Context()); err != nil {
		t.Fatalf("health during a lying outage: %v, want 200", err)
	}
	if _, err := c.Debit(t.Context(), req("CHG-L", "001234567890", 100)); err == nil {
		t.Fatal("a debit went through during the outage")
	}
}

// A bank's answer is text from outside: whatever it holds, what the client
// returns — and so what reaches records, DLQ reasons and logs — is
// printable, masked (accounts also in groups) and short; an answer past
// the read limit is not read into memory and decides nothing.
func TestHostileBankAnswersAreMaskedStrippedAndBounded(t *testing.T) {
	const account = "001234567891"
	escape := `\u001b[2J\u001b]0;owned\u0007`
	for _, tc := range []struct {
		name    string
		status  int
		body    string
		decline bool
	}{
		{"decline with a long message", 422, `{"error":"DECLINED","code":"ACCOUNT_` + account + `_FROZEN","message":"` +
			strings.Repeat(`account 0012-3456-7891 is frozen \u001b[31m `, 1200) + `"}`, true},
		{"rejection whose error names the account", 400, `{"error":"ACCOUNT_` + account + `_FROZEN","message":"` + escape + `0012 3456 7891"}`, false},
		{"decline past the read limit", 422, `{"error":"DECLINED","message":"` + strings.Repeat("x", 200<<10) + `"}`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				w.WriteHeader(tc.status)
				_, _ = w.Write([]byte(tc.body))
			}))
			defer srv.Close()
			c, err := corebank.NewClient(srv.URL, corebank.ClientOptions{})
			if err != nil {
				t.Fatal(err)
			}
			_, err = c.Debit(t.Context(), req("K-1", account, 100))
			var decline *charge.DeclineError
			if errors.As(err, &decline) != tc.decline {
				t.Fatalf("err %v: decline %v, want %v", err, !tc.decline, tc.decline)
			}
			text := err.Error()
			if len(text) > 2*charge.MaxOutsideText+200 {
				t.Errorf("the error holds %d bytes of the answer", len(text))
			}
			for _, bad := range []string{account, "3456-7891", "3456 7891", "\x1b", "\x07"} {
				if strings.Contains(text, bad) {
					t.Errorf("the error holds %q: %.200q", bad, text)
				}
			}
		})
	}
}
