package banksim

import (
	"bytes"
	"errors"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/app/corebanksim"
	"github.com/finedge/idempotent-consumer/app/service/cli"
)

// simulator is a plain simulator (no TLS, no OAuth2) holding one posting
// under bank key CHG-1.
func simulator(t *testing.T) (AdminFlags, *corebanksim.Ledger) {
	t.Helper()
	l := corebanksim.NewLedger(corebanksim.Faults{})
	if _, err := l.Debit(t.Context(), charge.DebitRequest{IdempotencyKey: "CHG-1", AccountID: "001234567890",
		Amount: charge.Money{Minor: 2500, Currency: "INR"}, ChargeType: charge.SMSAlertFee}); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(corebanksim.Handler(l))
	t.Cleanup(srv.Close)
	return AdminFlags{URL: srv.URL, Timeout: 5 * time.Second}, l
}

func TestLedger(t *testing.T) {
	admin, _ := simulator(t)
	for _, tc := range []struct {
		name      string
		o         LedgerOptions
		want, not []string
		usage     bool
	}{
		{name: "table", o: LedgerOptions{Admin: admin}, want: []string{"BANK KEY", "CHG-1", "INR 25.00", "1 postings; 0 repeated"}, not: []string{"001234567890"}},
		{name: "json", o: LedgerOptions{Admin: admin, JSON: true}, want: []string{`"count": 1`, `"idempotencyKey": "CHG-1"`}, not: []string{"001234567890"}},
		{name: "no url", o: LedgerOptions{Admin: AdminFlags{Timeout: time.Second}}, usage: true},
		{name: "no timeout", o: LedgerOptions{Admin: AdminFlags{URL: admin.URL}}, usage: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			err := Ledger(t.Context(), tc.o, &out)
			var ue *cli.UsageError
			if tc.usage != errors.As(err, &ue) || !tc.usage && err != nil {
				t.Fatalf("err = %v, want a usage error: %v", err, tc.usage)
			}
			for _, w := range tc.want {
				if !strings.Contains(out.String(), w) {
					t.Errorf("output lacks %q:\n%s", w, out.String())
				}
			}
			for _, n := range tc.not {
				if strings.Contains(out.String(), n) {
					t.Errorf("output holds %q:\n%s", n, out.String())
				}
			}
		})
	}
}

func TestMarkAndStatement(t *testing.T) {
	admin, l := simulator(t)
	var out bytes.Buffer
	if err := Mark(t.Context(), admin, "reverse", []string{"CHG-1"}, &out); err != nil || out.String() != "CHG-1: reversed: statements from now on carry its reversal\n" {
		t.Fatalf("reverse: %v, %q", err, out.String())
	}
	var ue *cli.UsageError
	if err := Mark(t.Context(), admin, "drop", nil, &out); !errors.As(err, &ue) {
		t.Fatalf("drop without a key: %v, want a usage error", err)
	}
	if err := Mark(t.Context(), admin, "drop", []string{"NO-SUCH"}, &out); err == nil || errors.As(err, &ue) {
		t.Fatalf("drop of an unknown key: %v, want the simulator's refusal", err)
	}
	if len(l.Entries()) != 1 {
		t.Fatalf("ledger: %+v", l.Entries())
	}
	day := time.Now().UTC().Format(time.DateOnly)
	next := time.Now().UTC().Add(24 * time.Hour).Format(time.DateOnly)
	file := filepath.Join(t.TempDir(), "st.csv")
	var stdout, stderr bytes.Buffer
	for _, tc := range []struct {
		name  string
		o     StatementOptions
		usage bool
	}{
		{name: "to stdout", o: StatementOptions{Admin: admin, From: day, To: next, Format: "camt053"}},
		{name: "to a file", o: StatementOptions{Admin: admin, From: day, To: next, Format: "csv", OutFile: file}},
		{name: "no period", o: StatementOptions{Admin: admin, Format: "csv"}, usage: true},
		{name: "backwards", o: StatementOptions{Admin: admin, From: next, To: day, Format: "csv"}, usage: true},
		{name: "bad format", o: StatementOptions{Admin: admin, From: day, To: next, Format: "mt940"}, usage: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stdout.Reset()
			err := Statement(t.Context(), tc.o, &stdout, &stderr)
			if tc.usage != errors.As(err, &ue) || !tc.usage && err != nil {
				t.Fatalf("err = %v, want a usage error: %v", err, tc.usage)
			}
		})
	}
	b, err := os.ReadFile(file)
	if err != nil || !strings.Contains(string(b), "CHG-1") || !strings.Contains(stderr.String(), "written to "+file) {
		t.Fatalf("statement file: %v\n%s\nstderr: %s", err, b, stderr.String())
	}
	if fi, _ := os.Stat(file); fi.Mode().Perm() != 0o600 {
		t.Errorf("statement file mode %s, want 0600", fi.Mode().Perm())
	}
}
