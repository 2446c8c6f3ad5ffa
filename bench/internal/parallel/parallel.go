// Package parallel runs a benchmark's requests on a number of workers.
package parallel

import (
	"sync"
	"sync/atomic"
)

// Do runs fn(0..n-1) on workers goroutines; the first error wins (each
// worker stops at its own first error; the others run on).
func Do(workers, n int, fn func(int) error) error {
	var next atomic.Int64
	var once sync.Once
	var first error
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				if err := fn(i); err != nil {
					once.Do(func() { first = err })
					return
				}
			}
		})
	}
	wg.Wait()
	return first
}
