package bulk

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/queue"
)

// Event is the ChargeDueEvent chargerecovery send builds from its flags.
type Event struct {
	ID, Account, Currency, Type, Due string
	Minor                            int64
}

// JSON is the wire form of e, so that it is validated by the same parser
// the consumer uses.
func (e Event) JSON() []byte {
	return fmt.Appendf(nil, `{"chargeId":%q,"accountId":%q,"amount":{"minor":%d,"currency":%q},"chargeType":%q,"dueDate":%q}`,
		e.ID, e.Account, e.Minor, e.Currency, e.Type, e.Due)
}

// Body is the message send puts on the queue: the bytes of bodyFile as
// they are ("-": stdin, 256 KiB at most; for testing the DLQ path), or
// else e, checked by the consumer's parser. The error says what is wrong,
// in the words of send's flags.
func Body(e Event, bodyFile string, stdin io.Reader) ([]byte, error) {
	if bodyFile != "" {
		var body []byte
		var err error
		if bodyFile == "-" {
			body, err = io.ReadAll(io.LimitReader(stdin, 256<<10))
		} else {
			body, err = os.ReadFile(bodyFile)
		}
		if err != nil {
			return nil, fmt.Errorf("--body-file: %v", err)
		}
		return body, nil
	}
	c, err := charge.ParseEvent(e.JSON())
	if err != nil {
		return nil, fmt.Errorf("the charge is not valid: %v (see -h)", err)
	}
	return charge.MarshalEvent(c)
}

// FileRun is send --file as the command line runs it.
type FileRun struct {
	Options
	// Out gets the summary; Err each bad line (masked) and, with
	// Progress, a progress line (for a terminal).
	Out, Err io.Writer
	Progress bool
}

// SendFile is send --file: every line of in checked by the consumer's
// parser (unless Raw), sent in batches, bad lines reported by number on
// o.Err (an error if any), a progress line where o.Progress, and how far
// it got if it stops early.
func SendFile(ctx context.Context, q queue.Sender, in io.Reader, o FileRun) error {
	o.BadLine = func(n int, err error) {
		fmt.Fprintf(o.Err, "line %d: %s\n", n, charge.MaskText(err.Error()))
	}
	if o.Progress {
		last := time.Now()
		o.Options.Progress = func(r Report) {
			if time.Since(last) > 200*time.Millisecond {
				last = time.Now()
				fmt.Fprintf(o.Err, "\rsent %d of %d lines read (%.0f/s)   ", r.Sent, r.Lines, float64(r.Sent)/r.Elapsed.Seconds())
			}
		}
	}
	rep, err := Send(ctx, q, in, o.Options)
	if o.Options.Progress != nil {
		fmt.Fprintln(o.Err)
	}
	if err != nil {
		return fmt.Errorf("stopped after line %d: %d message(s) sent, lines after %d not sent (resume from there): %w",
			rep.Lines, rep.Sent, rep.LastSentLine, err)
	}
	fmt.Fprintf(o.Out, "sent %d message(s) from %d line(s) in %s; %d bad line(s)\n", rep.Sent, rep.Lines, rep.Elapsed.Round(time.Millisecond), rep.Bad)
	if rep.Bad > 0 {
		return fmt.Errorf("%d bad line(s) were not sent (listed above)", rep.Bad)
	}
	return nil
}
