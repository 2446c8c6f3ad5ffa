package idemhttp_test

import (
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/idemhttp"
	"github.com/finedge/idempotent-consumer/idempotency"
)

func attackGuard(t *testing.T) *idempotency.Guard {
	t.Helper()
	return memGuard(t, idempotency.Options{Lease: 2 * time.Second})
}

// docs/library/http.md: "Rotating the fingerprint key makes retries of keys
// written under the old one 422 unless the old key is still given as a
// previous key." The middleware computes Sum under the current key and the
// Guard compares strings, so the previous key is never consulted.
func TestAttackRotatedFingerprintKeyStillReplays(t *testing.T) {
	g := attackGuard(t)
	k1 := []byte(strings.Repeat("1", 32))
	k2 := []byte(strings.Repeat("2", 32))
	f1, err := idempotency.NewFingerprinter(k1)
	if err != nil {
		t.Fatal(err)
	}
	f2, err := idempotency.NewFingerprinter(k2, k1) // rotated: k1 kept as previous
	if err != nil {
		t.Fatal(err)
	}
	h := &payments{}
	before := newServer(t, h, idemhttp.Options{Guard: g, Fingerprinter: f1})
	after := newServer(t, h, idemhttp.Options{Guard: g, Fingerprinter: f2})
	first := send(t, "POST", before.URL+"/payments", "rot-1", `{"a":1}`)
	if first.status != http.StatusCreated {
		t.Fatalf("first: %+v", first)
	}
	again := send(t, "POST", after.URL+"/payments", "rot-1", `{"a":1}`)
	if again.status != http.StatusCreated || again.header.Get(idemhttp.ReplayedHeader) != "true" || again.body != first.body {
		t.Fatalf("retry after rotating the key (old key kept as previous): %d %s, want the replay of %s", again.status, again.body, first.body)
	}
}

// The same holds for a server that starts keying fingerprints: records
// written unkeyed before (Fingerprinter.Match accepts them) become 422.
func TestAttackAddingAFingerprintKeyStillReplays(t *testing.T) {
	g := attackGuard(t)
	f, err := idempotency.NewFingerprinter([]byte(strings.Repeat("k", 32)))
	if err != nil {
		t.Fatal(err)
	}
	h := &payments{}
	before := newServer(t, h, idemhttp.Options{Guard: g})
	after := newServer(t, h, idemhttp.Options{Guard: g, Fingerprinter: f})
	first := send(t, "POST", before.URL+"/p", "add-1", `x`)
	again := send(t, "POST", after.URL+"/p", "add-1", `x`)
	if again.status != first.status || again.body != first.body {
		t.Fatalf("retry after adding a key: %d %s, want the replay of %d %s", again.status, again.body, first.status, first.body)
	}
}

// A handler that sends 103 Early Hints before its final 201: the recorder
// keeps the first WriteHeader (103), and response() maps it to 200. The
// client and every replay get 200, the 201 is lost.
func TestAttackEarlyHintsDoNotReplaceTheFinalStatus(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Link", "</style.css>; rel=preload")
		w.WriteHeader(http.StatusEarlyHints)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprint(w, `{"id":"pay_1"}`)
	})
	srv := newServer(t, h, idemhttp.Options{})
	first := send(t, "POST", srv.URL+"/payments", "hints-1", `{}`)
	again := send(t, "POST", srv.URL+"/payments", "hints-1", `{}`)
	if first.status != http.StatusCreated || again.status != http.StatusCreated {
		t.Fatalf("status with 103 first: first %d, replay %d; want 201 both", first.status, again.status)
	}
}

