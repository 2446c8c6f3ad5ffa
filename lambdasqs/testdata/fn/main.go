// Command fn is the function the package's process tests run under a local
// Runtime API server: lambdasqs.Handler over an SQLite store (FN_DB, shared
// by every process of a test), whose work appends the record's key to
// FN_EFFECTS (one line per effect) after sleeping FN_SLEEP when the body
// says "slow" (cut short by the context) or "stubborn" (not); "decline" fails for good, "flaky" fails without a final
// result. Permanent failures are dead-lettered to FN_DLQ (a line each)
// unless FN_REDRIVE is set.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"os"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"

	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/lambdasqs"
	"github.com/finedge/idempotent-consumer/queue"
	"github.com/finedge/idempotent-consumer/sqlite"
)

func duration(name string) time.Duration {
	d, err := time.ParseDuration(os.Getenv(name))
	if err != nil {
		log.Fatalf("%s: %v", name, err)
	}
	return d
}

func appendLine(file, line string) error {
	f, err := os.OpenFile(file, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	_, err = f.WriteString(line + "\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

func main() {
	ctx := context.Background()
	db, err := sqlite.Open(ctx, os.Getenv("FN_DB"), sqlite.OpenOptions{})
	if err != nil {
		log.Fatal(err)
	}
	guard, err := idempotency.NewGuard(sqlite.NewStore(db), idempotency.Options{Lease: duration("FN_LEASE"), SkewMargin: -1})
	if err != nil {
		log.Fatal(err)
	}
	sleep := duration("FN_SLEEP")
	opts := lambdasqs.Options{
		MinWork: duration("FN_MIN_WORK"),
		Margin:  500 * time.Millisecond,
		Key: func(m events.SQSMessage) (string, error) {
			var v struct{ ID string }
			err := json.Unmarshal([]byte(m.Body), &v)
			return v.ID, err
		},
	}
	if os.Getenv("FN_REDRIVE") == "" {
		opts.DeadLetter = func(_ context.Context, m events.SQSMessage, r queue.Reason) error {
			return appendLine(os.Getenv("FN_DLQ"), m.MessageId+" "+string(r.Code))
		}
	}
	h, err := lambdasqs.Handler(guard, opts, func(ctx context.Context, m events.SQSMessage) error {
		var v struct{ ID, Kind string }
		if err := json.Unmarshal([]byte(m.Body), &v); err != nil {
			return err
		}
		switch v.Kind {
		case "slow":
			select {
			case <-time.After(sleep):
			case <-ctx.Done():
				return ctx.Err()
			}
		case "stubborn": // a call already sent: it goes on past the deadline
			time.Sleep(sleep)
		case "decline":
			return fmt.Errorf("%w: declined", idempotency.ErrPermanent)
		case "flaky":
			return errors.New("bank answered 503")
		}
		return appendLine(os.Getenv("FN_EFFECTS"), strings.TrimSpace(v.ID))
	})
	if err != nil {
		log.Fatal(err)
	}
	lambda.Start(h)
}
