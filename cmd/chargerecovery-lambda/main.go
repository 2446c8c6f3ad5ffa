// Command chargerecovery-lambda is the charge consumer as an AWS Lambda
// function triggered by SQS (runtime provided.al2023, the binary named
// bootstrap): each ChargeDueEvent of a batch goes through the charge
// service (claim on DynamoDB, debit, notify, record) as chargerecovery
// serve's do, and the outcome → action table of chargehandler decides what
// becomes of its record: acked records are deleted by the event source
// mapping, retried ones are named in the response's batchItemFailures, and
// dead-lettered ones are sent to the DLQ (IC_DLQ) with their reason code.
//
// At start it runs serve's preflight (the table and the queues answer, a
// multi-Region table is run as configured, records outlive the messages
// that could repeat them), the mapping check below, and the wait check.
// A waiting charge's message (IC_NOTICE_LEAD, then IC_RETRY_DECLINES'
// delays) is kept as serve keeps it: hidden on its first receive (at most
// 12 hours), started over on the next (a copy with its not-before sent to
// IC_QUEUE, which must be the queue the event source mapping reads, and
// the original deleted), so that no wait adds to the message's age or
// receive count (lambdasqs.Options.Requeue). The wait check then refuses
// only what even that cannot keep: one hide as long as the queue's
// MessageRetentionPeriod, or a maxReceiveCount under 2
// (queue.CheckWaitWithinQueue, resetsAge). Any of them failing fails the
// function's init, before any record is consumed.
//
// Its configuration is serve's, from the IC_* environment only (there
// are no arguments): IC_BACKEND=aws, IC_QUEUE, IC_DLQ, IC_TABLE,
// IC_COREBANK_URL, IC_FINGERPRINT_KEY_FILE, IC_LEASE, … and:
//
//   - IC_LAMBDA_MIN_WORK: the longest one charge can take (default: twice
//     IC_COREBANK_TIMEOUT, for a status enquiry and a post, plus
//     IC_NOTIFY_TIMEOUT). A record is started only with this much time
//     left (plus IC_LAMBDA_MARGIN), and IC_LEASE must be at least it.
//   - IC_LAMBDA_MARGIN: kept free before the deadline (default 5s).
//   - IC_LAMBDA_CONCURRENCY: records of a batch run at once (default 1).
//   - IC_LAMBDA_CHECK_MAPPING: true (default) reads the function's event
//     source mappings at start (lambda:ListEventSourceMappings) and refuses
//     to start when one from SQS lacks ReportBatchItemFailures; when it
//     cannot tell, it warns and fails a whole batch rather than return a
//     partial response that might be ignored. false: no check.
//
// Build it with:
//
//	GOOS=linux GOARCH=amd64 CGO_ENABLED=0 go build -tags lambda.norpc -o bootstrap ./cmd/chargerecovery-lambda
//
// and deploy it with deploy/aws/lambda.yaml (docs/library/lambda.md).
package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/aws/aws-lambda-go/events"
	awslambda "github.com/aws/aws-lambda-go/lambda"
	lambdaapi "github.com/aws/aws-sdk-go-v2/service/lambda"

	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/app/chargehandler"
	"github.com/finedge/idempotent-consumer/app/service/backend"
	"github.com/finedge/idempotent-consumer/app/service/cli"
	"github.com/finedge/idempotent-consumer/app/service/pipeline"
	"github.com/finedge/idempotent-consumer/consumer"
	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/lambdasqs"
	"github.com/finedge/idempotent-consumer/queue"
)

func main() {
	h, err := setup(context.Background(), os.Getenv, os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "chargerecovery-lambda:", err)
		os.Exit(1)
	}
	awslambda.Start(h)
}

