package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/finedge/idempotent-consumer/awsdynamodb"
	"github.com/finedge/idempotent-consumer/awssqs"
	"github.com/finedge/idempotent-consumer/consumer"
	"github.com/finedge/idempotent-consumer/dlq"
	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/sqlite"
)

// backendConfig selects and locates the queue and the idempotency store.
type backendConfig struct {
	kind       string
	db         string
	sync       string
	queue, dlq string
	table      string
	wait       time.Duration
	maxReceive int
	// embedded: message retention of the queue and the DLQ
	queueRetention, dlqRetention time.Duration
}

const (
	backendEmbedded = "embedded"
	backendAWS      = "aws"
)

func (c *backendConfig) bind(f *flagSet) {
	f.String(&c.kind, "backend", "IC_BACKEND", backendEmbedded, "where the queue and the idempotency records live: embedded (one SQLite file) or aws (SQS + DynamoDB)")
	f.String(&c.db, "db", "IC_DB", "chargerecovery.db", "embedded: SQLite file (queue, DLQ and idempotency records)")
	f.String(&c.sync, "sqlite-sync", "IC_SQLITE_SYNC", string(sqlite.SyncFull), "embedded: FULL (fsync every commit; survives power loss) or NORMAL (faster; survives a process crash)")
	f.String(&c.queue, "queue", "IC_QUEUE", "charge-due-events", "queue name (aws: or URL)")
	f.String(&c.dlq, "dlq", "IC_DLQ", "charge-due-events-dlq", "aws: dead-letter queue name or URL")
	f.String(&c.table, "table", "IC_TABLE", "charge-idempotency", "aws: DynamoDB idempotency table")
	f.Duration(&c.wait, "poll-wait", "IC_POLL_WAIT", 20*time.Second, "long-poll wait per receive (0-20s; embedded polls at most 2s per call)")
	f.Int(&c.maxReceive, "max-receive", "IC_MAX_RECEIVE", 10, "redrive: receives before the queue itself moves a message to the DLQ (aws: set by setup)")
	f.Duration(&c.queueRetention, "queue-retention", "IC_QUEUE_RETENTION", sqlite.DefaultRetention, "embedded: how long a message stays on the queue before it expires (aws: the queue's MessageRetentionPeriod)")
	f.Duration(&c.dlqRetention, "dlq-retention", "IC_DLQ_RETENTION", sqlite.DefaultDLQRetention, "embedded: how long a message stays on the DLQ before it expires")
}

func (c *backendConfig) check(p *problems) {
	switch c.kind {
	case backendEmbedded:
		if c.db == "" {
			p.add("--db (IC_DB) must name the SQLite file with --backend embedded")
		}
		if c.sync != string(sqlite.SyncFull) && c.sync != string(sqlite.SyncNormal) {
			p.add("--sqlite-sync %q is not FULL or NORMAL", c.sync)
		}
		if c.queue == "" {
			p.add("--queue (IC_QUEUE) must not be empty")
		}
	case backendAWS:
		if c.queue == "" || c.dlq == "" || c.table == "" {
			p.add("--queue, --dlq and --table (IC_QUEUE, IC_DLQ, IC_TABLE) must not be empty with --backend aws")
		}
	default:
		p.add("--backend %q is not embedded or aws", c.kind)
	}
	if c.maxReceive < 1 || c.maxReceive > 1000 {
		p.add("--max-receive %d is outside 1-1000", c.maxReceive)
	}
	if c.wait < 0 || c.wait > 20*time.Second {
		p.add("--poll-wait %s is outside 0-20s", c.wait)
	}
	if c.queueRetention < time.Minute || c.dlqRetention < time.Minute {
		p.add("--queue-retention and --dlq-retention must be at least 1m")
	}
}

// backend is an opened queue + store pair.
type backend struct {
	desc   string
	source consumer.Source
	store  idempotency.Store
	// send puts one message on the main queue.
	send func(ctx context.Context, body []byte) (string, error)
	// sendBatch puts up to 10 (aws) or any number (embedded) at once.
	sendBatch func(ctx context.Context, bodies [][]byte) error
	batchMax  int
	// ready checks that the queues and the store are reachable.
	ready func(ctx context.Context) error
	// depth is how many messages the main queue and the DLQ hold.
	depth func(ctx context.Context) (main, dlq int, err error)
	close func()
	// redrive moves DLQ messages back to the main queue.
	redrive func(ctx context.Context, o dlq.Options) (dlq.Report, error)
	// retentions are how long the queue and the DLQ keep a message.
	retentions func(ctx context.Context) (queue, dlq time.Duration, err error)
	// expire and expired delete / count messages past retention (nil
	// where the queue expires them itself, as SQS does).
	expire  func(ctx context.Context, now time.Time, limit int) (main, dlq int, err error)
	expired func(ctx context.Context, now time.Time) (main, dlq int, err error)
}

// openBackend opens the configured backend. visibility is the consumer's
// visibility timeout: every receive uses it, so the runtime's heartbeat and
// the queue agree. With create it first creates the queues and the table
// (development; the embedded file is always created as needed).
func openBackend(ctx context.Context, c backendConfig, visibility time.Duration, create bool) (*backend, error) {
	switch c.kind {
	case backendEmbedded:
		return openEmbedded(ctx, c, visibility)
	case backendAWS:
		return openAWS(ctx, c, visibility, create)
	}
	return nil, usagef("unknown backend %q", c.kind)
}

