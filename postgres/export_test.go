package postgres

// BatchSender is what a claiming receive sends its batches through.
type BatchSender = batchSender

// WrapConn puts w between q's claiming receives and their connections.
func WrapConn(q *Queue, w func(BatchSender) BatchSender) { q.wrapConn = w }

// HoldSettles makes q's next settle group wait until release is called,
// so that every finish started meanwhile joins it; pending counts them.
func HoldSettles(q *Queue) (pending func() int, release func()) {
	q.settler.hold = make(chan struct{})
	return func() int {
			q.settler.mu.Lock()
			defer q.settler.mu.Unlock()
			return len(q.settler.pending)
		}, func() {
			close(q.settler.hold)
		}
}
