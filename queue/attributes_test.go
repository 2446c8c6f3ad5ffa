package queue_test

import (
	"maps"
	"testing"

	"github.com/finedge/idempotent-consumer/queue"
)

// Stored attributes of any shape read as strings, or as none: never an
// error that would hold the message (and every message behind it) back.
func TestDecodeAttributesReadsAnyColumn(t *testing.T) {
	for _, tc := range []struct {
		raw  string
		want map[string]string
	}{
		{``, nil},
		{`{"origin":"batch-7"}`, map[string]string{"origin": "batch-7"}},
		{`{"origin":7,"ok":true,"n":null,"o":{"a":1}}`, map[string]string{"origin": "7", "ok": "true", "n": "", "o": `{"a":1}`}},
		{`["not","an","object"]`, nil},
		{`not json`, nil},
		{`{}`, nil},
	} {
		if got := queue.DecodeAttributes([]byte(tc.raw)); !maps.Equal(got, tc.want) {
			t.Errorf("DecodeAttributes(%s) = %v, want %v", tc.raw, got, tc.want)
		}
	}
}
