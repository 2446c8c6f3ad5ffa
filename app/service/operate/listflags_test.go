package operate

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/app/service/cli"
)

func TestListFlags(t *testing.T) {
	now := time.Now()
	for _, tc := range []struct {
		name  string
		l     ListFlags
		usage string
	}{
		{name: "defaults", l: ListFlags{Limit: 100}},
		{name: "older than", l: ListFlags{Limit: 1, OlderThan: time.Hour, Codes: "debit_failed", IDs: "A"}},
		{name: "no limit", l: ListFlags{Limit: 0}, usage: "--limit must be at least 1 and --older-than not negative"},
		{name: "negative age", l: ListFlags{Limit: 1, OlderThan: -time.Second}, usage: "--older-than not negative"},
		{name: "bad code", l: ListFlags{Limit: 1, Codes: "nonsense"}, usage: "nonsense"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, err := tc.l.Options(now)
			var ue *cli.UsageError
			if tc.usage != "" {
				if !errors.As(err, &ue) || !strings.Contains(err.Error(), tc.usage) {
					t.Fatalf("Options: %v; want a usage error naming %q", err, tc.usage)
				}
				return
			}
			if err != nil || tc.l.OlderThan > 0 && !o.Before.Equal(now.Add(-tc.l.OlderThan)) || tc.l.OlderThan == 0 && !o.Before.IsZero() {
				t.Fatalf("Options: %v, %+v", err, o)
			}
		})
	}
	q := deadLettered(t, "A", "B", "C")
	for _, tc := range []struct {
		name         string
		l            ListFlags
		shown, total int
	}{
		{"two of three", ListFlags{Limit: 2}, 2, 3},
		{"json", ListFlags{Limit: 2, JSON: true}, 2, 3},
		{"one charge", ListFlags{Limit: 5, IDs: "B", JSON: true}, 1, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, err := tc.l.Options(time.Now())
			if err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			if err := tc.l.ListTo(t.Context(), q, o, &out); err != nil {
				t.Fatal(err)
			}
			if !tc.l.JSON {
				if !strings.Contains(out.String(), "A") || strings.Count(out.String(), "debit_failed") != tc.shown {
					t.Fatalf("listing:\n%s", out.String())
				}
				return
			}
			var got ListJSON
			if err := json.Unmarshal(out.Bytes(), &got); err != nil || len(got.Entries) != tc.shown || got.Total != tc.total {
				t.Fatalf("listing %+v, %v:\n%s", got, err, out.String())
			}
		})
	}
}
