package idemhttp_test

import (
	"context"
	"crypto/subtle"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/finedge/idempotent-consumer/idemhttp"
	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/memstore"
)

// principal is the context key of the authenticated client's id.
type principal struct{}

// authenticated lets through a request whose bearer token names a client,
// with the client's id in its context; anything else gets 401.
func authenticated(tokens map[string]string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tok, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		for client, t := range tokens {
			if tok != "" && subtle.ConstantTimeCompare([]byte(tok), []byte(t)) == 1 {
				next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), principal{}, client)))
				return
			}
		}
		w.Header().Set("WWW-Authenticate", `Bearer realm="payments"`)
		http.Error(w, "unauthenticated", http.StatusUnauthorized)
	})
}

// A payments endpoint that a client may retry: the second POST with the
// same key gets the first payment back, another body with it is refused.
// Keys are kept per authenticated client (Scope): another client sending
// the same key and body gets a payment of its own, never the first
// client's response.
func ExampleMiddleware() {
	guard, err := idempotency.NewGuard(memstore.New(), idempotency.Options{}) // sqlite, postgres, … in production
	if err != nil {
		panic(err)
	}
	mw, err := idemhttp.Middleware(idemhttp.Options{
		Guard: guard,
		// The authenticated client's id, set by the authentication in front.
		Scope: func(r *http.Request) string { id, _ := r.Context().Value(principal{}).(string); return id },
	})
	if err != nil {
		panic(err)
	}
	made := 0
	payments := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		made++ // the side effect
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"id":"pay_%d","client":%q}`, made, r.Context().Value(principal{}))
	})
	srv := httptest.NewServer(authenticated(map[string]string{"alice": "tok-a", "bob": "tok-b"}, mw(payments)))
	defer srv.Close()

	post := func(token, key, body string) {
		req, _ := http.NewRequest("POST", srv.URL+"/payments", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		if key != "" {
			req.Header.Set("Idempotency-Key", key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			panic(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode >= 400 {
			fmt.Println(resp.StatusCode, resp.Header.Get("Content-Type"))
			return
		}
		fmt.Println(resp.StatusCode, strings.TrimSpace(string(b)), "replayed:", resp.Header.Get("Idempotent-Replayed") == "true")
	}
	post("tok-a", "8e03978e", `{"amount":2500}`)
	post("tok-a", "8e03978e", `{"amount":2500}`)
	post("tok-a", "8e03978e", `{"amount":9900}`)
	post("tok-a", "", `{"amount":2500}`)
	post("tok-b", "8e03978e", `{"amount":2500}`) // bob, alice's key and body: his own
	fmt.Println("payments made:", made)
	// Output:
	// 201 {"id":"pay_1","client":"alice"} replayed: false
	// 201 {"id":"pay_1","client":"alice"} replayed: true
	// 422 application/problem+json
	// 400 application/problem+json
	// 201 {"id":"pay_2","client":"bob"} replayed: false
	// payments made: 2
}
