package operate

import (
	"bytes"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/app/internal/apptest"
	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
	"github.com/finedge/idempotent-consumer/memqueue"
	"github.com/finedge/idempotent-consumer/memstore"
	"github.com/finedge/idempotent-consumer/queue"
)

// maskCase is a body MaskBody is given, what it may not show and what it
// must still show.
type maskCase struct {
	name, body string
	leaks      []string // none of these may be shown
	keeps      []string // these must still be shown
}

// maskBodyCases runs MaskBody over each case's body: none of its leaks
// shown, every keep still there, a JSON body still JSON.
func maskBodyCases(t *testing.T, cases []maskCase) {
	for _, tc := range cases {
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

// Masking is by value: every account-like field, duplicates, nested
// objects, escaped digits and numbers of 8+ digits anywhere.
func TestMaskBodyMasksByValue(t *testing.T) {
	maskBodyCases(t, []maskCase{
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
	})
}

// Issue 34 item 4, by value: the cases that showed account numbers (or
// parts of them) in clear on the entry page and in dlq show.
func TestMaskBodyMasksEveryAccountValue(t *testing.T) {
	maskBodyCases(t, []maskCase{
		{"accountId twice, the first in full", `{"accountId":"123456789012","accountId":"x"}`, []string{"12345678"}, []string{`"accountId"`, "9012"}},
		{"accountId twice, alphanumeric", `{"accountId":"AB12CD34EF56","accountId":"x"}`, []string{"AB12CD34"}, []string{"EF56"}},
		{"iban", `{"chargeId":"C1","iban":"GB82WEST12345698765432"}`, []string{"GB82WEST", "12345698"}, []string{"5432", "C1"}},
		{"acct, any case", `{"ACCT":"AB12CD34EF56","Pan":"4111111111111111"}`, []string{"AB12CD34", "41111111"}, []string{"EF56", "1111"}},
		{"an object under an account key", `{"debtorAccount":{"number":"AB12CD34EF56","bank":"X"}}`, []string{"AB12CD34"}, []string{`"number"`, "EF56"}},
		{"an array under an account key", `{"accounts":["AB12CD34EF56",{"id":"ZZ99YY88XX77"}]}`, []string{"AB12CD34", "ZZ99YY88"}, []string{"EF56", "XX77"}},
		{"an account as a key", `{"accounts":{"AB12CD34EF56":{"state":"open"}}}`, []string{"AB12CD34"}, []string{"EF56", `"state"`}},
		{"deep", `{"a":[{"b":{"c":[{"creditorIban":"DE89370400440532013000"}]}}]}`, []string{"DE893704", "37040044"}, []string{"3000"}},
		{"the account again in another field", `{"accountId":"AB12CD34EF56","note":"debit AB12CD34EF56 refused"}`, []string{"AB12CD34"}, []string{"refused"}},
		{"the account's digits in a text", `{"detail":"a/c 0012.3456.7890 and 0012/3456/7890"}`, []string{"0012.3456", "3456.7890", "0012/3456", "3456/7890"}, []string{".7890", "/7890"}},
		{"a control character between two halves", `{"ref":"001234\u0085567890"}`, []string{"001234567890", "1234567"}, []string{"7890"}},
		{"not JSON from some point on", `{"accountId":"AB12CD34EF56","x": oops, "n":"AB12CD34EF56"}`, []string{"AB12CD34"}, []string{"oops"}},
		{"escaped, not JSON", `{"acct":"AB\u0031\u00322CD34EF56" oops`, []string{`AB\u0031\u00322CD34`}, []string{"oops"}},
		{"dates and amounts stay", `{"dueDate":"2026-11-30","note":"due 30/11/2026, 2026.11.30, 30.11.2026: INR 1500.00","minor":150000}`, nil,
			[]string{"2026-11-30", "30/11/2026", "2026.11.30", "30.11.2026", "1500.00", "150000"}},
		// Three JSON numbers, or three texts: each shorter than 8 digits,
		// written again as one they were an account in full.
		{"numbers in a row", `1234 5678 9012`, []string{"1234", "5678"}, []string{"9012"}},
		{"numbers joined by their signs", `1234-5678-9012`, []string{"1234", "5678"}, []string{"9012"}},
		{"two values", `{"a":"x"}"1234 5678 9012"`, []string{"1234", "5678"}, []string{"9012"}},
		{"html kept readable", `{"detail":"<b>&"}`, nil, []string{"<b>&"}},
	})
}

// An entry's reason and unreadable text are masked with the accounts its
// body names, not only by the digits in them.
func TestViewMasksTheBodysAccountsInTheReason(t *testing.T) {
	e := queue.DLQEntry{ID: "m1", Body: []byte(`{"chargeId":"C1","accountId":"AB12CD34EF56","debtorAccount":"ZZ99YY88XX77"}`),
		Reason: queue.Reason{Code: "INVALID_EVENT", Detail: "account ZZ99YY88XX77 unknown, AB12CD34EF56 too"}}
	v := View(e, time.Now(), true)
	for _, s := range []string{v.Detail, v.Body, v.Account, v.Unreadable} {
		if strings.Contains(s, "AB12CD34") || strings.Contains(s, "ZZ99YY88") {
			t.Errorf("the entry shows an account: %q", s)
		}
	}
	if !strings.Contains(v.Detail, "XX77 unknown") {
		t.Errorf("detail = %q", v.Detail)
	}
}

// Issue 54 item 2: a charge id is an id. The entry's header (its charge
// column) and its body show it the same way: whole when it is an id
// (a date and a sequence, grouped), masked to its last four digits where
// it carries an account-like run — the body's account, or an account's
// digits — whether the event is valid or not.
func TestAChargeIDIsShownTheSameWayInTheHeaderAndTheBody(t *testing.T) {
	for _, tt := range []struct {
		name, id, amount string
		want             string // the charge id as shown
	}{
		{"valid, an id", "CHG-2026-11-000123", `{"minor":2500,"currency":"INR"}`, "CHG-2026-11-000123"},
		{"invalid amount, an id", "CHG-2026-11-000123", `{"minor":-5,"currency":"INR"}`, "CHG-2026-11-000123"},
		{"invalid id holding an account", "445566778899 INR", `{"minor":2500,"currency":"INR"}`, "********8899 INR"},
		{"valid, the body's own account in it", "CHG-001234567890", `{"minor":2500,"currency":"INR"}`, "CHG-********7890"},
		{"invalid, an account's grouping", "CHG-4455-6677-8899", `{"minor":-5,"currency":"INR"}`, "CHG-****-****-8899"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			body := `{"schemaVersion":1,"chargeId":"` + tt.id + `","accountId":"001234567890","amount":` + tt.amount +
				`,"chargeType":"SMS_ALERT_FEE","dueDate":"2026-11-30"}`
			v := View(queue.DLQEntry{ID: "m1", Body: []byte(body), Reason: queue.Reason{Code: "INVALID_EVENT"}}, time.Now(), true)
			if v.ChargeID != tt.want {
				t.Errorf("header shows %q, want %q", v.ChargeID, tt.want)
			}
			if !strings.Contains(v.Body, `"chargeId":"`+tt.want+`"`) {
				t.Errorf("body shows the id otherwise than the header %q: %s", tt.want, v.Body)
			}
			if v.Key != tt.id {
				t.Errorf("the record is looked up by %q, want %q", v.Key, tt.id)
			}
		})
	}
}

// FuzzMaskBody: an account number of 8-18 digits, plain or grouped with
// one of the separators, as the value of any field (account-like or not,
// at any depth, twice), as a key, or in text around it, never shows more
// than four of its digits in a row (separators skipped), and a JSON body
// stays JSON.
func FuzzMaskBody(f *testing.F) {
	f.Add("accountId", "001234567890", 1, 4, "", "", 0)
	f.Add("x", "998877665544332211", 3, 3, "ref ", " ok", 1)
	f.Add("debtorAccount", "12345678", 4, 2, "", "", 2)
	f.Add("note", "123456789012345678", 2, 6, "due 2026-11-30 ", ".", 3)
	f.Add("iban", "00000000", 0, 0, "GB82WEST", "", 4)
	f.Add("note", "12345678", 1, 3, "<&>", "\u2028", 5)
	f.Add("memo", "001234567890", 3, 6, "99.", "", 6)
	f.Add("", "123456789012", 2, 4, "", "", 7)
	f.Add("chargeId", "001234567890", 1, 4, "CHG-", "", 0) // an id with an account's grouping
	f.Add("chargeId", "001234567890", 0, 0, "CHG-", "", 0)
	f.Fuzz(func(t *testing.T, field, digits string, sep, group int, before, after string, shape int) {
		acct, grouped := apptest.AccountNumber(digits, sep, group)
		if acct == "" || strings.ContainsFunc(field+before+after, isDigitRune) {
			// Digits of the field name or text would be counted as the
			// account's when shown; FuzzMaskText has digits around it.
			t.Skip()
		}
		value := before + grouped + after
		var body []byte
		switch apptest.Abs(shape) % 8 {
		case 0: // the value of a field
			body = marshal(map[string]string{field: value})
		case 1: // a field of an object in an array
			body = marshal(map[string]any{"items": []any{map[string]string{field: value}}})
		case 2: // a repeated field, the first holding the account
			body = []byte(`{` + string(marshal(field)) + `:` + string(marshal(value)) + `,` + string(marshal(field)) + `:"x"}`)
		case 3: // a key
			body = marshal(map[string]string{value: field})
		case 4: // under an account key, then again elsewhere
			body = marshal(map[string]any{"acct": map[string]string{field: value}, "note": value})
		case 5: // not JSON
			body = []byte(field + "=" + value + "; end")
		case 7: // the body itself (JSON numbers when grouped by '-' or ' ')
			body = []byte(value)
		case 6: // JSON cut short (after the account)
			body = []byte(`{` + string(marshal(field)) + `:` + string(marshal(value)) + `,"z":"en`)
		}
		got := MaskBody(body)
		if json.Valid(body) && !json.Valid([]byte(got)) {
			t.Fatalf("%s shown as invalid JSON: %s", body, got)
		}
		for _, s := range shownTexts(got) {
			if run := visibleRun(s, acct); run > 4 {
				t.Fatalf("%s shows %d digits of %s in a row: %s", body, run, acct, got)
			}
		}
	})
}

func marshal(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

func isDigitRune(r rune) bool { return r >= '0' && r <= '9' }

var jsonEscape = regexp.MustCompile(`\\u[0-9a-fA-F]{4}`)

// shownTexts are what a reader sees of out: every key, string and number
// of it, escapes decoded, when it is JSON (each on its own, so that digits
// of one are not read as following those of another), else out itself.
func shownTexts(out string) []string {
	if !json.Valid([]byte(out)) {
		// A JSON escape in a body that is not JSON is shown as written:
		// its hex digits are not the account's.
		return []string{jsonEscape.ReplaceAllString(out, "_")}
	}
	var texts []string
	dec := json.NewDecoder(strings.NewReader(out))
	dec.UseNumber()
	for {
		tok, err := dec.Token()
		if err != nil {
			return texts
		}
		switch v := tok.(type) {
		case string:
			texts = append(texts, v)
		case json.Number:
			texts = append(texts, v.String())
		}
	}
}

// visibleRun is the longest run of acct's digits, in acct's order, that s
// shows, separators and other characters between them skipped ('*' ends
// a run).
func visibleRun(s, acct string) int {
	var shown strings.Builder
	for _, r := range s {
		if isDigitRune(r) || r == '*' {
			shown.WriteRune(r)
		}
	}
	best := 0
	for i := range len(acct) {
		for j := i + best + 1; j <= len(acct); j++ {
			if !strings.Contains(shown.String(), acct[i:j]) {
				break
			}
			best = j - i
		}
	}
	return best
}

// chargerecovery reopen's audit line shows the charge id and bank key as
// every view does (charge.ShowID): a charge id holding an account's
// digits keeps its last four there.
func TestAttack54MaskReopenAuditLine(t *testing.T) {
	const id = "CHG-001234567890"
	s := memstore.New()
	g, err := idempotency.NewGuard(s, idempotency.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cl, err := g.Claim(t.Context(), id, "fp")
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Fail(t.Context(), cl.Lease(), "FAILED", "debit declined: INSUFFICIENT_FUNDS"); err != nil {
		t.Fatal(err)
	}
	var out, audit bytes.Buffer
	if err := ReopenCharge(t.Context(), s, ReopenOptions{ID: id, Reason: "INC-1", Operator: "olga", NewAttempt: true, Out: &out, Audit: &audit}); err != nil {
		t.Fatal(err)
	}
	if a := audit.String(); strings.Contains(a, "12345678") || !strings.Contains(a, "CHG-********7890") {
		t.Errorf("the audit line: %s", a)
	}
}

// The charge id's key spelt otherwise, repeated, a number, escaped, split
// by a date: neither the entry's charge column nor its body shows the
// account (12 digits, 001234567890) or 8 of its digits in a row.
func TestAttack54MaskChargeIDShapes(t *testing.T) {
	const acct = "001234567890"
	tail := `,"accountId":"` + acct + `","amount":{"minor":2500,"currency":"INR"},"chargeType":"SMS_ALERT_FEE","dueDate":"2026-11-30"}`
	for _, head := range []string{
		`{"schemaVersion":1,"CHARGEID":"CHG-` + acct + `"`,
		`{"schemaVersion":1,"chargeid":"CHG-` + acct + `"`,
		`{"schemaVersion":1,"chargeId":"CHG-1","chargeId":"CHG-` + acct + `"`,
		`{"schemaVersion":1,"chargeId":"CHG-` + acct + `","chargeId":"CHG-1"`,
		`{"schemaVersion":1,"chargeId":` + "1234567890123",
		`{"schemaVersion":1,"chargeId":"CHG-\u0030\u00301234567890"`,
		`{"schemaVersion":1,"chargeId":"CHG-\\u0030\\u00301234567890"`,
		`{"schemaVersion":1,"chargeId":"2026-11-30-0012-3456-7890"`,
		`{"schemaVersion":1,"chargeId":"2026-11-` + acct + `"`,
		`{"schemaVersion":1,"chargeId":"2026-11-30-` + acct + `"`,
		`{"schemaVersion":1,"chargeId":"CHG_0012_3456_7890"`,
		`{"schemaVersion":1,"chargeId":"CHG-００１２３４５６７８９０"`,
		`{"schemaVersion":1,"chargeId":{"n":"` + acct + `"}`,
		`{"schemaVersion":1,"chargeId":"CHG-0012-3456-7890"`,
	} {
		body := head + tail
		v := View(queue.DLQEntry{ID: "m1", Body: []byte(body), Reason: queue.Reason{Code: "INVALID_EVENT", Detail: "id " + acct}}, time.Now(), true)
		for _, s := range []string{v.ChargeID, v.Body, v.Detail, v.Unreadable} {
			for _, text := range shownTexts(s) {
				if run := visibleRun(asciiOf(text), acct); run > 7 {
					t.Errorf("%s: shows %d digits of the account: %q", body, run, s)
				}
			}
		}
	}
}

// asciiOf is s with full-width digits as ASCII (a person reads them so).
func asciiOf(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= '０' && r <= '９' {
			return '0' + (r - '０')
		}
		return r
	}, s)
}

// dlqWith is a queue whose DLQ holds body (its entry id returned) and a
// store holding a record of charge id.
func dlqWith(t *testing.T, body, id string) (*memqueue.Queue, *memstore.Store, string) {
	t.Helper()
	ctx := t.Context()
	q := memqueue.New(memqueue.Options{})
	if _, err := q.Send(ctx, []byte(body), nil); err != nil {
		t.Fatal(err)
	}
	msgs, err := q.Receive(ctx, 1)
	if err != nil || len(msgs) != 1 {
		t.Fatalf("receive: %v %d", err, len(msgs))
	}
	if err := q.DeadLetter(ctx, msgs[0], queue.Reason{Code: "INVALID_EVENT", Detail: "bad"}); err != nil {
		t.Fatal(err)
	}
	var entryID string
	if _, err := q.Redrive(ctx, queue.RedriveOptions{DryRun: true, Force: true, Visit: func(e queue.DLQEntry, _ queue.RedriveDecision) { entryID = e.ID }}); err != nil {
		t.Fatal(err)
	}
	s := memstore.New()
	now := time.Now()
	if _, err := s.Claim(ctx, driver.ClaimRequest{Key: id, Token: "t", Fingerprint: "f", Now: now, LeaseUntil: now.Add(time.Minute), ExpiresAt: now.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	return q, s, entryID
}

// dlq show of an entry whose charge id holds the body's account: the
// record under it (its "charge" line, its JSON chargeId) shows the id as
// the entry does, and is still found (looked up by the id as read).
func TestAttack54MaskDLQShowRecordChargeID(t *testing.T) {
	const id, account = "CHG-001234567890", "001234567890"
	body := `{"schemaVersion":1,"chargeId":"` + id + `","accountId":"` + account + `","amount":{"minor":2500,"currency":"INR"},"chargeType":"SMS_ALERT_FEE","dueDate":"2026-11-30"}`
	q, s, entryID := dlqWith(t, body, id)
	for _, asJSON := range []bool{false, true} {
		for _, by := range []string{entryID, id} {
			var out bytes.Buffer
			if err := Show(t.Context(), q, s, ShowOptions{ID: by, JSON: asJSON, Out: &out}); err != nil {
				t.Fatalf("show %s: %v", by, err)
			}
			got := out.String()
			if strings.Contains(got, "12345678") {
				t.Errorf("dlq show %s (json %v) shows the account:\n%s", by, asJSON, got)
			}
			if !strings.Contains(got, "CHG-********7890") || !strings.Contains(got, "IN_PROGRESS") {
				t.Errorf("dlq show %s (json %v): want the masked id and the record:\n%s", by, asJSON, got)
			}
		}
	}
}
