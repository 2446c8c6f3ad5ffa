// Package bulk puts a file of ChargeDueEvents (one JSON object per line) on
// a queue in batches: every line checked by the consumer's own strict
// parser first (unless raw), bad lines reported with their numbers and
// never sent, and a report of how far it got when it stops early.
package bulk

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/queue"
)

// MaxLine is the longest line read (a ChargeDueEvent is at most 16 KiB).
const MaxLine = 256 << 10

// Options configure Send.
type Options struct {
	// BatchSize is how many messages go in one SendBatch (SQS: 10; SQL
	// queues: one transaction each). Default 10.
	BatchSize int
	// Raw sends every non-empty line as it is, unchecked (to test the DLQ).
	Raw bool
	// BadLine is called for every refused line (1-based number).
	BadLine func(line int, err error)
	// Progress, when set, is called after every batch.
	Progress func(Report)
}

// Report is how far a Send got.
type Report struct {
	Lines int `json:"lines"` // lines read (empty ones included)
	Sent  int `json:"sent"`  // messages on the queue
	Bad   int `json:"bad"`   // lines refused
	// LastSentLine is the number of the last line certainly on the queue
	// (0: none): an interrupted run resumes after it.
	LastSentLine int           `json:"lastSentLine"`
	Elapsed      time.Duration `json:"-"`
}

// ErrLineTooLong marks a line over MaxLine.
var ErrLineTooLong = fmt.Errorf("line longer than %d bytes", MaxLine)

// Send reads r to the end (or until ctx ends or a send fails) and sends
// its good lines to q in order.
func Send(ctx context.Context, q queue.Sender, r io.Reader, o Options) (Report, error) {
	if o.BatchSize <= 0 {
		o.BatchSize = 10
	}
	start := time.Now()
	var rep Report
	br := bufio.NewReaderSize(r, 64<<10)
	batch := make([]queue.Outgoing, 0, o.BatchSize)
	lines := make([]int, 0, o.BatchSize) // the line number of each batched message
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		n, err := q.SendBatch(ctx, batch)
		rep.Sent += n
		if n > 0 {
			rep.LastSentLine = lines[n-1]
		}
		batch, lines = batch[:0], lines[:0]
		rep.Elapsed = time.Since(start)
		if o.Progress != nil {
			o.Progress(rep)
		}
		return err
	}
	for {
		if err := ctx.Err(); err != nil {
			rep.Elapsed = time.Since(start)
			return rep, err
		}
		line, err := readLine(br)
		if errors.Is(err, io.EOF) && line == nil {
			break
		}
		rep.Lines++
		switch {
		case errors.Is(err, ErrLineTooLong):
			rep.Bad++
			if o.BadLine != nil {
				o.BadLine(rep.Lines, err)
			}
			continue
		case err != nil && !errors.Is(err, io.EOF):
			rep.Elapsed = time.Since(start)
			return rep, fmt.Errorf("read line %d: %w", rep.Lines, err)
		}
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		body := line
		if !o.Raw {
			c, perr := charge.ParseEvent(line)
			if perr != nil {
				rep.Bad++
				if o.BadLine != nil {
					o.BadLine(rep.Lines, perr)
				}
				continue
			}
			if body, err = charge.MarshalEvent(c); err != nil {
				return rep, err
			}
		} else {
			body = append([]byte(nil), line...)
		}
		batch = append(batch, queue.Outgoing{Body: body})
		lines = append(lines, rep.Lines)
		if len(batch) == o.BatchSize {
			if err := flush(); err != nil {
				return rep, err
			}
		}
	}
	err := flush()
	rep.Elapsed = time.Since(start)
	return rep, err
}

// readLine returns the next line without its newline (and the io.EOF of a
// last line without one); a line over MaxLine is read to its end and
// refused with ErrLineTooLong.
func readLine(br *bufio.Reader) ([]byte, error) {
	var line []byte
	tooLong := false
	for {
		chunk, err := br.ReadSlice('\n')
		if !tooLong && len(line)+len(chunk) > MaxLine {
			tooLong, line = true, nil
		}
		if !tooLong {
			line = append(line, chunk...)
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return nil, err
		}
		if tooLong {
			return []byte{}, ErrLineTooLong
		}
		if err != nil && len(line) == 0 {
			return nil, io.EOF
		}
		if n := len(line); n > 0 && line[n-1] == '\n' {
			line = line[:n-1]
			if n := len(line); n > 0 && line[n-1] == '\r' {
				line = line[:n-1]
			}
		}
		return line, err
	}
}