// MaxBodyBytes: math.MaxInt64 ("no limit") overflows MaxBodyBytes+1 to a
// negative LimitReader: the body read is empty, so the fingerprint ignores
// the body (another body with the key replays instead of 422) and the
// handler gets no body at all.
func TestAttackHugeMaxBodyBytesStillFingerprintsTheBody(t *testing.T) {
	var seen atomic.Value
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var b strings.Builder
		_, _ = fmt.Fprint(&b, r.ContentLength)
		seen.Store(b.String())
		w.WriteHeader(http.StatusCreated)
	})
	srv := newServer(t, h, idemhttp.Options{MaxBodyBytes: math.MaxInt64})
	first := send(t, "POST", srv.URL+"/payments", "big-1", `{"amount":100}`)
	if got := seen.Load(); got != "14" {
		t.Errorf("the handler saw a body of %v bytes, want 14", got)
	}
	other := send(t, "POST", srv.URL+"/payments", "big-1", `{"amount":999999}`)
	if first.status != http.StatusCreated || other.status != http.StatusUnprocessableEntity {
		t.Fatalf("same key, another body: %d (replayed %q), want 422", other.status, other.header.Get(idemhttp.ReplayedHeader))
	}
}

// Methods are compared case-sensitively and not canonicalised: an
// Options.Methods of "post" guards nothing, and POST runs twice per key.
func TestAttackLowercaseMethodsStillGuardPOST(t *testing.T) {
	h := &payments{}
	srv := newServer(t, h, idemhttp.Options{Methods: []string{"post", "patch"}})
	send(t, "POST", srv.URL+"/payments", "lc-1", `{}`)
	send(t, "POST", srv.URL+"/payments", "lc-1", `{}`)
	if n := h.runs.Load(); n != 1 {
		t.Fatalf("Methods {post, patch}: the handler ran %d times for one key (Middleware should canonicalise or refuse)", n)
	}
}

// MaxResponseBytes is not checked against driver.MaxResultBytes: a
// response within the configured bound is base64'd over 256 KiB, so it is
// "not stored" and every retry is 500 instead of the replay the option
// promises (or Middleware should refuse the option).
func TestAttackMaxResponseBytesAboveTheStoreLimitReplays(t *testing.T) {
	big := strings.Repeat("a", 200<<10)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
		fmt.Fprint(w, big)
	})
	mw, err := idemhttp.Middleware(idemhttp.Options{Guard: attackGuard(t), Unscoped: true, MaxResponseBytes: 210 << 10})
	if err != nil {
		return // refusing the option is a fix
	}
	srv := newServerMW(t, mw(h))
	first := send(t, "POST", srv.URL+"/r", "resp-1", `{}`)
	again := send(t, "POST", srv.URL+"/r", "resp-1", `{}`)
	if first.status != http.StatusCreated || again.status != http.StatusCreated || again.body != big {
		t.Fatalf("a %d-byte response under MaxResponseBytes %d: retry %d %.200s, want the replay", len(big), 210<<10, again.status, again.body)
	}
}

// Even at the defaults: a Location header (a StoreHeaders default) is
// stored unbounded, so a 160 KiB body plus a long Location overflows the
// store's 256 KiB and the response is not replayed.
func TestAttackDefaultStoreHeadersCountAgainstTheStoreLimit(t *testing.T) {
	body := strings.Repeat("a", idemhttp.DefaultMaxResponseBytes)
	loc := "/payments/x?" + strings.Repeat("&", 8<<10) // json escapes & as \u0026
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Location", loc)
		w.WriteHeader(http.StatusCreated)
		fmt.Fprint(w, body)
	})
	srv := newServer(t, h, idemhttp.Options{})
	send(t, "POST", srv.URL+"/r", "loc-1", `{}`)
	again := send(t, "POST", srv.URL+"/r", "loc-1", `{}`)
	if again.status != http.StatusCreated {
		t.Fatalf("a response of exactly DefaultMaxResponseBytes with a %d-byte Location: retry %d %.300s, want the replay", len(loc), again.status, again.body)
	}
}

// A streaming handler cannot flush: the recorder implements no Flusher and
// no Unwrap, so http.ResponseController reports ErrNotSupported.
func TestAttackResponseControllerFlushWorks(t *testing.T) {
	var flushErr atomic.Value
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
		fmt.Fprint(w, "x")
		if err := http.NewResponseController(w).Flush(); err != nil {
			flushErr.Store(err.Error())
		}
	})
	srv := newServer(t, h, idemhttp.Options{})
	send(t, "POST", srv.URL+"/r", "flush-1", `{}`)
	if e := flushErr.Load(); e != nil {
		t.Fatalf("Flush through the middleware: %v", e)
	}
}

