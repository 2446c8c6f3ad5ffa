package main

import (
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/app/corebanksim"
	"github.com/finedge/idempotent-consumer/app/reconcile/statement"
)

// corebank statement, reverse and drop against the simulator: the file is
// owner-only and reads back (reconcile's reader, collection-account side)
// as the postings, then with the reversal, then without the lost one.
func TestCorebankStatementReverseDrop(t *testing.T) {
	ctx := t.Context()
	ledger := corebanksim.NewLedger(corebanksim.Faults{})
	for i, id := range []string{"CHG-S-1", "CHG-S-2", "CHG-S-3"} {
		if _, err := ledger.Debit(ctx, charge.DebitRequest{IdempotencyKey: id, AccountID: "00123456789" + string(rune('1'+i)),
			Amount: charge.Money{Minor: 2500, Currency: "INR"}, ChargeType: charge.SMSAlertFee, Narrative: "SMS_ALERT_FEE"}); err != nil {
			t.Fatal(err)
		}
	}
	bank := httptest.NewServer(corebanksim.Handler(ledger))
	defer bank.Close()
	env := map[string]string{"IC_COREBANK_URL": bank.URL}
	dir := t.TempDir()
	today := time.Now().UTC().Truncate(24 * time.Hour)
	from, to := today.Format(time.DateOnly), today.AddDate(0, 0, 1).Format(time.DateOnly)

	read := func(file, account string) []string {
		t.Helper()
		var got []string
		if _, err := statement.ReadFile(file, statement.Options{CollectionAccount: account}, func(p statement.Posting) error {
			s := p.BankKey + " " + p.Amount.String()
			if p.Reversal {
				s += " reversal"
			}
			got = append(got, s)
			return nil
		}); err != nil {
			t.Fatalf("read %s: %v", file, err)
		}
		return got
	}
	export := func(name string, extra ...string) string {
		t.Helper()
		file := filepath.Join(dir, name)
		args := append([]string{"corebank", "statement", "--from", from, "--to", to, "--out", file}, extra...)
		if r := runCmd(ctx, env, args...); r.code != 0 {
			t.Fatalf("%v: %d %s", args, r.code, r.stderr)
		}
		if fi, err := os.Stat(file); err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("%s: %v %v, want mode 0600", file, fi, err)
		}
		return file
	}
	want := func(got []string, w ...string) {
		t.Helper()
		if strings.Join(got, "|") != strings.Join(w, "|") {
			t.Fatalf("postings %q, want %q", got, w)
		}
	}

	for _, tc := range []struct{ name, account, readAs string }{
		{"s0.xml", "", "FEES-COLLECTION"},
		{"s0-iban.xml", "GB82WEST12345698765432", "GB82 WEST 1234 5698 7654 32"},
	} {
		var extra []string
		if tc.account != "" {
			extra = []string{"--collection-account", tc.account}
		}
		want(read(export(tc.name, extra...), tc.readAs), "CHG-S-1 INR 25.00", "CHG-S-2 INR 25.00", "CHG-S-3 INR 25.00")
	}

	if r := runCmd(ctx, env, "corebank", "reverse", "CHG-S-2"); r.code != 0 || !strings.Contains(r.stdout, "CHG-S-2: reversed") {
		t.Fatalf("reverse: %d %q %s", r.code, r.stdout, r.stderr)
	}
	want(read(export("s1.xml"), "FEES-COLLECTION"), "CHG-S-1 INR 25.00", "CHG-S-2 INR 25.00", "CHG-S-3 INR 25.00", "CHG-S-2 INR 25.00 reversal")
	want(read(export("s1.csv", "--format", "csv"), ""), "CHG-S-1 INR 25.00", "CHG-S-2 INR 25.00", "CHG-S-3 INR 25.00", "CHG-S-2 INR 25.00 reversal")

	if r := runCmd(ctx, env, "corebank", "drop", "CHG-S-3"); r.code != 0 {
		t.Fatalf("drop: %d %s", r.code, r.stderr)
	}
	want(read(export("s2.xml"), "FEES-COLLECTION"), "CHG-S-1 INR 25.00", "CHG-S-2 INR 25.00", "CHG-S-2 INR 25.00 reversal")
	// The ledger still counts every posting once.
	for k, n := range ledger.PostingsByKey() {
		if n != 1 {
			t.Fatalf("%s posted %d times", k, n)
		}
	}

	// To stdout, and the failures.
	if r := runCmd(ctx, env, "corebank", "statement", "--from", from, "--to", to); r.code != 0 || !strings.Contains(r.stdout, "<EndToEndId>CHG-S-1</EndToEndId>") {
		t.Fatalf("statement to stdout: %d %s", r.code, r.stderr)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"corebank", "reverse", "CHG-NONE"}, "404"},
		{[]string{"corebank", "drop", "CHG-NONE"}, "404"},
		{[]string{"corebank", "reverse"}, "exactly one bank key"},
		{[]string{"corebank", "statement", "--from", from}, "--from and --to are required"},
		{[]string{"corebank", "statement", "--from", to, "--to", from}, "--from must be before --to"},
		{[]string{"corebank", "statement", "--from", "someday", "--to", to}, "--from"},
		{[]string{"corebank", "statement", "--from", from, "--to", to, "--format", "pdf"}, "--format"},
	} {
		if r := runCmd(ctx, env, tc.args...); r.code == 0 || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%v: %d %q, want a failure naming %q", tc.args, r.code, r.stderr, tc.want)
		}
	}
	if r := runCmd(ctx, map[string]string{}, "corebank", "statement", "--from", from, "--to", to); r.code == 0 || !strings.Contains(r.stderr, "--corebank-url") {
		t.Errorf("no URL: %d %s", r.code, r.stderr)
	}
}
