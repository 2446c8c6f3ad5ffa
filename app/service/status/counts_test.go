package status_test

import (
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/app/service/status"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
	"github.com/finedge/idempotent-consumer/memqueue"
	"github.com/finedge/idempotent-consumer/memstore"
	"github.com/finedge/idempotent-consumer/sqlite"
	"github.com/finedge/idempotent-consumer/sqlite/sqlitetest"
)

// A store that counts every state reports DONE even at 0: status on a
// fresh SQLite file (or memory) counts it, without the note meant for
// DynamoDB, which does not count DONE.
func TestAStoreWithNoDoneRecordsStillCountsDone(t *testing.T) {
	db := sqlitetest.Open(t, "c.db", sqlite.OpenOptions{})
	for name, store := range map[string]driver.Store{"sqlite": sqlite.NewStore(db), "memory": memstore.New()} {
		rep, err := status.Collect(t.Context(), status.Sources{Queue: memqueue.New(memqueue.Options{}), Store: store, Now: time.Now()})
		if err != nil {
			t.Fatal(err)
		}
		for _, st := range driver.States {
			if n, ok := rep.Records[st]; !ok || n != 0 {
				t.Errorf("%s: %s counted %d (present %v), want 0, counted", name, st, n, ok)
			}
		}
		if rep.RecordsNote != "" {
			t.Errorf("%s: the note %q, want none (every state is counted)", name, rep.RecordsNote)
		}
	}
}
