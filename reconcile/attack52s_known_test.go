//go:build knowndefects

package reconcile_test

import (
	"strings"
	"testing"

	"github.com/finedge/idempotent-consumer/memstore"
)

// Attack 52s, left open: the summary keeps the account's last four only
// (for display, issue 52), so a posting without our narrative from
// ANOTHER customer's account that shares the last four — the bank debited
// the wrong customer under our key — is matched and checked
// ("2500 INR 7890" agrees), not amount_mismatch. With the narrative the
// keyed fingerprint (the whole account) catches it. Closing it needs the
// record to keep something of the whole account (a keyed digest beside the
// summary): a design change, not a fix.
func TestAttack52sAnotherCustomerWithTheSameLastFourWithoutNarrative(t *testing.T) {
	b := newBooks(t, memstore.New(), "A52S-K-")
	c := b.charge("1", 2500)
	b.done(t, c)
	b.post(c, 1, 2500, false)
	b.postings[0].Account = "77" + c.AccountID[2:]
	rep := b.run(t)
	if got := strings.Join(b.mine(rep), "; "); got != "amount_mismatch 1" {
		t.Fatalf("a posting from %s for a charge to %s: breaks %q, matched %d (unverified %d); want amount_mismatch",
			b.postings[0].Account, c.AccountID, got, rep.Matched, rep.Unverified)
	}
}
