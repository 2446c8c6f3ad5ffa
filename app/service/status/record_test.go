package status_test

import (
	"bytes"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/app/service/status"
	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
)

// A record written before answers were cleaned may hold terminal escapes:
// inspect prints it without them.
func TestPrintRecordDropsControlCharacters(t *testing.T) {
	now := time.Now()
	var out bytes.Buffer
	status.PrintRecord(&out, driver.Record{Key: "CHG-1", State: driver.StateFailed, Status: "FAILED",
		Detail: "debit declined: \x1b[2J\x1b]0;owned\x07FROZEN", History: []string{"gen 1 \x1b[31mFAILED"},
		Fingerprint: "abc", Token: "t", UpdatedAt: now}, now)
	if strings.ContainsAny(out.String(), "\x1b\x07") {
		t.Errorf("inspect printed control characters:\n%q", out.String())
	}
	if !strings.Contains(out.String(), "debit declined: [2J]0;ownedFROZEN") {
		t.Errorf("the detail is gone:\n%s", out.String())
	}
}

// A fingerprint is shown short: the key that wrote it and a few digits,
// never the whole digest. The forms are the ones package idempotency
// writes, keyed (Fingerprinter) and unkeyed (Fingerprint).
func TestShortFingerprintShowsTheKeyAndAFewDigits(t *testing.T) {
	fp, err := idempotency.NewFingerprinter(bytes.Repeat([]byte("k"), idempotency.MinFingerprintKey))
	if err != nil {
		t.Fatal(err)
	}
	keyed := fp.Sum("CHG-1", "0012340056789")
	short := status.ShortFingerprint(keyed)
	if !strings.HasPrefix(short, "hs256:"+fp.KeyID()+":") || !strings.HasSuffix(short, "…") {
		t.Errorf("ShortFingerprint(%s) = %s, want hs256:%s: and a few digits", keyed, short, fp.KeyID())
	}
	if strings.Contains(short, keyed[len(keyed)-16:]) || len(short) > len("hs256:")+len(fp.KeyID())+1+8+len("…") {
		t.Errorf("ShortFingerprint shows too much of the digest: %s", short)
	}
	unkeyed := idempotency.Fingerprint("CHG-1")
	if got, want := status.ShortFingerprint(unkeyed), unkeyed[:8]+"… (unkeyed)"; got != want {
		t.Errorf("ShortFingerprint(%s) = %s, want %s", unkeyed, got, want)
	}
}

func TestWaitingRecordsSayWhatTheyWaitFor(t *testing.T) {
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	at := now.Add(24 * time.Hour)
	for _, tt := range []struct {
		name   string
		r      driver.Record
		want   string
		absent string
	}{
		{"a retry", driver.Record{Key: "c1", State: driver.StateWaiting, LeaseUntil: at, Status: "RETRY_SCHEDULED",
			Detail: "next attempt at 2026-12-02T10:00:00Z (attempt 2 of 4, after INSUFFICIENT_FUNDS)"},
			"next attempt at 2026-12-02T10:00:00Z (attempt 2 of 4, after INSUFFICIENT_FUNDS) (in 24h0m0s)", ""},
		{"a notice's lead", driver.Record{Key: "c2", State: driver.StateWaiting, LeaseUntil: at, Status: "NOTICE_SENT",
			Detail: "notice sent at 2026-12-01T10:00:00Z, debit on or after 2026-12-02T10:00:00Z"},
			"notice sent at 2026-12-01T10:00:00Z, debit on or after 2026-12-02T10:00:00Z (in 24h0m0s)", ""},
		{"due", driver.Record{Key: "c3", State: driver.StateWaiting, LeaseUntil: now.Add(-time.Minute), Status: "RETRY_SCHEDULED", Detail: "next attempt at 2026-12-01T09:59:00Z (attempt 3 of 4, after INSUFFICIENT_FUNDS)"},
			"due: the next delivery resumes it", ""},
		{"a final record has no schedule", driver.Record{Key: "c4", State: driver.StateDone, LeaseUntil: at, Status: "DEBITED"}, "", "schedule"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := status.WaitText(tt.r, now); tt.want != "" && !strings.Contains(got, tt.want) || tt.want == "" && got != "" {
				t.Fatalf("WaitText = %q, want it to say %q", got, tt.want)
			}
			var b strings.Builder
			status.PrintRecord(&b, tt.r, now)
			if tt.want != "" && !strings.Contains(b.String(), "schedule") || tt.absent != "" && strings.Contains(b.String(), tt.absent) {
				t.Fatalf("inspect printed:\n%s", b.String())
			}
		})
	}
}

// Issue 54 (the newcomer's trial): stuck on the command line has the
// month-end columns the console's Stuck page has — amount, masked account,
// generation — from the record's summary; "-" where a record keeps none.
func TestPrintStuckHasTheMonthEndColumns(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	recs := []driver.Record{
		{Key: "CHG-S-1", State: driver.StateInProgress, Summary: "2500 INR 7890", Generation: 2, Attempt: 3,
			LeaseUntil: now.Add(-time.Minute), CreatedAt: now.Add(-time.Hour)},
		{Key: "CHG-S-2", State: driver.StateInProgress, LeaseUntil: now.Add(-2 * time.Minute), CreatedAt: now.Add(-time.Hour)},
	}
	var b strings.Builder
	if err := status.PrintStuck(&b, recs, 2, now); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"AMOUNT", "ACCOUNT", "GEN", "INR 25.00", "****7890"} {
		if !strings.Contains(out, want) {
			t.Errorf("stuck lacks %q:\n%s", want, out)
		}
	}
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "CHG-S-1") && !regexp.MustCompile(`INR 25\.00\s+\*\*\*\*7890\s+2\s`).MatchString(line) {
			t.Errorf("CHG-S-1's row: %q", line)
		}
		if strings.HasPrefix(line, "CHG-S-2") && !regexp.MustCompile(`CHG-S-2\s+-\s+-\s+1\s`).MatchString(line) {
			t.Errorf("CHG-S-2's row (no summary, generation 1): %q", line)
		}
	}
}
