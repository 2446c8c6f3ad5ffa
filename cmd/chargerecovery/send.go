package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/app/service/backend"
	"github.com/finedge/idempotent-consumer/app/service/bulk"
	"github.com/finedge/idempotent-consumer/app/service/cli"
)

func runSend(ctx context.Context, env *cli.Env, args []string) error {
	f := cli.NewFlagSet(env, "send", "send [flags]")
	var (
		bc             backend.Config
		e              bulk.Event
		bodyFile, file string
		copies         int
		raw            bool
	)
	bc.Bind(f)
	f.String(&e.ID, "charge-id", "", "", "chargeId (the business key)")
	f.String(&e.Account, "account", "", "", "accountId to debit")
	f.Flags().Int64Var(&e.Minor, "amount-minor", 0, "amount in minor units (2500 = INR 25.00)")
	f.String(&e.Currency, "currency", "", "INR", "ISO-4217 currency")
	f.String(&e.Type, "type", "", string(charge.SMSAlertFee), "charge type: SMS_ALERT_FEE, CHEQUE_BOOK_FEE, LOCKER_RENT")
	f.String(&e.Due, "due", "", time.Now().UTC().Format(time.DateOnly), "due date YYYY-MM-DD")
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
	body, err := bulk.Body(e, bodyFile, os.Stdin)
	if err != nil {
		p.Add("%v", err)
	}
	if err := p.Err(); err != nil {
		return err
	}
	// setup creates the file or schema; send never does (a typo in --db
	// would queue the charge where no consumer looks).
	bc.Existing = true
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

// sendFile is send --file (bulk.SendFile): SQS takes 10 messages a call,
// the SQL queues 1,000 a transaction.
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
	// setup creates the file or schema; send never does (a typo in --db
	// would queue the charge where no consumer looks).
	bc.Existing = true
	b, err := backend.Open(ctx, bc, 30*time.Second, false)
	if err != nil {
		return err
	}
	defer b.Close()
	o := bulk.FileRun{Options: bulk.Options{BatchSize: 1000, Raw: raw}, Out: env.Stdout, Err: env.Stderr, Progress: cli.IsTerminal(env.Stderr)}
	if bc.Kind == backend.AWS {
		o.BatchSize = 10
	}
	return bulk.SendFile(ctx, b.Queue, in, o)
}