func newServerMW(t *testing.T, h http.Handler) *httptestServer {
	t.Helper()
	return startHTTPTest(t, h)
}

type httptestServer = httptest.Server

func startHTTPTest(t *testing.T, h http.Handler) *httptest.Server {
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

// A panicking handler's panic value is recorded as the key's FAILED detail
// and sent in the 500 to whoever retries the key (any client, without
// Scope): a panic message holding a secret (a connection string, an
// account number, a runtime error quoting data) leaks to the network.
func TestAttackPanicValueIsNotSentToClients(t *testing.T) {
	const secret = "postgres://app:hunter2@db/payments account=0012345678901"
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		panic("connect " + secret)
	})
	srv := newServer(t, h, idemhttp.Options{})
	req, _ := http.NewRequest("POST", srv.URL+"/p", strings.NewReader(`{}`))
	req.Header.Set("Idempotency-Key", "panic-1")
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
	}
	again := send(t, "POST", srv.URL+"/p", "panic-1", `{}`)
	if again.status != http.StatusInternalServerError {
		t.Fatalf("retry after a panic: %d %s", again.status, again.body)
	}
	if strings.Contains(again.body, "hunter2") || strings.Contains(again.body, "0012345678901") {
		t.Fatalf("the panic value reaches the retrying client: %s", again.body)
	}
}

// docs/library/http.md: "a server that crashed mid-request leaves the key
// 409 until its lease ... has passed, when a retry runs the handler again
// with Run.Reclaimed". The handler is never given the Run: it is not in the
// request's context (nor anywhere else), so a payment handler cannot ask
// "did my crashed first run pay?" and pays again. (The check looks for a
// value of type idempotency.Run anywhere in the request's context chain,
// the API being absent.)
func TestAttackReclaimedRunReachesTheHandler(t *testing.T) {
	g := memGuard(t, idempotency.Options{Lease: 200 * time.Millisecond, SkewMargin: -1})
	body := `{"amount":2500}`
	// A server claimed the key and crashed before recording anything.
	if _, err := g.Claim(t.Context(), idemhttp.DefaultNamespace+":crash-1", idempotency.Fingerprint("POST", "/payments", "", body)); err != nil {
		t.Fatal(err)
	}
	var told atomic.Bool
	var ran atomic.Int32
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ran.Add(1)
		told.Store(strings.Contains(fmt.Sprint(r.Context()), "idempotency.Run"))
		w.WriteHeader(http.StatusCreated)
	})
	srv := newServer(t, h, idemhttp.Options{Guard: g})
	if a := send(t, "POST", srv.URL+"/payments", "crash-1", body); a.status != http.StatusConflict {
		t.Fatalf("while the crashed claim's lease runs: %d, want 409", a.status)
	}
	time.Sleep(300 * time.Millisecond)
	send(t, "POST", srv.URL+"/payments", "crash-1", body)
	if ran.Load() != 1 {
		t.Fatalf("handler ran %d times", ran.Load())
	}
	if !told.Load() {
		t.Fatal("the handler re-ran after a crashed first run without being told (no Run / Reclaimed reaches it)")
	}
}

// Two Idempotency-Key fields merged into one line by an intermediary
// (RFC 9110 §5.3 allows combining them as "a, b") are taken as one key
// "a, b" instead of the 400 promised for "more than one"; the draft's
// sf-string grammar does not admit a bare "a, b" either. A lone `" "`
// (a blank key) is also accepted. Cosmetic: nothing runs twice.
func TestAttackMergedKeyListIsRefused(t *testing.T) {
	srv := newServer(t, &payments{}, idemhttp.Options{})
	for _, k := range []string{"k1, k2", `" "`} {
		if a := send(t, "POST", srv.URL+"/p", k, "x"); a.status != http.StatusBadRequest {
			t.Errorf("Idempotency-Key %q: %d, want 400", k, a.status)
		}
	}
}