// setup reads the configuration, opens the backend and the bank, checks
// the event source mapping, and returns the batch handler.
func setup(ctx context.Context, getenv func(string) string, stderr io.Writer) (lambdasqs.BatchHandler, error) {
	env := &cli.Env{Stdout: stderr, Stderr: stderr, Getenv: getenv}
	f := cli.NewFlagSet(env, "chargerecovery-lambda", "chargerecovery-lambda (configured by the IC_* environment)")
	var (
		bc              backend.Config
		cc              pipeline.Config
		nc              pipeline.NotifyConfig
		lc              cli.LogConfig
		minWork, margin time.Duration
		concurrency     int
		checkMapping    bool
	)
	bc.Bind(f)
	bc.BindMultiRegion(f)
	cc.Bind(f)
	nc.Bind(f)
	lc.Bind(f)
	f.Duration(&minWork, "lambda-min-work", "IC_LAMBDA_MIN_WORK", 0, "the longest one charge can take; a record is started only with this much time left (default: 2 × corebank-timeout + notify-timeout)")
	f.Duration(&margin, "lambda-margin", "IC_LAMBDA_MARGIN", 5*time.Second, "kept free before the invocation's deadline for recording results and answering")
	f.Int(&concurrency, "lambda-concurrency", "IC_LAMBDA_CONCURRENCY", 1, "records of a batch run at once")
	f.Bool(&checkMapping, "lambda-check-mapping", "IC_LAMBDA_CHECK_MAPPING", true, "refuse to start when the SQS event source mapping lacks ReportBatchItemFailures (needs lambda:ListEventSourceMappings; without it: warn, and fail whole batches that have a record to retry)")
	if err := f.Parse(nil, false); err != nil {
		return nil, err
	}
	if minWork == 0 {
		minWork = 2*cc.CorebankTimeout + cc.NotifyTimeout
	}
	var p cli.Problems
	bc.Check(&p)
	cc.Check(&p, true)
	nc.Check(&p)
	lc.Check(&p)
	if bc.Kind != backend.AWS {
		p.Add("IC_BACKEND %q: the Lambda runs on SQS + DynamoDB (aws)", bc.Kind)
	}
	if bc.Store != "" {
		p.Add("IC_STORE %q: the Lambda keeps its claims on DynamoDB", bc.Store)
	}
	if minWork <= 0 || cc.Lease < minWork {
		p.Add("IC_LEASE %s must be at least IC_LAMBDA_MIN_WORK %s: a lease shorter than the work hands the key to a second invocation while the work still runs", cc.Lease, minWork)
	}
	if margin <= 0 {
		p.Add("IC_LAMBDA_MARGIN must be positive")
	}
	if concurrency < 1 || concurrency > 100 {
		p.Add("IC_LAMBDA_CONCURRENCY %d is outside 1-100", concurrency)
	}
	if cc.PostingWindows != "" || cc.HolidaysFile != "" {
		// serve holds receiving back outside a window (its gate); the
		// event source mapping polls whenever it is enabled.
		p.Add("IC_POSTING_WINDOWS and IC_HOLIDAYS are not kept by the Lambda, which receives whenever its event source mapping is enabled: a charge would be posted outside the window; disable the mapping outside the bank's windows (an EventBridge schedule), or run serve")
	}
	if err := p.Err(); err != nil {
		return nil, err
	}
	bc.Existing = true // deploy/aws/lambda.yaml makes the queues and the table
	log := lc.Logger(stderr)
	bc.Log = log

	wholeBatch := false
	if checkMapping {
		cfg, err := backend.LoadAWS(ctx, log)
		if err != nil {
			return nil, err
		}
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err = lambdasqs.CheckMapping(cctx, lambdaapi.NewFromConfig(cfg), getenv("AWS_LAMBDA_FUNCTION_NAME"))
		cancel()
		switch {
		case errors.Is(err, lambdasqs.ErrNoPartialBatch):
			return nil, fmt.Errorf("%w: Lambda would ignore the records named for retry and delete them (refusing to start; IC_LAMBDA_CHECK_MAPPING=false skips the check)", err)
		case err != nil:
			wholeBatch = true
			log.Warn("cannot tell whether the event source mapping reports batch item failures; a batch with a record to retry fails as a whole",
				"error", err.Error())
		}
	}

	bank, err := pipeline.NewBank(cc, log)
	if err != nil {
		return nil, err
	}
	b, err := backend.Open(ctx, bc, cc.Visibility, false)
	if err != nil {
		return nil, err
	}
	// serve's checks before the first claim: the table and the queues
	// answer, a multi-Region table is run as configured, and records outlive
	// the messages that could repeat them.
	if err := b.Preflight(ctx, cc.Retention); err != nil {
		return nil, err
	}
	retry, err := cc.RetryPolicy()
	if err != nil {
		return nil, cli.Usagef("IC_RETRY_DECLINES: %v", err)
	}
	if err := checkWaits(ctx, b, cc, retry, true); err != nil {
		return nil, err
	}
	notifier, notifyDesc, err := nc.Notifier(ctx, cc, log)
	if err != nil {
		return nil, err
	}
	skew := cc.Skew
	if skew == 0 {
		skew = -1 // the guard's "no margin"
	}
	guard, err := idempotency.NewGuard(b.Store, idempotency.Options{Lease: cc.Lease, Retention: cc.Retention, SkewMargin: skew})
	if err != nil {
		return nil, err
	}
	keys, err := cc.Keys()
	if err != nil {
		return nil, err
	}
	// The recovery policy as serve keeps it: retries by decline code, the
	// advance notice before the debit (every channel sends them); a wait
	// is a Wait verdict, hidden until its time on a first receive and
	// started over as a copy on IC_QUEUE after (Requeue).
	svc, err := charge.NewService(charge.Options{Guard: guard, Debiter: bank.Debiter, Notifier: notifier, Enquirer: bank.Enquirer,
		NotifyTimeout: cc.NotifyTimeout, Logger: log, Fingerprints: keys, Retry: retry, NoticeLead: cc.NoticeLead})
	if err != nil {
		return nil, err
	}
	h, err := lambdasqs.Records(lambdasqs.Options{
		MinWork: minWork, Margin: margin, Lease: cc.Lease, Concurrency: concurrency, WholeBatchOnFailure: wholeBatch, Logger: log,
		DeadLetter: func(ctx context.Context, m events.SQSMessage, r queue.Reason) error {
			return b.Queue.DeadLetter(ctx, lambdasqs.MessageOf(m), r)
		},
		ChangeVisibility: func(ctx context.Context, m events.SQSMessage, d time.Duration) error {
			return b.Queue.ChangeVisibility(ctx, lambdasqs.MessageOf(m), d)
		},
		// IC_QUEUE is the event source's queue (the wait check reads its
		// retention): the copy of a waiting record goes back to it.
		Requeue: lambdasqs.RequeueTo(b.Queue, log),
	}, process(svc, log))
	if err != nil {
		return nil, err
	}
	log.Info("function ready", "backend", b.Desc, "lease", cc.Lease.String(), "min_work", minWork.String(), "margin", margin.String(),
		"notify", notifyDesc, "fingerprint_key", cc.KeyDesc(), "whole_batch_on_failure", wholeBatch,
		"retry_declines", cc.RetryDeclines, "notice_lead", cc.NoticeLead.String())
	return h, nil
}

