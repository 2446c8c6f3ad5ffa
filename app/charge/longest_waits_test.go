package charge_test

import (
	"slices"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/app/charge"
)

func TestLongestWaits(t *testing.T) {
	const h = time.Hour
	rules := func(s string) []charge.RetryRule {
		r, err := charge.ParseRetryRules(s)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	for _, tc := range []struct {
		name string
		p    *charge.RetryPolicy
		want []time.Duration
	}{
		{"none", nil, nil},
		{"72h×3, default jitter", &charge.RetryPolicy{Rules: rules("INSUFFICIENT_FUNDS=72h×3")},
			[]time.Duration{79*h + 12*time.Minute + time.Second, 79*h + 12*time.Minute + time.Second, 79*h + 12*time.Minute + time.Second}},
		{"capped by the attempts, longest first", &charge.RetryPolicy{Rules: rules("INSUFFICIENT_FUNDS=24h×3,LIMIT_EXCEEDED=48h×2"), MaxAttempts: 3, Jitter: charge.NoJitter},
			[]time.Duration{48*h + time.Second, 48*h + time.Second}},
		{"capped by the window", &charge.RetryPolicy{Rules: rules("INSUFFICIENT_FUNDS=72h×3"), Window: 100 * h, Jitter: charge.NoJitter},
			[]time.Duration{72*h + time.Second, 28*h - time.Second}},
		{"refused policy", &charge.RetryPolicy{Rules: rules("INSUFFICIENT_FUNDS=72h×3"), Window: time.Hour}, nil},
	} {
		if got := tc.p.LongestWaits(); !slices.Equal(got, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}
