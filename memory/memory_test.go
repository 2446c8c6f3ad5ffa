package memory_test

import (
	"testing"

	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/idempotency/storetest"
	"github.com/finedge/idempotent-consumer/memory"
)

func TestConformance(t *testing.T) {
	s := memory.New()
	storetest.Run(t, func(*testing.T) idempotency.Store { return s })
}

func BenchmarkClaim(b *testing.B) { storetest.Benchmark(b, memory.New()) }
