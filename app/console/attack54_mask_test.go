package console_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/app/console"
	"github.com/finedge/idempotent-consumer/app/service/operate"
	"github.com/finedge/idempotent-consumer/idempotency"
)

// An operator's reopen reason is free text: one that names the customer's
// account must not show it in clear on the Stuck and Records pages (the
// "decline / reason" column), the charge page, nor a proposal's "why".
func TestAttack54ConsoleReasonsNamingAnAccountAreMasked(t *testing.T) {
	w := newWorld(t)
	w.declinedOnTheDLQ(t, "CHG-MASK-1", "INSUFFICIENT_FUNDS", 4200)
	w.declinedOnTheDLQ(t, "CHG-MASK-2", "INSUFFICIENT_FUNDS", 4300)
	g, err := idempotency.NewGuard(w.store, idempotency.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := operate.Reopen(t.Context(), g, "CHG-MASK-1", "INC-5: customer paid into "+account+" on the 30th", true, "olga (cli)"); err != nil {
		t.Fatal(err)
	}
	srv := w.consoleWith(t, console.ProxyAuth{Operators: []string{"olga", "ivan"}, Trusted: loopback}, func(o *console.Options) {
		w.withBook(t, "reopen-new-attempt")(o)
		o.Now = func() time.Time { return time.Now().Add(10 * time.Minute) }
	})
	_, form := as(t, "olga", "GET", srv.URL+"/proposals", nil)
	code, body := as(t, "olga", "POST", srv.URL+"/proposals/new", url.Values{"csrf": {csrfOf(t, form)}, "kind": {"reopen"}, "new_attempt": {"on"},
		"charge_id": {"CHG-MASK-2"}, "reason": {"INC-6: paid into " + account}})
	id := proposalIDRE.FindString(body)
	if code != http.StatusOK || id == "" {
		t.Fatalf("propose: %d\n%s", code, body)
	}
	for _, path := range []string{"/stuck", "/records?state=IN_PROGRESS", "/charge?id=CHG-MASK-1", "/proposals", "/proposals/show?id=" + id} {
		_, page := as(t, "ivan", "GET", srv.URL+path, nil)
		if strings.Contains(page, account) {
			i := strings.Index(page, account)
			t.Fatalf("%s shows the account in clear: …%s…", path, page[max(0, i-200):min(len(page), i+50)])
		}
	}
}
