package statement

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/app/charge"
)

// A FrToDt written without an offset is the bank's wall-clock time:
// Options.Location says where; nil is UTC. A time with an offset keeps
// its own. BookingDate is the day as written, whatever the zone.
func TestNaiveFrToDtInLocation(t *testing.T) {
	ist, err := time.LoadLocation("Asia/Kolkata")
	if err != nil {
		t.Skip("no zone database:", err)
	}
	day := time.Date(2026, 11, 20, 0, 0, 0, 0, time.UTC)
	var buf bytes.Buffer
	if err := WriteCamt053(&buf, StatementInfo{ID: "STMT-TZ", Account: "FEES-001", Created: day,
		Period: Period{From: day, To: day.AddDate(0, 0, 1)}},
		[]Posting{{BankKey: "CHG-TZ-1", Account: "0012345678901", Amount: charge.Money{Minor: 2500, Currency: "INR"}, BookingDate: day, Reference: "R1"}}); err != nil {
		t.Fatal(err)
	}
	zulu := buf.String()
	naive := strings.NewReplacer("Z</FrDtTm>", "</FrDtTm>", "Z</ToDtTm>", "</ToDtTm>").Replace(zulu)
	if naive == zulu {
		t.Fatal("the written FrToDt has no Z to take off")
	}
	dates := strings.NewReplacer("<FrDtTm>2026-11-20T00:00:00Z</FrDtTm>", "<FrDt>2026-11-20</FrDt>",
		"<ToDtTm>2026-11-20T23:59:59Z</ToDtTm>", "<ToDt>2026-11-20</ToDt>").Replace(zulu)
	if dates == zulu {
		t.Fatal("the written FrToDt is not the one expected")
	}
	istPeriod := Period{From: time.Date(2026, 11, 19, 18, 30, 0, 0, time.UTC), To: time.Date(2026, 11, 20, 18, 30, 0, 0, time.UTC)}
	utcPeriod := Period{From: day, To: day.AddDate(0, 0, 1)}
	for _, c := range []struct {
		name, doc string
		loc       *time.Location
		want      Period
	}{
		{"naive, IST", naive, ist, istPeriod},
		{"naive, nil (UTC)", naive, nil, utcPeriod},
		{"naive, UTC", naive, time.UTC, utcPeriod},
		{"dates, IST", dates, ist, istPeriod},
		{"dates, nil (UTC)", dates, nil, utcPeriod},
		{"Z, IST (its own offset)", zulu, ist, utcPeriod},
	} {
		var posts []Posting
		h, err := Read(strings.NewReader(c.doc), "stmt.xml", Options{CollectionAccount: "FEES-001", Location: c.loc}, func(p Posting) error {
			posts = append(posts, p)
			return nil
		})
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if !h.Period.From.Equal(c.want.From) || !h.Period.To.Equal(c.want.To) {
			t.Errorf("%s: period [%s, %s), want [%s, %s)", c.name, h.Period.From, h.Period.To, c.want.From, c.want.To)
		}
		if h.Period.From.Location() != time.UTC || h.Period.To.Location() != time.UTC {
			t.Errorf("%s: period not in UTC: %v", c.name, h.Period)
		}
		if len(posts) != 1 || !posts[0].BookingDate.Equal(day) {
			t.Errorf("%s: postings %+v, want one booked %s (the day as written)", c.name, posts, day)
		}
	}
}
