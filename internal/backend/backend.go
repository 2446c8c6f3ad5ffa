// Package backend opens where the queue and the idempotency records live —
// one SQLite file (embedded) or SQS + DynamoDB (aws) — behind one type, so
// that the commands, the demo and the bench wire the same thing. It also
// holds what retention means per backend and the sweeper that enforces it
// where the backend does not do so itself.
package backend

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/finedge/idempotent-consumer/awsdynamodb"
	"github.com/finedge/idempotent-consumer/awssqs"
	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/internal/cli"
	"github.com/finedge/idempotent-consumer/queue"
	"github.com/finedge/idempotent-consumer/sqlite"
)

// The backends.
const (
	Embedded = "embedded"
	AWS      = "aws"
)

// Config selects and locates the queue and the idempotency store.
type Config struct {
	Kind       string
	DB         string // embedded: the SQLite file
	Sync       string // embedded: FULL or NORMAL
	Queue, DLQ string // queue names (aws: or URLs)
	Table      string // aws: the DynamoDB table
	Wait       time.Duration
	MaxReceive int
	// embedded: message retention of the queue and the DLQ
	QueueRetention, DLQRetention time.Duration
}

// Bind registers the backend flags.
func (c *Config) Bind(f *cli.FlagSet) {
	f.String(&c.Kind, "backend", "IC_BACKEND", Embedded, "where the queue and the idempotency records live: embedded (one SQLite file) or aws (SQS + DynamoDB)")
	f.String(&c.DB, "db", "IC_DB", "chargerecovery.db", "embedded: SQLite file (queue, DLQ and idempotency records)")
	f.String(&c.Sync, "sqlite-sync", "IC_SQLITE_SYNC", string(sqlite.SyncFull), "embedded: FULL (fsync every commit; survives power loss) or NORMAL (faster; survives a process crash)")
	f.String(&c.Queue, "queue", "IC_QUEUE", "charge-due-events", "queue name (aws: or URL)")
	f.String(&c.DLQ, "dlq", "IC_DLQ", "charge-due-events-dlq", "aws: dead-letter queue name or URL")
	f.String(&c.Table, "table", "IC_TABLE", "charge-idempotency", "aws: DynamoDB idempotency table")
	f.Duration(&c.Wait, "poll-wait", "IC_POLL_WAIT", 20*time.Second, "long-poll wait per receive (0-20s; embedded polls at most 2s per call)")
	f.Int(&c.MaxReceive, "max-receive", "IC_MAX_RECEIVE", 10, "redrive: receives before the queue itself moves a message to the DLQ (aws: set by setup)")
	f.Duration(&c.QueueRetention, "queue-retention", "IC_QUEUE_RETENTION", sqlite.DefaultRetention, "embedded: how long a message stays on the queue before it expires (aws: the queue's MessageRetentionPeriod)")
	f.Duration(&c.DLQRetention, "dlq-retention", "IC_DLQ_RETENTION", sqlite.DefaultDLQRetention, "embedded: how long a message stays on the DLQ before it expires")
}

// Check reports what is wrong with c.
func (c *Config) Check(p *cli.Problems) {
	switch c.Kind {
	case Embedded:
		if c.DB == "" {
			p.Add("--db (IC_DB) must name the SQLite file with --backend embedded")
		}
		if c.Sync != string(sqlite.SyncFull) && c.Sync != string(sqlite.SyncNormal) {
			p.Add("--sqlite-sync %q is not FULL or NORMAL", c.Sync)
		}
		if c.Queue == "" {
			p.Add("--queue (IC_QUEUE) must not be empty")
		}
	case AWS:
		if c.Queue == "" || c.DLQ == "" || c.Table == "" {
			p.Add("--queue, --dlq and --table (IC_QUEUE, IC_DLQ, IC_TABLE) must not be empty with --backend aws")
		}
	default:
		p.Add("--backend %q is not embedded or aws", c.Kind)
	}
	if c.MaxReceive < 1 || c.MaxReceive > 1000 {
		p.Add("--max-receive %d is outside 1-1000", c.MaxReceive)
	}
	if c.Wait < 0 || c.Wait > 20*time.Second {
		p.Add("--poll-wait %s is outside 0-20s", c.Wait)
	}
	if c.QueueRetention < time.Minute || c.DLQRetention < time.Minute {
		p.Add("--queue-retention and --dlq-retention must be at least 1m")
	}
}