// openEmbedded opens the SQLite file (creating it and its schema if
// needed: an embedded backend needs no separate setup).
func openEmbedded(ctx context.Context, c backendConfig, visibility time.Duration) (*backend, error) {
	db, err := sqlite.Open(ctx, c.db, sqlite.OpenOptions{Sync: sqlite.Sync(c.sync)})
	if err != nil {
		return nil, err
	}
	qo := sqlite.QueueOptions{Name: c.queue, WaitTime: min(c.wait, 2*time.Second), VisibilityTimeout: visibility, MaxReceiveCount: c.maxReceive,
		Retention: c.queueRetention, DLQRetention: c.dlqRetention}
	if qo.WaitTime == 0 {
		qo.WaitTime = 100 * time.Millisecond
	}
	q, err := sqlite.NewQueue(db, qo)
	if err != nil {
		db.Close()
		return nil, err
	}
	return &backend{
		desc:      fmt.Sprintf("embedded (SQLite %s, queue %s, sync %s)", c.db, c.queue, c.sync),
		source:    q,
		store:     sqlite.NewStore(db),
		redrive:   q.Redrive,
		sendBatch: q.SendBatch,
		batchMax:  1000,
		send: func(ctx context.Context, body []byte) (string, error) {
			return q.Send(ctx, body)
		},
		ready:   func(ctx context.Context) error { return db.Ping(ctx) },
		depth:   q.Depth,
		close:   func() { db.Close() },
		expire:  q.Expire,
		expired: q.Expired,
		retentions: func(context.Context) (time.Duration, time.Duration, error) {
			return c.queueRetention, c.dlqRetention, nil
		},
	}, nil
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

func openAWS(ctx context.Context, c backendConfig, visibility time.Duration, create bool) (*backend, error) {
	cfg, err := loadAWS(ctx)
	if err != nil {
		return nil, err
	}
	sqsc := sqs.NewFromConfig(cfg)
	ddb := dynamodb.NewFromConfig(cfg)
	if create {
		if strings.Contains(c.queue, "://") || strings.Contains(c.dlq, "://") {
			return nil, usagef("setup needs queue names, not URLs, in --queue and --dlq")
		}
		if _, err := awssqs.CreateQueues(ctx, sqsc, awssqs.QueueSpec{Name: c.queue, DLQName: c.dlq, VisibilityTimeout: visibility, MaxReceiveCount: c.maxReceive}); err != nil {
			return nil, err
		}
		if err := awsdynamodb.CreateTable(ctx, ddb, c.table); err != nil {
			return nil, err
		}
	}
	where := "at " + endpointOf(cfg)
	resolve := func(nameOrURL, flag string) (string, error) {
		if strings.Contains(nameOrURL, "://") {
			return nameOrURL, nil
		}
		u, err := awssqs.QueueURL(ctx, sqsc, nameOrURL)
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
	src, err := awssqs.New(sqsc, awssqs.Options{QueueURL: qURL, DLQURL: dlqURL, WaitTime: c.wait, VisibilityTimeout: visibility})
	if err != nil {
		return nil, usagef("%v", err)
	}
	store, err := awsdynamodb.New(ddb, c.table)
	if err != nil {
		return nil, usagef("%v", err)
	}
	b := &backend{
		desc:   fmt.Sprintf("aws (queue %s, table %s, %s)", c.queue, c.table, where),
		source: src,
		store:  store,
		send: func(ctx context.Context, body []byte) (string, error) {
			return awssqs.Send(ctx, sqsc, qURL, body, nil)
		},
		sendBatch: func(ctx context.Context, bodies [][]byte) error {
			return awssqs.SendBatch(ctx, sqsc, qURL, bodies)
		},
		batchMax: 10,
		ready: func(ctx context.Context) error {
			if err := awsdynamodb.Ping(ctx, ddb, c.table); err != nil {
				return fmt.Errorf("%w (create it with chargerecovery setup --backend aws, or set --table / IC_TABLE)", err)
			}
			if _, err := awssqs.QueueDepth(ctx, sqsc, qURL); err != nil {
				return err
			}
			_, err := awssqs.QueueDepth(ctx, sqsc, dlqURL)
			return err
		},
		depth: func(ctx context.Context) (int, int, error) {
			m, err := awssqs.QueueDepth(ctx, sqsc, qURL)
			if err != nil {
				return 0, 0, err
			}
			d, err := awssqs.QueueDepth(ctx, sqsc, dlqURL)
			return m.Total(), d.Total(), err
		},
		close: func() {},
		redrive: func(ctx context.Context, o dlq.Options) (dlq.Report, error) {
			return awssqs.Redrive(ctx, sqsc, dlqURL, qURL, o)
		},
		retentions: func(ctx context.Context) (time.Duration, time.Duration, error) {
			q, err := awssqs.RetentionPeriod(ctx, sqsc, qURL)
			if err != nil {
				return 0, 0, err
			}
			d, err := awssqs.RetentionPeriod(ctx, sqsc, dlqURL)
			return q, d, err
		},
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
