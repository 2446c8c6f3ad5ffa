package charge

import (
	"strings"

	"github.com/finedge/idempotent-consumer/idempotency/driver"
)

// RecordSummary is what rec keeps of its charge in clear: its Summary, or,
// for a record written before summaries, the amount and masked account of
// the notice a DEBITED_NOTIFICATION_FAILED record keeps. ok is false when
// it keeps neither (reconciliation then matches it by key only, unless the
// posting's narrative lets the fingerprint be checked; the console shows
// "—").
func RecordSummary(rec driver.Record) (Summary, bool) {
	if s, ok := ParseSummary(rec.Summary); ok {
		return s, true
	}
	n, ok := PendingNotice(rec.Status, rec.Detail)
	if !ok || !n.Amount.Currency.Valid() {
		return Summary{}, false
	}
	s := Summary{Amount: Money{Minor: n.Amount.Minor, Currency: n.Amount.Currency}}
	if r := []rune(n.Account); len(r) > 4 && !strings.ContainsRune(string(r[len(r)-4:]), '*') {
		s.Last4 = string(r[len(r)-4:])
	}
	return s, true
}
