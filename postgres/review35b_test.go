package postgres_test

import (
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/internal/dbtest"
	"github.com/finedge/idempotent-consumer/postgres"
	"github.com/finedge/idempotent-consumer/postgres/pgtest"
	"github.com/finedge/idempotent-consumer/queue"
)

// REVIEW 35b: 03343fd reads stored attributes with queue.DecodeAttributes
// on receive ({"origin": 7} reads as origin "7"), but the DLQ scan still
// uses json.Unmarshal into map[string]string, which sets a non-string
// value to "". The sweep (max receives) copies the attributes column to
// the DLQ as it is, so such a message, once redriven, comes back with
// origin "" instead of "7": the redrive rewrites what the receive would
// have handed out.
func TestReview35bRedriveBlanksANonStringAttributeTheReceiveKeeps(t *testing.T) {
	db := pgtest.Open(t)
	name := dbtest.Name("r35battrs")
	q, err := postgres.NewQueue(db, postgres.QueueOptions{Name: name, VisibilityTimeout: time.Minute, WaitTime: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	// As the sweep leaves it: the row's own attributes, no dead-letter ones.
	if _, err := db.Pool().Exec(t.Context(), `insert into queue_messages (queue, body, attributes) values ($1, '{"chargeId":"CHG-R35B"}', '{"origin": 7}')`, name+"-dlq"); err != nil {
		t.Fatal(err)
	}
	rep, err := q.Redrive(t.Context(), queue.RedriveOptions{})
	if err != nil || rep.Moved != 1 {
		t.Fatalf("redrive: %+v %v", rep, err)
	}
	msgs, err := q.Receive(t.Context(), 10)
	if err != nil || len(msgs) != 1 {
		t.Fatalf("receive: %d %v", len(msgs), err)
	}
	if got, want := msgs[0].Attributes["origin"], queue.DecodeAttributes([]byte(`{"origin": 7}`))["origin"]; got != want {
		t.Fatalf("redriven message's origin = %q; the receive reads the same stored attributes as %q", got, want)
	}
}
