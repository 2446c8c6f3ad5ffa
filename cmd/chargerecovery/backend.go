package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	awsddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/finedge/idempotent-consumer/consumer"
	"github.com/finedge/idempotent-consumer/dynamodb"
	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/sqs"
)

// backendConfig selects and locates the queue and the idempotency store.
type backendConfig struct {
	kind       string
	queue, dlq string
	table      string
	wait       time.Duration
}

const (
	backendAWS = "aws"
)

func (c *backendConfig) bind(f *flagSet) {
	f.String(&c.kind, "backend", "IC_BACKEND", backendAWS, "where the queue and the idempotency records live: aws (SQS + DynamoDB)")
	f.String(&c.queue, "queue", "IC_QUEUE", "charge-due-events", "aws: SQS queue name or URL")
	f.String(&c.dlq, "dlq", "IC_DLQ", "charge-due-events-dlq", "aws: dead-letter queue name or URL")
	f.String(&c.table, "table", "IC_TABLE", "charge-idempotency", "aws: DynamoDB idempotency table")
	f.Duration(&c.wait, "poll-wait", "IC_POLL_WAIT", 20*time.Second, "long-poll wait per receive (0-20s)")
}

func (c *backendConfig) check(p *problems) {
	switch c.kind {
	case backendAWS:
		if c.queue == "" || c.dlq == "" || c.table == "" {
			p.add("--queue, --dlq and --table (IC_QUEUE, IC_DLQ, IC_TABLE) must not be empty with --backend aws")
		}
	default:
		p.add("--backend %q is not aws", c.kind)
	}
	if c.wait < 0 || c.wait > 20*time.Second {
		p.add("--poll-wait %s is outside 0-20s", c.wait)
	}
}

// backend is an opened queue + store pair.
type backend struct {
	desc   string
	source consumer.Source
	store  idempotency.Store
	// send puts one message on the main queue.
	send func(ctx context.Context, body []byte) (string, error)
	// ready checks that the queues and the store are reachable.
	ready func(ctx context.Context) error
	// depth is how many messages the main queue and the DLQ hold.
	depth func(ctx context.Context) (main, dlq int, err error)
	close func()
}

// setupSpec is what `setup` (and the demo) create.
type setupSpec struct {
	visibility time.Duration
	maxReceive int
}

// openBackend opens the configured backend; with create it first creates
// the queues and the table (development only).
func openBackend(ctx context.Context, c backendConfig, create *setupSpec) (*backend, error) {
	switch c.kind {
	case backendAWS:
		return openAWS(ctx, c, create)
	}
	return nil, usagef("unknown backend %q", c.kind)
}

// loadAWS reads the standard AWS configuration chain and checks that it
// names a region and yields credentials.
func loadAWS(ctx context.Context) (aws.Config, error) {
	cfg, err := awsconfig.LoadDefaultConfig(ctx)
	if err != nil {
		return aws.Config{}, usagef("AWS configuration: %v", err)
	}
	if cfg.Region == "" {
		return aws.Config{}, usagef("no AWS region: set AWS_REGION (or AWS_PROFILE to a profile with a region)")
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := cfg.Credentials.Retrieve(cctx); err != nil {
		return aws.Config{}, usagef("no AWS credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE, or run with an IAM role (%v)", err)
	}
	return cfg, nil
}

func openAWS(ctx context.Context, c backendConfig, create *setupSpec) (*backend, error) {
	cfg, err := loadAWS(ctx)
	if err != nil {
		return nil, err
	}
	sqsc := awssqs.NewFromConfig(cfg)
	ddb := awsddb.NewFromConfig(cfg)
	if create != nil {
		if strings.Contains(c.queue, "://") || strings.Contains(c.dlq, "://") {
			return nil, usagef("setup needs queue names, not URLs, in --queue and --dlq")
		}
		if _, err := sqs.CreateQueues(ctx, sqsc, sqs.QueueSpec{Name: c.queue, DLQName: c.dlq, VisibilityTimeout: create.visibility, MaxReceiveCount: create.maxReceive}); err != nil {
			return nil, err
		}
		if err := dynamodb.CreateTable(ctx, ddb, c.table); err != nil {
			return nil, err
		}
	}
	where := "at " + endpointOf(cfg)
	resolve := func(nameOrURL, flag string) (string, error) {
		if strings.Contains(nameOrURL, "://") {
			return nameOrURL, nil
		}
		u, err := sqs.QueueURL(ctx, sqsc, nameOrURL)
		if err != nil {
			return "", fmt.Errorf("queue %q not found %s: create it (chargerecovery setup --backend aws) or set %s: %w", nameOrURL, where, flag, err)
		}
		return u, nil
	}
	qURL, err := resolve(c.queue, "--queue / IC_QUEUE")
	if err != nil {
		return nil, err
	}
	dlqURL, err := resolve(c.dlq, "--dlq / IC_DLQ")
	if err != nil {
		return nil, err
	}
	src, err := sqs.New(sqsc, sqs.Options{QueueURL: qURL, DLQURL: dlqURL, WaitTime: c.wait})
	if err != nil {
		return nil, usagef("%v", err)
	}
	store, err := dynamodb.New(ddb, c.table)
	if err != nil {
		return nil, usagef("%v", err)
	}
	b := &backend{
		desc:   fmt.Sprintf("aws (queue %s, table %s, %s)", c.queue, c.table, where),
		source: src,
		store:  store,
		send: func(ctx context.Context, body []byte) (string, error) {
			return sqs.Send(ctx, sqsc, qURL, body, nil)
		},
		ready: func(ctx context.Context) error {
			if err := dynamodb.Ping(ctx, ddb, c.table); err != nil {
				return fmt.Errorf("%w (create it with chargerecovery setup --backend aws, or set --table / IC_TABLE)", err)
			}
			if _, err := sqs.QueueDepth(ctx, sqsc, qURL); err != nil {
				return err
			}
			_, err := sqs.QueueDepth(ctx, sqsc, dlqURL)
			return err
		},
		depth: func(ctx context.Context) (int, int, error) {
			m, err := sqs.QueueDepth(ctx, sqsc, qURL)
			if err != nil {
				return 0, 0, err
			}
			d, err := sqs.QueueDepth(ctx, sqsc, dlqURL)
			return m.Total(), d.Total(), err
		},
		close: func() {},
	}
	return b, nil
}

// endpointOf names where AWS calls go, for messages (never credentials).
func endpointOf(cfg aws.Config) string {
	if cfg.BaseEndpoint != nil && *cfg.BaseEndpoint != "" {
		return *cfg.BaseEndpoint + " (region " + cfg.Region + ")"
	}
	return "AWS region " + cfg.Region
}
