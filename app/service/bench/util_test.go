package bench

import (
	"context"
	"testing"
)

// The bench's ledger fails a run that debits a charge's key with another
// charge's payload (its amount, account or type), not only a second debit.
func TestTheLedgerCountsADebitWithAnotherChargesPayload(t *testing.T) {
	l := newBenchLedger(3, 0)
	if _, err := l.Debit(context.Background(), benchCharge("r", 0).DebitRequest()); err != nil {
		t.Fatal(err)
	}
	wrong := benchCharge("r", 2).DebitRequest() // another amount, account and type
	wrong.IdempotencyKey = benchCharge("r", 1).DebitRequest().IdempotencyKey
	if _, err := l.Debit(context.Background(), wrong); err != nil {
		t.Fatal(err)
	}
	if n := l.wrong.Load(); n != 1 {
		t.Fatalf("%d debits counted with another charge's payload, want 1 (charge 1 debited with charge 2's)", n)
	}
}
