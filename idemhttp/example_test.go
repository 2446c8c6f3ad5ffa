package idemhttp_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/finedge/idempotent-consumer/idemhttp"
	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/memstore"
)

// A payments endpoint that a client may retry: the second POST with the
// same key gets the first payment back, another body with it is refused.
func ExampleMiddleware() {
	guard, err := idempotency.NewGuard(memstore.New(), idempotency.Options{}) // sqlite, postgres, … in production
	if err != nil {
		panic(err)
	}
	mw, err := idemhttp.Middleware(idemhttp.Options{Guard: guard})
	if err != nil {
		panic(err)
	}
	made := 0
	srv := httptest.NewServer(mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		made++ // the side effect
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"id":"pay_%d"}`, made)
	})))
	defer srv.Close()

	post := func(key, body string) {
		req, _ := http.NewRequest("POST", srv.URL+"/payments", strings.NewReader(body))
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
	post("8e03978e", `{"amount":2500}`)
	post("8e03978e", `{"amount":2500}`)
	post("8e03978e", `{"amount":9900}`)
	post("", `{"amount":2500}`)
	fmt.Println("payments made:", made)
	// Output:
	// 201 {"id":"pay_1"} replayed: false
	// 201 {"id":"pay_1"} replayed: true
	// 422 application/problem+json
	// 400 application/problem+json
	// payments made: 1
}
