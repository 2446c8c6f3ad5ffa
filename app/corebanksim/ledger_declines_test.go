package corebanksim_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/app/corebanksim"
)

// An account declined CODE*N declines its first N debits (new keys each)
// and posts after them: an account that was funded.
func TestDeclineTimesThenFunded(t *testing.T) {
	l := corebanksim.NewLedger(corebanksim.Faults{DeclineAccounts: map[string]string{"001": "INSUFFICIENT_FUNDS*2", "002": "ACCOUNT_CLOSED"}})
	debit := func(acct string, gen int) error {
		_, err := l.Debit(t.Context(), charge.DebitRequest{IdempotencyKey: fmt.Sprintf("c-%s~%d", acct, gen), AccountID: acct,
			Amount: charge.Money{Minor: 2500, Currency: "INR"}, ChargeType: "SMS_ALERT_FEE"})
		return err
	}
	for gen, want := range []string{"INSUFFICIENT_FUNDS", "INSUFFICIENT_FUNDS", ""} {
		err := debit("001", gen+1)
		var d *charge.DeclineError
		if want == "" && err != nil || want != "" && (!errors.As(err, &d) || d.Code != want) {
			t.Fatalf("debit %d of 001: %v, want decline %q", gen+1, err, want)
		}
	}
	// A replay of a declined key stays declined (the bank's answer under a key is final).
	if err := debit("001", 1); err == nil {
		t.Fatal("the replay of a declined key posted")
	}
	for gen := 1; gen <= 3; gen++ {
		if err := debit("002", gen); err == nil {
			t.Fatalf("debit %d of a closed account posted", gen)
		}
	}
	if n := len(l.Entries()); n != 1 {
		t.Fatalf("%d postings, want 1", n)
	}
}
