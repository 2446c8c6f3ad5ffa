package bulk

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/app/service/backend"
	"github.com/finedge/idempotent-consumer/app/service/cli"
)

// SendOptions are chargerecovery send's flags: the backend's, the charge
// (default INR, SMS_ALERT_FEE, due today in UTC), one copy, or a file of
// lines (File) or a body sent unchecked (BodyFile) instead.
type SendOptions struct {
	Backend        backend.Config
	Event          Event
	BodyFile, File string
	Copies         int
	Raw            bool
}

// Bind defines the flags on f.
func (o *SendOptions) Bind(f *cli.FlagSet) {
	o.Backend.Bind(f)
	e := &o.Event
	f.String(&e.ID, "charge-id", "", "", "chargeId (the business key)")
	f.String(&e.Account, "account", "", "", "accountId to debit")
	f.Flags().Int64Var(&e.Minor, "amount-minor", 0, "amount in minor units (2500 = INR 25.00)")
	f.String(&e.Currency, "currency", "", "INR", "ISO-4217 currency")
	f.String(&e.Type, "type", "", string(charge.SMSAlertFee), "charge type: SMS_ALERT_FEE, CHEQUE_BOOK_FEE, LOCKER_RENT")
	f.String(&e.Due, "due", "", time.Now().UTC().Format(time.DateOnly), "due date YYYY-MM-DD")
	f.String(&o.BodyFile, "body-file", "", "", "send this file's bytes as the body, unchecked (- for stdin); for testing the DLQ path")
	f.Int(&o.Copies, "copies", "", 1, "how many copies to send (simulates redelivery / producer retries)")
	f.String(&o.File, "file", "", "", "send every line of this file (NDJSON, one ChargeDueEvent per line; - for stdin), in batches; bad lines are reported and not sent")
	f.Bool(&o.Raw, "raw", "", false, "with --file: send the lines unchecked (for testing the DLQ path)")
}

// Run puts o's charge (its copies) on the queue of a backend that exists,
// a line "sent ID" each on stdout; with o.File, every line of the file
// (SendFile: SQS takes 10 messages a call, the SQL queues 1,000 a
// transaction), bad lines reported on stderr.
func Run(ctx context.Context, o SendOptions, stdin io.Reader, stdout, stderr io.Writer) error {
	var p cli.Problems
	o.Backend.Check(&p)
	var body []byte
	in := stdin
	if o.File == "" {
		if o.Copies < 1 || o.Copies > 10000 {
			p.Add("--copies %d is outside 1-10000", o.Copies)
		}
		var err error
		if body, err = Body(o.Event, o.BodyFile, stdin); err != nil {
			p.Add("%v", err)
		}
	}
	if err := p.Err(); err != nil {
		return err
	}
	if o.File != "" && o.File != "-" {
		f, err := os.Open(o.File)
		if err != nil {
			return cli.Usagef("--file: %w", err)
		}
		defer f.Close()
		in = f
	}
	// setup creates the file or schema; send never does (a typo in --db
	// would queue the charge where no consumer looks).
	o.Backend.Existing = true
	b, err := backend.Open(ctx, o.Backend, 30*time.Second, false)
	if err != nil {
		return err
	}
	defer b.Close()
	if o.File != "" {
		r := FileRun{Options: Options{BatchSize: 1000, Raw: o.Raw}, Out: stdout, Err: stderr, Progress: cli.IsTerminal(stderr)}
		if o.Backend.Kind == backend.AWS {
			r.BatchSize = 10
		}
		return SendFile(ctx, b.Queue, in, r)
	}
	for range o.Copies {
		mid, err := b.Queue.Send(ctx, body, nil)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "sent %s\n", mid)
	}
	return nil
}
