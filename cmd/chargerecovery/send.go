package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/finedge/idempotent-consumer/charge"
	"github.com/finedge/idempotent-consumer/internal/backend"
	"github.com/finedge/idempotent-consumer/internal/cli"
)

func runSend(ctx context.Context, env *cli.Env, args []string) error {
	f := cli.NewFlagSet(env, "send", "send [flags]")
	var (
		bc                    backend.Config
		id, account, cur, typ string
		due, bodyFile         string
		minor                 int64
		copies                int
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
	if err := f.Parse(args, false); err != nil {
		return err
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
