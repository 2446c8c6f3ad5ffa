package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/app/reconcile/statement"
	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
	"github.com/finedge/idempotent-consumer/idempotency/storetest"
)

// Under reconcile-adopt, reconcile resolve first finds the break's kind
// (approval Backend.Select: one read of the statement) and, when it is
// not an adoption, goes on to reconcile.Resolve — which reads the
// statement again and resolves whatever break the charge has then: it is
// given neither the kind found nor the break id (--kind only if typed).
// The statement read the first time shows a posting of the wrong amount
// (amount_mismatch: marked, no approval needed); the second time the
// charge's own posting (posted_not_recorded): adopted by one operator,
// without the second operator reconcile-adopt requires. (A FIFO stands for
// a statement file the operator — or the bank's feed — rewrites between
// the two reads.)
func TestAttack2FourEyesBypassedBetweenSelectAndResolve(t *testing.T) {
	dir := t.TempDir()
	tokens, own := writeTokens(t, dir, "olga:operator", "ivan:operator")
	rs := newReconcileSetup(t, dir, map[string]string{"IC_CONSOLE_TOKEN_FILE": tokens},
		idempotency.Options{Clock: storetest.NewClock(time.Now().Add(-time.Hour))})
	env, b, fp, g, today, ctx := rs.env, rs.b, rs.fp, rs.g, rs.today, t.Context()
	c := charge.Charge{ID: "CHG-BYP-1", AccountID: "0012345678901", Amount: charge.Money{Minor: 2500, Currency: "INR"}, Type: charge.SMSAlertFee, DueDate: today}
	if cl, err := g.Claim(ctx, c.ID, c.Fingerprint(fp)); err != nil || !cl.Outcome.Owned() {
		t.Fatalf("claim: %v %v", cl.Outcome, err)
	}
	camt := func(minor int64) []byte {
		req := c.DebitRequest()
		var buf bytes.Buffer
		if err := statement.WriteCamt053(&buf, statement.StatementInfo{ID: "STMT-1", Account: "FEES-001", Created: time.Now(),
			Period: statement.Period{From: today, To: today.AddDate(0, 0, 1)}},
			[]statement.Posting{{BankKey: req.IdempotencyKey, Account: c.AccountID, Amount: charge.Money{Minor: minor, Currency: "INR"}, BookingDate: today,
				Reference: "BANK-" + c.ID, Narrative: req.Narrative}}); err != nil {
			t.Fatal(err)
		}
		return buf.Bytes()
	}
	fifo := filepath.Join(dir, "camt053.xml")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skip("no FIFO:", err)
	}
	go func() {
		for _, body := range [][]byte{camt(9900), camt(2500)} {
			f, err := os.OpenFile(fifo, os.O_WRONLY, 0)
			if err != nil {
				return
			}
			f.Write(body)
			f.Close()
			time.Sleep(300 * time.Millisecond) // the reader reaches EOF and closes
		}
	}()
	olga := as(env, own["olga"])
	keepFourEyes(t, env, own["console"], tokens, "reconcile-adopt")
	r := runCmd(ctx, olga, "reconcile", "resolve", "--statement", fifo, "--collection-account", "FEES-001", "--reason", "INC-1", c.ID)
	rec, _ := b.Store.Get(ctx, c.ID, time.Now())
	if rec.State == driver.StateDone || strings.Contains(r.stdout, "adopted") {
		t.Fatalf("under reconcile-adopt one operator adopted %s without approval: exit %d, record %s %s\n%s%s", c.ID, r.code, rec.State, rec.Status, r.stdout, r.stderr)
	}
}
