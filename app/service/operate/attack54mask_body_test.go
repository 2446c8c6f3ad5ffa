package operate

import (
	"strings"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/queue"
)

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
