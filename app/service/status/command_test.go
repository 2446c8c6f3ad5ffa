package status

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/idempotency/driver"
	"github.com/finedge/idempotent-consumer/memstore"
)

// notLister is a store that cannot list stuck claims.
type notLister struct{ driver.Store }

func TestInspectAndStuck(t *testing.T) {
	store := memstore.New()
	now := time.Now()
	if _, err := store.Claim(t.Context(), driver.ClaimRequest{Key: "CHG-STUCK", Token: "t1", Fingerprint: "fp", Now: now.Add(-time.Hour),
		LeaseExpiredBy: now.Add(-time.Hour), LeaseUntil: now.Add(-50 * time.Minute), ExpiresAt: now.Add(24 * time.Hour)}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		run     func(out *bytes.Buffer) error
		want    string // in the output
		wantErr string
	}{
		{"inspect", func(out *bytes.Buffer) error { return Inspect(t.Context(), store, "CHG-STUCK", false, now, out) }, "CHG-STUCK", ""},
		{"inspect json", func(out *bytes.Buffer) error { return Inspect(t.Context(), store, "CHG-STUCK", true, now, out) }, `"IN_PROGRESS"`, ""},
		{"inspect none", func(out *bytes.Buffer) error { return Inspect(t.Context(), store, "CHG-NONE", false, now, out) }, "",
			"no idempotency record for CHG-NONE: never claimed, released after a transient failure, or past its retention"},
		{"stuck", func(out *bytes.Buffer) error { return Stuck(t.Context(), store, "memory", 5, false, now, out) }, "CHG-STUCK", ""},
		{"stuck json", func(out *bytes.Buffer) error { return Stuck(t.Context(), store, "memory", 5, true, now, out) }, "CHG-STUCK", ""},
		{"stuck unlisted", func(out *bytes.Buffer) error {
			return Stuck(t.Context(), notLister{store}, "dynamodb", 5, false, now, out)
		}, "",
			"the dynamodb store cannot list stuck claims"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			err := tc.run(&out)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || !strings.Contains(out.String(), tc.want) {
				t.Fatalf("err = %v; output lacks %q:\n%s", err, tc.want, out.String())
			}
			if strings.HasSuffix(tc.name, "json") && !json.Valid(out.Bytes()) {
				t.Fatalf("not JSON: %s", out.String())
			}
		})
	}
}
