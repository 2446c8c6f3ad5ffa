package charge_test

import (
	"testing"

	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
)

func TestSummaryIsKeptAndReadBack(t *testing.T) {
	for _, tt := range []struct {
		name    string
		account string
		amount  charge.Money
		kept    string
		shown   string
	}{
		{"an account number", "001234567890", charge.Money{Minor: 2500, Currency: "INR"}, "2500 INR 7890", "****7890"},
		{"an IBAN", "DE89370400440532013000", charge.Money{Minor: 1, Currency: "EUR"}, "1 EUR 3000", "****3000"},
		{"a short account keeps no last four", "1234", charge.Money{Minor: 99, Currency: "JPY"}, "99 JPY", ""},
		{"a zero amount", "ACCT-0001", charge.Money{Minor: 0, Currency: "USD"}, "0 USD 0001", "****0001"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := charge.SummaryOf(charge.Charge{ID: "CHG-1", AccountID: tt.account, Amount: tt.amount})
			if got := s.String(); got != tt.kept {
				t.Fatalf("kept as %q, want %q", got, tt.kept)
			}
			back, ok := charge.ParseSummary(s.String())
			if !ok || back != s {
				t.Fatalf("ParseSummary(%q) = %+v, %v; want %+v", s.String(), back, ok, s)
			}
			if back.Account() != tt.shown {
				t.Errorf("shown as %q, want %q", back.Account(), tt.shown)
			}
			if !back.SameAccount(tt.account) {
				t.Errorf("the summary does not name its own account %s", tt.account)
			}
		})
	}
}

func TestSummaryRefusesWhatItDidNotWrite(t *testing.T) {
	for _, s := range []string{"", "2500", "2500 INR 7890 x", "25.00 INR", "-1 INR", "+25 INR", "025 INR", "2500 inr", "2500 XXX",
		"2500 INR 789", "2500 INR 78901", "2500  INR", "99999999999999999999 INR"} {
		if got, ok := charge.ParseSummary(s); ok {
			t.Errorf("ParseSummary(%q) = %+v, want refused", s, got)
		}
	}
}

func TestSummaryComparesTheAccountsLastFour(t *testing.T) {
	s, _ := charge.ParseSummary("2500 INR 7890")
	for acct, want := range map[string]bool{"001234567890": true, "IN00BANK001234567890": true, "001234567891": false, "": true, "7890": false} {
		if got := s.SameAccount(acct); got != want {
			t.Errorf("SameAccount(%q) = %v, want %v", acct, got, want)
		}
	}
}

// A processed charge's record keeps its amount, currency and the account's
// last four in clear (what reconciliation compares every posting with),
// and so does the claim a queue makes in its receive's transaction.
func TestAProcessedChargeKeepsItsSummary(t *testing.T) {
	f := newFixture(t)
	c := smsFee("CHG-SUM-1")
	wantOutcome(t, f.svc.Process(t.Context(), c, nil), charge.Processed)
	if r := f.record(t, c.ID); r.State != driver.StateDone || r.Summary != "2500 INR 7890" {
		t.Fatalf("record %s with summary %q, want DONE with %q", r.State, r.Summary, "2500 INR 7890")
	}
	req, err := f.svc.ClaimRequest(smsFee("CHG-SUM-2"))
	if err != nil || req.Summary != "2500 INR 7890" {
		t.Fatalf("ClaimRequest summary %q, %v; want %q", req.Summary, err, "2500 INR 7890")
	}
}
