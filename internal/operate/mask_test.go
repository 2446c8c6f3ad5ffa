package operate

import (
	"encoding/json"
	"strings"
	"testing"
)

// Masking is by value: every account-like field, duplicates, nested
// objects, escaped digits and numbers of 8+ digits anywhere.
func TestMaskBodyMasksByValue(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		leaks      []string // none of these may be shown
		keeps      []string // these must still be shown
	}{
		{"accountId twice", `{"accountId":"123456789012","accountId":"x"}`, []string{"123456789012", "56789012"}, []string{"9012"}},
		{"a second account field", `{"chargeId":"C1","accountId":"001234567890","debtorAccount":"998877665544332211"}`, []string{"998877665544332211", "1234567890"}, []string{"C1", "2211"}},
		{"nested", `{"debtor":{"acct":{"iban":"GB82WEST12345698765432"}}}`, []string{"12345698765432", "GB82WEST"}, []string{"5432"}},
		{"escaped digits", `{"accountId":"0012345678\u0039\u0030"}`, []string{`\u0039`, "1234567890"}, []string{"7890"}},
		{"a number", `{"ref":123456789012345}`, []string{"123456789012345"}, []string{"2345"}},
		{"an account as a number", `{"accountNo":12345}`, []string{"12345"}, nil},
		{"a short account", `{"accountId":"12345"}`, []string{"12345"}, nil},
		{"not JSON", `accountId=001234567890; other 9988.7766.5544`, []string{"001234567890", "9988.7766"}, []string{"5544"}},
		{"text in a field", `{"detail":"debit of 0012/3456/7890 refused"}`, []string{"0012/3456", "3456/7890"}, []string{"7890", "refused"}},
		{"dates and amounts stay", `{"dueDate":"2026-11-30","amount":{"minor":2500,"currency":"INR"}}`, nil, []string{"2026-11-30", "2500", "INR"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := MaskBody([]byte(tc.body))
			for _, l := range tc.leaks {
				if strings.Contains(got, l) {
					t.Errorf("%s shows %q: %s", tc.body, l, got)
				}
			}
			for _, k := range tc.keeps {
				if !strings.Contains(got, k) {
					t.Errorf("%s lost %q: %s", tc.body, k, got)
				}
			}
			if json.Valid([]byte(tc.body)) && !json.Valid([]byte(got)) {
				t.Errorf("a JSON body shown as invalid JSON: %s", got)
			}
		})
	}
}

// FuzzMaskBody: an account number of 8-18 digits, grouped or not, under
// any field name or in any text, never shows more than four of its digits
// in a row.
func FuzzMaskBody(f *testing.F) {
	f.Add("accountId", "001234567890", "-", 4, true)
	f.Add("x", "998877665544332211", ".", 3, false)
	f.Add("debtorAccount", "12345678", "/", 2, true)
	f.Add("note", "123456789012345678", " ", 6, true)
	f.Fuzz(func(t *testing.T, field, digits, sep string, group int, asJSON bool) {
		var acct strings.Builder
		for _, r := range digits {
			if r >= '0' && r <= '9' {
				acct.WriteRune(r)
			}
		}
		d := acct.String()
		if len(d) < 8 || len(d) > 18 || !strings.Contains("- ./", sep) || len(sep) != 1 || group < 1 ||
			strings.ContainsFunc(field, func(r rune) bool { return (r < 'a' || r > 'z') && (r < 'A' || r > 'Z') }) {
			t.Skip() // the field name is letters: its digits, if any, would be counted as shown
		}
		var grouped strings.Builder
		for i, r := range d {
			if i > 0 && i%group == 0 {
				grouped.WriteString(sep)
			}
			grouped.WriteRune(r)
		}
		var body []byte
		if asJSON {
			body, _ = json.Marshal(map[string]string{field: grouped.String()})
		} else {
			body = []byte(field + " " + grouped.String() + " end")
		}
		got := MaskBody(body)
		var shown strings.Builder
		for _, r := range got {
			if r >= '0' && r <= '9' || r == '*' {
				shown.WriteRune(r)
			}
		}
		for i := 0; i+5 <= len(d); i++ {
			if strings.Contains(shown.String(), d[i:i+5]) {
				t.Fatalf("%s shows %s of %s: %s", body, d[i:i+5], d, got)
			}
		}
	})
}