// Expirer deletes and counts queue messages past retention, on a queue
// that does not expire them itself (SQS does).
type Expirer interface {
	Expire(ctx context.Context, now time.Time, limit int) (main, dlq int, err error)
	Expired(ctx context.Context, now time.Time) (main, dlq int, err error)
}

// Backend is an opened queue + store pair.
type Backend struct {
	Desc  string
	Queue queue.Queue
	Store idempotency.Store
	// Expirer is nil where the queue expires messages itself.
	Expirer Expirer

	pingStore  func(ctx context.Context) error
	retentions func(ctx context.Context) (queue, dlq time.Duration, err error)
	close      func()
}

// Close releases the backend.
func (b *Backend) Close() { b.close() }

// Ready checks that the store, the queue and the DLQ answer.
func (b *Backend) Ready(ctx context.Context) error {
	if err := b.pingStore(ctx); err != nil {
		return err
	}
	return b.Queue.Ping(ctx)
}

// Retentions are how long the queue and the DLQ keep a message.
func (b *Backend) Retentions(ctx context.Context) (queue, dlq time.Duration, err error) {
	return b.retentions(ctx)
}

// Open opens the configured backend. visibility is the consumer's
// visibility timeout: every receive uses it, so the runtime's heartbeat and
// the queue agree. With create it first creates the queues and the table
// (development; the embedded file is always created as needed).
func Open(ctx context.Context, c Config, visibility time.Duration, create bool) (*Backend, error) {
	switch c.Kind {
	case Embedded:
		return openEmbedded(ctx, c, visibility)
	case AWS:
		return openAWS(ctx, c, visibility, create)
	}
	return nil, cli.Usagef("unknown backend %q", c.Kind)
}

// openEmbedded opens the SQLite file (creating it and its schema if
// needed: an embedded backend needs no separate setup).
func openEmbedded(ctx context.Context, c Config, visibility time.Duration) (*Backend, error) {
	db, err := sqlite.Open(ctx, c.DB, sqlite.OpenOptions{Sync: sqlite.Sync(c.Sync)})
	if err != nil {
		return nil, err
	}
	qo := sqlite.QueueOptions{Name: c.Queue, WaitTime: min(c.Wait, 2*time.Second), VisibilityTimeout: visibility, MaxReceiveCount: c.MaxReceive,
		Retention: c.QueueRetention, DLQRetention: c.DLQRetention}
	if qo.WaitTime == 0 {
		qo.WaitTime = 100 * time.Millisecond
	}
	q, err := sqlite.NewQueue(db, qo)
	if err != nil {
		db.Close()
		return nil, err
	}
	return &Backend{
		Desc:      fmt.Sprintf("embedded (SQLite %s, queue %s, sync %s)", c.DB, c.Queue, c.Sync),
		Queue:     q,
		Store:     sqlite.NewStore(db),
		Expirer:   q,
		pingStore: db.Ping,
		close:     func() { db.Close() },
		retentions: func(context.Context) (time.Duration, time.Duration, error) {
			return c.QueueRetention, c.DLQRetention, nil
		},
	}, nil
}

