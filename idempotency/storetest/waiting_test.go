package storetest_test

import (
	"testing"

	"github.com/finedge/idempotent-consumer/idempotency/driver"
	"github.com/finedge/idempotent-consumer/idempotency/storetest"
	"github.com/finedge/idempotent-consumer/memstore"
)

// The reference store passes the WAITING topic.
func TestWaitingOnTheReferenceStore(t *testing.T) {
	s := memstore.New()
	storetest.Waiting(t, func(*testing.T) driver.Store { return s })
}
