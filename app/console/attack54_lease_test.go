package console_test

import (
	"net/url"
	"strings"
	"testing"

	"github.com/finedge/idempotent-consumer/idempotency"
)

// A reopened charge a consumer holds right now (its lease live: a copy
// of its message was delivered) must not be said, on the DLQ page or the
// redrive's confirmation, to get "no delivery until it is redriven".
func TestAttack54ConsoleAHeldClaimIsNotSaidToWaitForARedrive(t *testing.T) {
	w := newWorld(t)
	w.reopenedOnTheDLQ(t, "CHG-HELD-1")
	g, err := idempotency.NewGuard(w.store, idempotency.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.Claim(t.Context(), "CHG-HELD-1", "fp"); err != nil {
		t.Fatal(err)
	}
	srv := w.console(t, proxyAuth())
	_, page := as(t, "olga", "GET", srv.URL+"/dlq", nil)
	_, confirm := as(t, "olga", "GET", srv.URL+"/dlq/redrive?id="+url.QueryEscape(w.dlqIDs(t)["CHG-HELD-1"]), nil)
	for what, s := range map[string]string{"the DLQ row": rowOf(page, "CHG-HELD-1"), "the confirmation": textOf(confirm)} {
		if strings.Contains(s, "no delivery comes until it is redriven") {
			t.Fatalf("%s says no delivery comes while a consumer holds the charge:\n%s", what, s)
		}
		mustContain(t, what, s, "a consumer holds it")
	}
}
