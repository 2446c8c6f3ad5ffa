package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/finedge/idempotent-consumer/charge"
	"github.com/finedge/idempotent-consumer/service/backend"
	"github.com/finedge/idempotent-consumer/service/bulk"
	"github.com/finedge/idempotent-consumer/service/cli"
)

func runSend(ctx context.Context, env *cli.Env, args []string) error {
	f := cli.NewFlagSet(env, "send", "send [flags]")
	var (
		bc                    backend.Config
		id, account, cur, typ string
		due, bodyFile, file   string
		minor                 int64
		copies                int
		raw                   bool
	)
	bc.Bind(f)
	f.String(&id, "charge-id", "", "", "chargeId (the business key)")
	f.String(&account, "account", "", "", "accountId to debit")
	f.Flags().Int64Var(&minor, "amount-minor", 0, "amount in minor units (2500 = INR 25.00)")
	f.String(&cur, "currency", "", "INR", "ISO-4217 currency")
	f.String(&typ, "type", "", string(charge.SMSAlertFee), "charge type: SMS_ALERT_FEE, CHEQUE_BOOK_FEE, LOCKER_RENT")
	f.String(&due, "due", "", time.Now().UTC().Format(time.DateOnly), "due date YYYY-MM-DD")
	f.String(&bodyFile, "body-file", "", "", "send this file's bytes as the body, unchecked (- for stdin); for testing the DLQ path")
	f.Int(&copies, "copies", "", 1, "how many copies to send (simulates redelivery / producer retries)")
	f.String(&file, "file", "", "", "send every line of this file (NDJSON, one ChargeDueEvent per line; - for stdin), in batches; bad lines are reported and not sent")
	f.Bool(&raw, "raw", "", false, "with --file: send the lines unchecked (for testing the DLQ path)")
	if err := f.Parse(args, false); err != nil {
		return err
	}
	if file != "" {
		return sendFile(ctx, env, bc, file, raw)
	}
	var p cli.Problems
	bc.Check(&p)
	if copies < 1 || copies > 10000 {
		p.Add("--copies %d is outside 1-10000", copies)
	}
	var body []byte
	if bodyFile != "" {
		var err error
		if bodyFile == "-" {
			body, err = io.ReadAll(io.LimitReader(os.Stdin, 256<<10))
		} else {
			body, err = os.ReadFile(bodyFile)
		}
		if err != nil {
			p.Add("--body-file: %v", err)
		}
	} else {
		c, err := charge.ParseEvent(eventJSON(id, account, minor, cur, typ, due))
		if err != nil {
			p.Add("the charge is not valid: %v (see -h)", err)
		} else if body, err = charge.MarshalEvent(c); err != nil {
			p.Add("%v", err)
		}
	}
	if err := p.Err(); err != nil {
		return err
	}
	bc.Existing = bc.Kind == backend.Postgres // setup creates the schema; a producer role need not
	b, err := backend.Open(ctx, bc, 30*time.Second, false)
	if err != nil {
		return err
	}
	defer b.Close()
	for range copies {
		mid, err := b.Queue.Send(ctx, body, nil)
		if err != nil {
			return err
		}
		fmt.Fprintf(env.Stdout, "sent %s\n", mid)
	}
	return nil
}

// eventJSON builds the wire form from flags so that it is validated by the
// same parser the consumer uses.
func eventJSON(id, account string, minor int64, cur, typ, due string) []byte {
	return fmt.Appendf(nil, `{"chargeId":%q,"accountId":%q,"amount":{"minor":%d,"currency":%q},"chargeType":%q,"dueDate":%q}`,
		id, account, minor, cur, typ, due)
}

// sendFile is send --file: every line checked by the consumer's parser,
// sent in batches (SQS: 10 per call; SQL queues: 1,000 per transaction),
// bad lines reported by number on stderr (exit 1 if any), a progress line
// on a terminal, and how far it got if it stops early.
func sendFile(ctx context.Context, env *cli.Env, bc backend.Config, file string, raw bool) error {
	var p cli.Problems
	bc.Check(&p)
	if err := p.Err(); err != nil {
		return err
	}
	in := os.Stdin
	if file != "-" {
		var err error
		if in, err = os.Open(file); err != nil {
			return cli.Usagef("--file: %v", err)
		}
		defer in.Close()
	}
	bc.Existing = bc.Kind == backend.Postgres // setup creates the schema; a producer role need not
	b, err := backend.Open(ctx, bc, 30*time.Second, false)
	if err != nil {
		return err
	}
	defer b.Close()
	o := bulk.Options{BatchSize: 1000, Raw: raw, BadLine: func(n int, err error) {
		fmt.Fprintf(env.Stderr, "line %d: %s\n", n, charge.MaskText(err.Error()))
	}}
	if bc.Kind == backend.AWS {
		o.BatchSize = 10
	}
	if isTerminal(env.Stderr) {
		last := time.Now()
		o.Progress = func(r bulk.Report) {
			if time.Since(last) > 200*time.Millisecond {
				last = time.Now()
				fmt.Fprintf(env.Stderr, "\rsent %d of %d lines read (%.0f/s)   ", r.Sent, r.Lines, float64(r.Sent)/r.Elapsed.Seconds())
			}
		}
	}
	rep, err := bulk.Send(ctx, b.Queue, in, o)
	if o.Progress != nil {
		fmt.Fprintln(env.Stderr)
	}
	if err != nil {
		return fmt.Errorf("stopped after line %d: %d message(s) sent, lines after %d not sent (resume from there): %w",
			rep.Lines, rep.Sent, rep.LastSentLine, err)
	}
	fmt.Fprintf(env.Stdout, "sent %d message(s) from %d line(s) in %s; %d bad line(s)\n", rep.Sent, rep.Lines, rep.Elapsed.Round(time.Millisecond), rep.Bad)
	if rep.Bad > 0 {
		return fmt.Errorf("%d bad line(s) were not sent (listed above)", rep.Bad)
	}
	return nil
}

// isTerminal says whether w is a character device (a progress line there
// is read by a person; in a file or a pipe it is noise).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
