package console_test

import (
	"bytes"
	"crypto/ed25519"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/app/audit"
	"github.com/finedge/idempotent-consumer/app/console"
	"github.com/finedge/idempotent-consumer/app/service/backend"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
)

// bulk>0 asks a second operator for every action touching a charge (the
// console's reopen, redrive and renotify of one charge are proposals
// under it). The Reconciliation page judged the policy only under
// reconcile-adopt: under bulk>0 one operator adopted a posting — money
// recorded as collected without a debit — alone.
func TestAttack53MovedConsoleAdoptionUnderBulkOverZeroNeedsAProposal(t *testing.T) {
	w := newReconWorld(t)
	auth := console.ProxyAuth{Operators: []string{"olga", "ivan"}, Trusted: loopback}
	book := w.withBook(t, "bulk>0")
	srv := w.consoleWith(t, auth, func(o *console.Options) {
		o.ReconcileReport, o.Fingerprints, o.ActionBurst = w.report, w.fp, 10
		book(o)
	})
	_, body := as(t, "olga", "GET", srv.URL+"/reconciliation", nil)
	crashed := w.breakOf(t, w.crashed.ID)
	v := url.Values{"id": {crashed.ChargeID}, "kind": {string(crashed.Kind)}, "break": {crashed.ID}, "csrf": {csrfOf(t, body)}, "reason": {"INC-7: checked with the bank"}}
	code, body := as(t, "olga", "POST", srv.URL+"/reconciliation/resolve", v)
	if code != http.StatusConflict || !strings.Contains(body, "Needs another operator") {
		t.Fatalf("a direct adoption under bulk>0: %d\n%s", code, body)
	}
	if rec, err := w.store.Get(t.Context(), w.crashed.ID, time.Now()); err != nil || rec.State != driver.StateInProgress {
		t.Fatalf("the adoption wrote the record without approval: %+v %v", rec, err)
	}
}

// A switch from proxy sign-in back to tokens renames people as much as
// the other way (the identity provider's names, then the token file's),
// but only token → proxy left a line in the trail (retire-tokens): a
// proposal made under the proxy could then be approved by its proposer
// under her token name. Every switch of sign-in is a line.
func TestAttack53MovedEverySignInSwitchIsALine(t *testing.T) {
	dir := t.TempDir()
	pem, err := audit.PrivateKeyPEM(ed25519.NewKeyFromSeed(bytes.Repeat([]byte{9}, ed25519.SeedSize)))
	if err != nil {
		t.Fatal(err)
	}
	keyFile := filepath.Join(dir, "console.key")
	if err := os.WriteFile(keyFile, pem, 0o600); err != nil {
		t.Fatal(err)
	}
	tokens := filepath.Join(dir, "tokens")
	line := console.TokenLine("olga", console.Operator, "olga-token-xxxxxxxxxxxxxxxxxxxx", "")
	if err := os.WriteFile(tokens, []byte(line+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	trail := filepath.Join(dir, "audit.jsonl")
	cfg := backend.Config{Kind: backend.Embedded, DB: filepath.Join(dir, "ic.db"), Queue: "charges"}
	open := func() (*backend.Backend, error) { return backend.Open(t.Context(), cfg, 0, true) }
	for _, c := range []console.Config{
		{KeyFile: keyFile, AuditFile: trail, Auth: "proxy"},
		{KeyFile: keyFile, AuditFile: trail, Auth: "token", TokenFile: tokens},
	} {
		if _, err := c.ChangePolicy(t.Context(), "bulk>0", "INC-1", open, io.Discard, slog.New(slog.DiscardHandler)); err != nil {
			t.Fatal(err)
		}
	}
	es, err := audit.RecentIn(trail, 100, audit.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	var actions []string
	for _, e := range es {
		if e.Action == "sign-in" || e.Action == "retire-tokens" {
			return
		}
		actions = append(actions, e.Action)
	}
	t.Fatalf("no line says sign-in changed from proxy to token: %v", actions)
}

// chargerecovery token NAME ROLE checked NAME for a space and a tab only:
// a name with a no-break space made a line the token file splits in
// five fields — the whole file refused, nobody signed in — and one with
// a zero-width or control character a second identity that reads as
// another's ("olga" and "olga\u200b" are two people to four-eyes, one
// to the eye). A NAME is printable, without space of any kind.
func TestAttack53MovedTokenNameIsPrintableWithoutSpace(t *testing.T) {
	for _, name := range []string{"ol\u00a0ga", "olga\u200b", "ol\u2028ga", "olga\x1b[0m", "ol\u202ega"} {
		if _, line, err := console.NewToken(name, "operator", ""); err == nil {
			t.Errorf("NewToken(%q) made the line %q", name, line)
		}
	}
	if _, _, err := console.NewToken("olga.k", "operator", ""); err != nil {
		t.Fatal(err)
	}
}
