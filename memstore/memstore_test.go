package memstore_test

import (
	"testing"

	"github.com/finedge/idempotent-consumer/idempotency/driver"
	"github.com/finedge/idempotent-consumer/idempotency/storetest"
	"github.com/finedge/idempotent-consumer/memstore"
)

func TestConformance(t *testing.T) {
	s := memstore.New()
	storetest.Run(t, func(*testing.T) driver.Store { return s })
}

func BenchmarkClaim(b *testing.B) { storetest.Benchmark(b, memstore.New()) }