// checkWaits refuses a recovery policy whose waits the queue cannot keep.
// resetsAge says whether a waiting message is started over as a copy
// (lambdasqs.Options.Requeue, as wired by setup): then only one hide (12
// hours at most, or the longest wait) must fit the queue's
// MessageRetentionPeriod and its maxReceiveCount must be 2 at least.
// Without it the message keeps its age and its receive count across every
// wait (the advance notice's lead, then each retry's delay): their sum
// must fit the retention, and a receive per 12 hours the maxReceiveCount.
// A wait past the retention is deleted by SQS with its record left
// waiting for ever; one past the maxReceiveCount is moved to the DLQ
// before its time.
func checkWaits(ctx context.Context, b *backend.Backend, cc pipeline.Config, retry *charge.RetryPolicy, resetsAge bool) error {
	var waits []time.Duration
	if cc.NoticeLead > 0 {
		waits = append(waits, cc.NoticeLead)
	}
	waits = append(waits, retry.LongestWaits()...)
	if len(waits) == 0 {
		return nil
	}
	retention, _, err := b.Retentions(ctx)
	if err != nil {
		return fmt.Errorf("read the queue's retention (sqs:GetQueueAttributes of IC_QUEUE, the event source's queue): %w", err)
	}
	receives, err := b.MaxReceives(ctx)
	if err != nil {
		return fmt.Errorf("read the queue's maxReceiveCount (sqs:GetQueueAttributes of IC_QUEUE, the event source's queue): %w", err)
	}
	if err := queue.CheckWaitWithinQueue(waits, retention, receives, lambdasqs.HideStep, resetsAge); err != nil {
		how := "the Lambda hides a waiting charge's message on its first receive and starts it over as a copy on the next"
		if !resetsAge {
			how = "the Lambda keeps a waiting charge on its message, which keeps its age"
		}
		return cli.Usagef("IC_RETRY_DECLINES=%q (with IC_RETRY_MAX_ATTEMPTS, IC_RETRY_WINDOW) and IC_NOTICE_LEAD=%s on queue %s (IC_QUEUE; retention %s, maxReceiveCount %d): %s: %v (refusing to start; shorten the waits, or raise the queue's MessageRetentionPeriod / maxReceiveCount)",
			cc.RetryDeclines, cc.NoticeLead, b.Desc, retention, receives, how, err)
	}
	return nil
}

// process is one record: parse, the charge service, chargehandler's
// outcome → action table.
func process(svc *charge.Service, log *slog.Logger) lambdasqs.Process {
	return func(ctx context.Context, m events.SQSMessage, hb idempotency.Heartbeat) lambdasqs.Verdict {
		start := time.Now()
		c, err := charge.ParseEvent([]byte(m.Body))
		var res charge.Result
		if err != nil {
			res = charge.InvalidResult(err)
		} else {
			res = svc.ProcessDelivery(ctx, c, charge.Delivery{Heartbeat: hb})
		}
		dec := chargehandler.Decide(res, 0)
		attrs := []slog.Attr{slog.String("message_id", m.MessageId), slog.String("outcome", res.Outcome.String()),
			slog.String("action", dec.Action.String()), slog.Float64("latency_ms", float64(time.Since(start).Microseconds())/1000)}
		if c.ID != "" {
			attrs = append(attrs, slog.Any("charge", c), slog.Int("attempt", res.Attempt))
		}
		if res.Reason != "" {
			attrs = append(attrs, slog.String("reason", res.Reason))
		}
		level := slog.LevelInfo
		if dec.Action != consumer.Ack {
			level = slog.LevelWarn
		}
		log.LogAttrs(ctx, level, "charge record", attrs...)
		switch dec.Action {
		case consumer.Ack:
			return lambdasqs.Verdict{Disposition: lambdasqs.Delete}
		case consumer.DeadLetter:
			return lambdasqs.Verdict{Disposition: lambdasqs.Permanent, Reason: dec.Reason}
		case consumer.Wait:
			if !dec.Until.IsZero() {
				return lambdasqs.Verdict{Disposition: lambdasqs.Wait, Reason: dec.Reason, Until: dec.Until}
			}
		}
		return lambdasqs.Verdict{Disposition: lambdasqs.Retry, Reason: cmp.Or(dec.Reason, queue.Reason{Code: "retry"})}
	}
}