// LoadAWS reads the standard AWS configuration chain and checks that it
// names a region and yields credentials.
func LoadAWS(ctx context.Context) (aws.Config, error) {
	cfg, err := awsconfig.LoadDefaultConfig(ctx)
	if err != nil {
		return aws.Config{}, cli.Usagef("AWS configuration: %v", err)
	}
	if cfg.Region == "" {
		return aws.Config{}, cli.Usagef("no AWS region: set AWS_REGION (or AWS_PROFILE to a profile with a region)")
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := cfg.Credentials.Retrieve(cctx); err != nil {
		return aws.Config{}, cli.Usagef("no AWS credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE, or run with an IAM role (%v)", err)
	}
	return cfg, nil
}

func openAWS(ctx context.Context, c Config, visibility time.Duration, create bool) (*Backend, error) {
	cfg, err := LoadAWS(ctx)
	if err != nil {
		return nil, err
	}
	sqsc := sqs.NewFromConfig(cfg)
	ddb := dynamodb.NewFromConfig(cfg)
	if create {
		if strings.Contains(c.Queue, "://") || strings.Contains(c.DLQ, "://") {
			return nil, cli.Usagef("setup needs queue names, not URLs, in --queue and --dlq")
		}
		if _, err := awssqs.CreateQueues(ctx, sqsc, awssqs.QueueSpec{Name: c.Queue, DLQName: c.DLQ, VisibilityTimeout: visibility, MaxReceiveCount: c.MaxReceive}); err != nil {
			return nil, err
		}
		if err := awsdynamodb.CreateTable(ctx, ddb, c.Table); err != nil {
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
	qURL, err := resolve(c.Queue, "--queue / IC_QUEUE")
	if err != nil {
		return nil, err
	}
	dlqURL, err := resolve(c.DLQ, "--dlq / IC_DLQ")
	if err != nil {
		return nil, err
	}
	q, err := awssqs.New(sqsc, awssqs.Options{QueueURL: qURL, DLQURL: dlqURL, WaitTime: c.Wait, VisibilityTimeout: visibility})
	if err != nil {
		return nil, cli.Usagef("%v", err)
	}
	store, err := awsdynamodb.New(ddb, c.Table)
	if err != nil {
		return nil, cli.Usagef("%v", err)
	}
	return &Backend{
		Desc:  fmt.Sprintf("aws (queue %s, table %s, %s)", c.Queue, c.Table, where),
		Queue: q,
		Store: store,
		pingStore: func(ctx context.Context) error {
			if err := awsdynamodb.Ping(ctx, ddb, c.Table); err != nil {
				return fmt.Errorf("%w (create it with chargerecovery setup --backend aws, or set --table / IC_TABLE)", err)
			}
			return nil
		},
		close:      func() {},
		retentions: q.RetentionPeriods,
	}, nil
}

// endpointOf names where AWS calls go, for messages (never credentials).
func endpointOf(cfg aws.Config) string {
	if cfg.BaseEndpoint != nil && *cfg.BaseEndpoint != "" {
		return *cfg.BaseEndpoint + " (region " + cfg.Region + ")"
	}
	return "AWS region " + cfg.Region
}

// RandomID is a short random hex id (run names).
func RandomID() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// OpenFresh opens a backend of its own for a demo or bench run: a new
// SQLite file in a temporary directory under dir (embedded), or queues and
// a table named prefix-RUN (aws). The returned drop closes it and deletes
// all of it, unless keep (then it says on stderr where it is).
func OpenFresh(ctx context.Context, stderr io.Writer, c Config, prefix, dir string, visibility time.Duration, keep bool) (*Backend, func(), error) {
	run := RandomID()
	c.Queue, c.DLQ, c.Table = prefix+"-"+run, prefix+"-"+run+"-dlq", prefix+"-"+run
	var tmp string
	if c.Kind == Embedded {
		var err error
		if tmp, err = os.MkdirTemp(dir, "chargerecovery-"+prefix+"-"); err != nil {
			return nil, nil, err
		}
		c.DB = filepath.Join(tmp, prefix+".db")
	}
	b, err := Open(ctx, c, visibility, true)
	if err != nil {
		if tmp != "" {
			os.RemoveAll(tmp)
		}
		return nil, nil, err
	}
	drop := func() {
		b.Close()
		switch {
		case keep && c.Kind == Embedded:
			fmt.Fprintf(stderr, "kept %s\n", c.DB)
		case keep:
			fmt.Fprintf(stderr, "kept queues %s, %s and table %s\n", c.Queue, c.DLQ, c.Table)
		case c.Kind == Embedded:
			os.RemoveAll(tmp)
		default:
			dropAWS(c)
		}
	}
	return b, drop, nil
}

// dropAWS deletes a run's queues and table.
func dropAWS(c Config) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg, err := LoadAWS(ctx)
	if err != nil {
		return
	}
	sqsc := sqs.NewFromConfig(cfg)
	for _, name := range []string{c.Queue, c.DLQ} {
		if u, err := awssqs.QueueURL(ctx, sqsc, name); err == nil {
			_ = awssqs.DeleteQueue(ctx, sqsc, u)
		}
	}
	_ = awsdynamodb.DeleteTable(ctx, dynamodb.NewFromConfig(cfg), c.Table)
}
