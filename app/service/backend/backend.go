// Package backend opens where the queue and the idempotency records live —
// one SQLite file (embedded), one PostgreSQL schema (postgres) or SQS +
// DynamoDB (aws), with the records optionally on Redis (--store redis) —
// behind one type, so that the commands, the demo and the bench wire the
// same thing. It also holds what retention means per backend and the
// sweeper that enforces it where the backend does not do so itself.
package backend

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/finedge/idempotent-consumer/internal/redact"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/smithy-go"
	"github.com/aws/smithy-go/logging"
	"github.com/redis/go-redis/v9"

	"github.com/finedge/idempotent-consumer/app/service/cli"
	"github.com/finedge/idempotent-consumer/awsdynamodb"
	"github.com/finedge/idempotent-consumer/awssqs"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
	"github.com/finedge/idempotent-consumer/postgres"
	"github.com/finedge/idempotent-consumer/queue"
	"github.com/finedge/idempotent-consumer/redisstore"
	"github.com/finedge/idempotent-consumer/sqlite"
)

// The backends, and the stores that may replace a backend's own.
const (
	Embedded = "embedded"
	AWS      = "aws"
	Postgres = "postgres"
	Redis    = "redis"
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
	// embedded and postgres: message retention of the queue and the DLQ
	QueueRetention, DLQRetention time.Duration
	// postgres: the connection (empty: the standard PG* variables) and
	// the schema holding the tables
	PostgresURL, PostgresSchema string
	// Store replaces the backend's idempotency store: "" (its own) or
	// "redis" (RedisURL, keys under RedisPrefix)
	Store, RedisURL, RedisPrefix string
	// Receivers is how many receives the process runs at once (postgres:
	// the pool is sized for them, and a pool_max_conns too small for
	// them refused; 0: pgx's default pool, unchecked).
	Receivers int
	// aws, serve only (BindMultiRegion): how it runs on a DynamoDB table
	// with replicas in more than one Region — "" (the default: a
	// single-Region table only), "strong" or "single-writer" with
	// WriterRegion, the one Region whose serve writes (see
	// awsdynamodb.MultiRegionMode and CheckMultiRegion)
	MultiRegion, WriterRegion string
	// Existing opens only what is there and migrated — no SQLite file,
	// PostgreSQL schema, table or queue is created or migrated; a missing
	// one is an error that says to run setup. Operator commands set it.
	Existing bool
	// Log gets the AWS SDK's own lines, at debug level, and PostgreSQL's
	// failed queue vacuums, at warn (nil: slog.Default()).
	Log *slog.Logger
}

// notSetUp is the error for a backend part that is not there.
func notSetUp(err error) error {
	return fmt.Errorf("%w: run chargerecovery setup with the same backend flags first (it creates and migrates; nothing else does for this command)", err)
}

// Bind registers the backend flags.
func (c *Config) Bind(f *cli.FlagSet) {
	f.String(&c.Kind, "backend", "IC_BACKEND", Embedded, "where the queue and the idempotency records live: embedded (one SQLite file), postgres, or aws (SQS + DynamoDB)")
	f.String(&c.DB, "db", "IC_DB", "chargerecovery.db", "embedded: SQLite file (queue, DLQ and idempotency records)")
	f.String(&c.Sync, "sqlite-sync", "IC_SQLITE_SYNC", string(sqlite.SyncFull), "embedded: FULL (fsync every commit; survives power loss) or NORMAL (faster; survives a process crash)")
	f.String(&c.Queue, "queue", "IC_QUEUE", "charge-due-events", "queue name (aws: or URL)")
	f.String(&c.DLQ, "dlq", "IC_DLQ", "charge-due-events-dlq", "aws: dead-letter queue name or URL")
	f.String(&c.Table, "table", "IC_TABLE", "charge-idempotency", "aws: DynamoDB idempotency table")
	f.Duration(&c.Wait, "poll-wait", "IC_POLL_WAIT", 20*time.Second, "long-poll wait per receive (0-20s; embedded polls at most 2s per call)")
	f.Int(&c.MaxReceive, "max-receive", "IC_MAX_RECEIVE", 10, "redrive: receives before the queue itself moves a message to the DLQ (aws: set by setup)")
	f.String(&c.PostgresURL, "postgres-url", "IC_POSTGRES_URL", "", "postgres: connection URL, e.g. postgres://user@db:5432/bank (empty: the standard PGHOST, PGUSER, PGDATABASE, ... variables)")
	f.String(&c.PostgresSchema, "postgres-schema", "IC_POSTGRES_SCHEMA", "public", "postgres: schema of the tables (created and migrated on start)")
	f.String(&c.Store, "store", "IC_STORE", "", "idempotency store instead of the backend's own: redis (the queue stays the backend's)")
	f.String(&c.RedisURL, "redis-url", "IC_REDIS_URL", "", "redis store: server URL, e.g. redis://127.0.0.1:6379/0 (rediss:// for TLS)")
	f.String(&c.RedisPrefix, "redis-prefix", "IC_REDIS_PREFIX", "ic:", "redis store: prefix of every key")
	f.Duration(&c.QueueRetention, "queue-retention", "IC_QUEUE_RETENTION", sqlite.DefaultRetention, "embedded: how long a message stays on the queue before it expires (aws: the queue's MessageRetentionPeriod)")
	f.Duration(&c.DLQRetention, "dlq-retention", "IC_DLQ_RETENTION", sqlite.DefaultDLQRetention, "embedded: how long a message stays on the DLQ before it expires")
}

// BindMultiRegion registers the flags of a writer on a multi-Region
// DynamoDB table (serve); the operators' read-only commands do not check.
func (c *Config) BindMultiRegion(f *cli.FlagSet) {
	f.String(&c.MultiRegion, flagMultiRegion, "IC_DYNAMODB_MULTI_REGION", "", "aws: how serve runs on a DynamoDB table with replicas in more than one Region (a global table, refused without it): strong (the table has multi-Region strong consistency) or single-writer (only --dynamodb-writer-region's serve writes); empty: a single-Region table")
	f.String(&c.WriterRegion, flagWriterRegion, "IC_DYNAMODB_WRITER_REGION", "", "aws, --dynamodb-multi-region single-writer: the one Region whose serve writes the table (serve in any other Region refuses to start)")
}

const (
	flagMultiRegion  = "dynamodb-multi-region"
	flagWriterRegion = "dynamodb-writer-region"
)

// BindFresh registers the flags of a run on a fresh backend (demo,
// bench): which backend and where its servers are; names are the run's.
func (c *Config) BindFresh(f *cli.FlagSet) {
	f.String(&c.Kind, "backend", "IC_BACKEND", Embedded, "embedded (a fresh SQLite file), postgres (a fresh schema) or aws (fresh queues and table at the configured endpoint)")
	f.String(&c.PostgresURL, "postgres-url", "IC_POSTGRES_URL", "", "postgres: connection URL (empty: the standard PG* variables)")
	f.String(&c.Store, "store", "IC_STORE", "", "idempotency store instead of the backend's own: redis (fresh keys)")
	f.String(&c.RedisURL, "redis-url", "IC_REDIS_URL", "", "redis store: server URL, e.g. redis://127.0.0.1:6379/0")
	c.FreshDefaults()
}

// FreshDefaults sets what BindFresh does not ask for: placeholder names
// (OpenFresh names everything after the run) and test-friendly timings.
func (c *Config) FreshDefaults() {
	c.DB, c.Sync, c.Queue, c.DLQ, c.Table, c.PostgresSchema, c.RedisPrefix = "fresh.db", string(sqlite.SyncFull), "fresh", "fresh-dlq", "fresh", "fresh", "fresh:"
	c.MaxReceive, c.Wait, c.QueueRetention, c.DLQRetention = 50, time.Second, sqlite.DefaultRetention, sqlite.DefaultDLQRetention
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
	case Postgres:
		if c.Queue == "" {
			p.Add("--queue (IC_QUEUE) must not be empty")
		}
		if c.PostgresSchema == "" {
			p.Add("--postgres-schema (IC_POSTGRES_SCHEMA) must not be empty")
		}
	default:
		p.Add("--backend %q is not embedded, postgres or aws", c.Kind)
	}
	switch c.Store {
	case "":
	case Redis:
		if c.RedisURL == "" {
			p.Add("--redis-url (IC_REDIS_URL) is required with --store redis, e.g. redis://127.0.0.1:6379/0")
		} else if _, err := redis.ParseURL(c.RedisURL); err != nil {
			p.Add("--redis-url: %v", redact.Error(err, c.RedisURL))
		}
		if c.RedisPrefix == "" {
			p.Add("--redis-prefix must not be empty")
		}
	default:
		p.Add("--store %q is not redis (or empty for the backend's own)", c.Store)
	}
	c.checkMultiRegion(p)
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

func (c *Config) checkMultiRegion(p *cli.Problems) {
	mode, err := awsdynamodb.ParseMultiRegionMode(c.MultiRegion)
	switch {
	case err != nil:
		p.Add("--%s (IC_DYNAMODB_MULTI_REGION) %q is not strong or single-writer (empty for a single-Region table)", flagMultiRegion, c.MultiRegion)
		return
	case mode != awsdynamodb.MultiRegionNone && c.Kind != AWS:
		p.Add("--%s (IC_DYNAMODB_MULTI_REGION) is for --backend aws only", flagMultiRegion)
	case mode != awsdynamodb.MultiRegionNone && c.Store != "":
		p.Add("--%s (IC_DYNAMODB_MULTI_REGION) is for claims on DynamoDB; with --store %s there is no table to check", flagMultiRegion, c.Store)
	}
	switch {
	case mode == awsdynamodb.MultiRegionSingleWriter && c.WriterRegion == "":
		p.Add("--%s (IC_DYNAMODB_WRITER_REGION) must name the one Region whose serve writes, with --%s single-writer", flagWriterRegion, flagMultiRegion)
	case mode != awsdynamodb.MultiRegionSingleWriter && c.WriterRegion != "":
		p.Add("--%s (IC_DYNAMODB_WRITER_REGION) %q is only for --%s single-writer", flagWriterRegion, c.WriterRegion, flagMultiRegion)
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
	Store driver.Store
	// Expirer is nil where the queue expires messages itself.
	Expirer Expirer
	// Warnings are what is weaker than it should be in production (TLS not
	// verified, no TLS to another host): serve logs them at start.
	Warnings []string
	// Notes are what opening it did that an operator should know (a
	// migration's count of the records it could not fill): setup prints
	// them, serve logs them.
	Notes []string

	pingStore func(ctx context.Context) error
	// checkRegions refuses a multi-Region table the configuration does not
	// make safe (nil: nothing to check, the store is not DynamoDB).
	checkRegions func(ctx context.Context) error
	retentions   func(ctx context.Context) (queue, dlq time.Duration, err error)
	// maxReceives reads the queue's maxReceiveCount (nil: the configured
	// --max-receive, kept in maxReceive).
	maxReceives func(ctx context.Context) (int, error)
	maxReceive  int
	close       func()
	// countsByIndexQuery: the store counts by a Query of a secondary index
	// that serve's IAM policy does not allow (DynamoDB).
	countsByIndexQuery bool
	// drop deletes what a fresh backend made, where closing does not
	// (a PostgreSQL schema, Redis keys); nil: nothing to do.
	drop func(ctx context.Context) error
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

// CheapCounts says whether serve samples the stuck claims for the metrics:
// where the store counts records by an index in its own database (SQLite,
// PostgreSQL). Not on Redis (every key), nor on DynamoDB: it finds the
// stuck claims by a Scan of the whole table (its hot path writes no
// index), and the consumer's IAM policy (deploy/aws/stack.json) allows no
// dynamodb:Query or dynamodb:Scan.
func (b *Backend) CheapCounts() bool {
	_, ok := b.Store.(driver.StateCounter)
	return ok && !b.countsByIndexQuery
}

// Retentions are how long the queue and the DLQ keep a message.
func (b *Backend) Retentions(ctx context.Context) (queue, dlq time.Duration, err error) {
	return b.retentions(ctx)
}

// MaxReceives is how many receives of a message the queue allows before
// it moves it to the DLQ by itself (aws: the queue's redrive policy, read
// with GetQueueAttributes; 0: it has none).
func (b *Backend) MaxReceives(ctx context.Context) (int, error) {
	if b.maxReceives == nil {
		return b.maxReceive, nil
	}
	return b.maxReceives(ctx)
}

// Open opens the configured backend. visibility is the consumer's
// visibility timeout: every receive uses it, so the runtime's heartbeat and
// the queue agree. With create it first creates the queues and the table
// (development; the embedded file is always created as needed).
func Open(ctx context.Context, c Config, visibility time.Duration, create bool) (*Backend, error) {
	var b *Backend
	var err error
	switch c.Kind {
	case Embedded:
		b, err = openEmbedded(ctx, c, visibility)
	case AWS:
		b, err = openAWS(ctx, c, visibility, create)
	case Postgres:
		b, err = openPostgres(ctx, c, visibility)
	default:
		return nil, cli.Usagef("unknown backend %q", c.Kind)
	}
	if err != nil || c.Store == "" {
		return b, err
	}
	if err := b.useRedis(ctx, c); err != nil {
		b.Close()
		return nil, err
	}
	return b, nil
}

// openPostgres connects, migrates the schema (every process may: the
// migrations run once, under an advisory lock) and opens the queue.
func openPostgres(ctx context.Context, c Config, visibility time.Duration) (*Backend, error) {
	db, err := postgres.Open(ctx, c.PostgresURL, postgres.Options{Schema: c.PostgresSchema, Existing: c.Existing, Receivers: c.Receivers, Logger: c.Log})
	err = redact.Error(err, c.PostgresURL)
	if errors.Is(err, postgres.ErrNotSetUp) {
		return nil, notSetUp(err)
	}
	if errors.Is(err, postgres.ErrConfig) {
		return nil, cli.Usagef("%v (set --postgres-url / IC_POSTGRES_URL, or the PG* variables)", err)
	}
	if err != nil {
		if srv := redact.Server(c.PostgresURL); srv != "" {
			err = fmt.Errorf("postgres at %s: %w", srv, err) // which server failed, no credential
		}
		return nil, fmt.Errorf("%w (check --postgres-url / IC_POSTGRES_URL or the PG* variables, and that the server runs)", err)
	}
	q, err := postgres.NewQueue(db, postgres.QueueOptions{Name: c.Queue, VisibilityTimeout: visibility, MaxReceiveCount: c.MaxReceive,
		WaitTime: max(min(c.Wait, 2*time.Second), 100*time.Millisecond), Retention: c.QueueRetention, DLQRetention: c.DLQRetention})
	if err != nil {
		db.Close()
		return nil, cli.Usagef("%v", err)
	}
	var warnings []string
	if m := db.SSLMode(); m != "verify-full" {
		warnings = append(warnings, fmt.Sprintf("PostgreSQL connection with sslmode=%s: the server's certificate is not verified (or there is no TLS at all); use sslmode=verify-full in production", m))
	}
	return &Backend{
		Warnings:  warnings,
		Notes:     db.Notes(),
		Desc:      fmt.Sprintf("postgres (schema %s, queue %s, pool of %d connections)", c.PostgresSchema, c.Queue, db.Pool().Config().MaxConns),
		Queue:     q,
		Store:     postgres.NewStore(db),
		Expirer:   q,
		pingStore: db.Ping,
		close:     db.Close,
		retentions: func(context.Context) (time.Duration, time.Duration, error) {
			return c.QueueRetention, c.DLQRetention, nil
		},
		maxReceive: c.MaxReceive,
		drop:       db.DropSchema,
	}, nil
}

// useRedis replaces b's store with the Redis store.
func (b *Backend) useRedis(ctx context.Context, c Config) error {
	opts, err := redis.ParseURL(c.RedisURL)
	if err != nil {
		return cli.Usagef("--redis-url: %v", redact.Error(err, c.RedisURL))
	}
	client := redis.NewClient(opts)
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := client.Ping(pctx).Err(); err != nil {
		client.Close()
		return fmt.Errorf("redis at %s/%d: %w (check --redis-url / IC_REDIS_URL and that the server runs)", opts.Addr, opts.DB, redact.Error(err, c.RedisURL))
	}
	store, err := redisstore.New(client, redisstore.Options{Prefix: c.RedisPrefix})
	if err != nil {
		client.Close()
		return err
	}
	b.Warnings = append(b.Warnings, redisWarnings(opts)...)
	closeBackend := b.close
	b.Store, b.pingStore = store, store.Ping
	b.checkRegions = nil // the claims are on Redis now: no table to check
	b.close = func() { client.Close(); closeBackend() }
	b.Desc += fmt.Sprintf(", store redis (%s, prefix %s)", opts.Addr, c.RedisPrefix)
	dropBackend := b.drop
	b.drop = func(ctx context.Context) error {
		iter := client.Scan(ctx, 0, c.RedisPrefix+"*", 1000).Iterator()
		for iter.Next(ctx) {
			client.Del(ctx, iter.Val())
		}
		if dropBackend != nil {
			return dropBackend(ctx)
		}
		return iter.Err()
	}
	return nil
}

// openEmbedded opens the SQLite file (creating it and its schema if
// needed: an embedded backend needs no separate setup).
func openEmbedded(ctx context.Context, c Config, visibility time.Duration) (*Backend, error) {
	db, err := sqlite.Open(ctx, c.DB, sqlite.OpenOptions{Sync: sqlite.Sync(c.Sync), Existing: c.Existing})
	if errors.Is(err, sqlite.ErrNotSetUp) {
		return nil, notSetUp(err)
	}
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
		Notes:     db.Notes(),
		Desc:      fmt.Sprintf("embedded (SQLite %s, queue %s, sync %s)", c.DB, c.Queue, c.Sync),
		Queue:     q,
		Store:     sqlite.NewStore(db),
		Expirer:   q,
		pingStore: db.Ping,
		close:     func() { db.Close() },
		retentions: func(context.Context) (time.Duration, time.Duration, error) {
			return c.QueueRetention, c.DLQRetention, nil
		},
		maxReceive: c.MaxReceive,
	}, nil
}

// IdleConnsPerAWSHost is how many idle connections LoadAWS's clients keep
// to each AWS endpoint (SQS, DynamoDB): more than serve's handlers, so a
// burst does not open (and TLS-handshake) new connections.
const IdleConnsPerAWSHost = 256

// LoadAWS reads the standard AWS configuration chain and checks that it
// names a region and yields credentials. The SDK's own log lines (such as
// "failed to discard remaining HTTP response body") go to log at debug
// level (nil: slog.Default()), never raw to stderr. Its HTTP
// client keeps IdleConnsPerAWSHost idle connections per endpoint.
func LoadAWS(ctx context.Context, log *slog.Logger) (aws.Config, error) {
	cfg, err := awsconfig.LoadDefaultConfig(ctx, awsconfig.WithLogger(SDKLogger(log)),
		awsconfig.WithHTTPClient(awshttp.NewBuildableClient().WithTransportOptions(func(t *http.Transport) {
			// The SDK keeps 10 idle connections per host; serve runs 64
			// handlers (and bench/claims measured new connections opened
			// whenever the workers outnumber the idle ones): keep one warm
			// connection per worker, as the bank's client does.
			t.MaxIdleConnsPerHost = IdleConnsPerAWSHost
		})))
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

// SDKLogger is the AWS SDK's logger writing to log (nil: slog.Default(),
// as it is when a line comes) at debug level: the SDK's warnings are about
// its own plumbing (a response body it could not drain), which the caller
// has already handled or reported.
func SDKLogger(log *slog.Logger) logging.Logger {
	return logging.LoggerFunc(func(c logging.Classification, format string, v ...any) {
		l := log
		if l == nil {
			l = slog.Default()
		}
		l.Debug(fmt.Sprintf(format, v...), "source", "aws-sdk", "sdk_level", string(c))
	})
}

func openAWS(ctx context.Context, c Config, visibility time.Duration, create bool) (*Backend, error) {
	cfg, err := LoadAWS(ctx, c.Log)
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
			return "", awsProblem(err, fmt.Sprintf("queue %q %s", nameOrURL, where),
				fmt.Sprintf("create it (chargerecovery setup --backend aws) or set %s", flag), "sqs:GetQueueUrl")
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
	ro := awsdynamodb.RegionOptions{Region: cfg.Region, Mode: awsdynamodb.MultiRegionMode(c.MultiRegion), WriterRegion: c.WriterRegion}
	return &Backend{
		checkRegions: func(ctx context.Context) error {
			return checkRegions(ctx, ddb, c.Table, ro, where)
		},
		Desc:               fmt.Sprintf("aws (queue %s, table %s, %s)", c.Queue, c.Table, where),
		countsByIndexQuery: true,
		Queue:              q,
		Store:              store,
		pingStore: func(ctx context.Context) error {
			if err := awsdynamodb.Ping(ctx, ddb, c.Table); err != nil {
				return awsProblem(err, fmt.Sprintf("table %q %s", c.Table, where),
					"create it (chargerecovery setup --backend aws) or set --table / IC_TABLE", "dynamodb:DescribeTable")
			}
			return nil
		},
		close:       func() {},
		retentions:  q.RetentionPeriods,
		maxReceives: q.MaxReceiveCount,
	}, nil
}

// awsProblem names the real cause of a failed AWS call on what: the
// endpoint cannot be reached, access is denied, or it does not exist —
// each with its own fix (missing: the fix given).
func awsProblem(err error, what, missing, action string) error {
	var ne *net.OpError
	var dns *net.DNSError
	var api smithy.APIError
	switch {
	case errors.As(err, &ne) || errors.As(err, &dns):
		return fmt.Errorf("cannot reach AWS for %s: %w (check AWS_ENDPOINT_URL / AWS_REGION and the network; nothing is missing yet)", what, err)
	case errors.As(err, &api) && (strings.Contains(api.ErrorCode(), "AccessDenied") || strings.Contains(api.ErrorCode(), "UnrecognizedClient") ||
		strings.Contains(api.ErrorCode(), "InvalidClientTokenId") || strings.Contains(api.ErrorCode(), "SignatureDoesNotMatch")):
		return fmt.Errorf("access denied to %s: %w (the credentials in use need %s on it; see the IAM policy in docs/operations/aws.md)", what, err, action)
	case errors.As(err, &api) && (strings.Contains(api.ErrorCode(), "NonExistent") || strings.Contains(api.ErrorCode(), "DoesNotExist") ||
		api.ErrorCode() == "ResourceNotFoundException"):
		return fmt.Errorf("%s does not exist: %s", what, missing)
	default:
		return fmt.Errorf("%s: %w", what, err)
	}
}

// endpointOf names where AWS calls go, for messages (never credentials).
func endpointOf(cfg aws.Config) string {
	if cfg.BaseEndpoint != nil && *cfg.BaseEndpoint != "" {
		return redact.URL(*cfg.BaseEndpoint) + " (region " + cfg.Region + ")"
	}
	return "AWS region " + cfg.Region
}

// RandomID is a short random id: "r" and 7 hex digits (run names).
func RandomID() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	// A letter first: never 8 digits in a row, which a charge id made of
	// it would be shown masked as an account's (charge.ShowID).
	return "r" + hex.EncodeToString(b[:])[1:]
}

// OpenFresh opens a backend of its own for a demo or bench run: a new
// SQLite file in a temporary directory under dir (embedded), or queues and
// a table named prefix-RUN (aws). The returned drop closes it and deletes
// all of it, unless keep (then it says on stderr where it is).
func OpenFresh(ctx context.Context, stderr io.Writer, c Config, prefix, dir string, visibility time.Duration, keep bool) (*Backend, func(), error) {
	run := RandomID()
	c.Queue, c.DLQ, c.Table = prefix+"-"+run, prefix+"-"+run+"-dlq", prefix+"-"+run
	c.PostgresSchema = "ic_" + prefix + "_" + run
	c.RedisPrefix = "ic-" + prefix + "-" + run + ":"
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
		if !keep && b.drop != nil {
			dctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			_ = b.drop(dctx)
			cancel()
		}
		b.Close()
		switch {
		case keep && c.Kind == Embedded:
			fmt.Fprintf(stderr, "kept %s\n", c.DB)
		case keep && c.Kind == Postgres:
			fmt.Fprintf(stderr, "kept schema %s\n", c.PostgresSchema)
		case keep:
			fmt.Fprintf(stderr, "kept queues %s, %s and table %s\n", c.Queue, c.DLQ, c.Table)
		case c.Kind == Embedded:
			os.RemoveAll(tmp)
		case c.Kind == AWS:
			dropAWS(c)
		}
	}
	return b, drop, nil
}

// dropAWS deletes a run's queues and table.
func dropAWS(c Config) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg, err := LoadAWS(ctx, c.Log)
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

// redisWarnings: a Redis store on another host without TLS.
func redisWarnings(opts *redis.Options) []string {
	if opts.TLSConfig == nil && !loopback(opts.Addr) {
		return []string{fmt.Sprintf("Redis store at %s without TLS: records (and the traffic to them) cross the network in clear; use rediss://", opts.Addr)}
	}
	return nil
}

// loopback says whether addr (host:port) is on this host.
func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// CheckMultiRegion refuses to write a DynamoDB table on which two Regions
// could both win one claim (awsdynamodb.CheckRegions): a multi-Region table
// without --dynamodb-multi-region, strong on a table that is not, or
// single-writer outside the writer Region. Such a refusal is a usage error
// (exit 2) saying what the table reported and which flag to set. Backends
// whose claims are not on DynamoDB have nothing to check. serve calls it
// before its first claim.
func CheckMultiRegion(ctx context.Context, b *Backend) error {
	if b.checkRegions == nil {
		return nil
	}
	return b.checkRegions(ctx)
}

// regionHint is what a table refused under mode o is told to do.
func regionHint(o awsdynamodb.RegionOptions) string {
	const see = "; see docs/operations/aws.md, Multi-region tables"
	single := "--" + flagMultiRegion + " single-writer --" + flagWriterRegion + " REGION (IC_DYNAMODB_WRITER_REGION) with serve run in that Region only"
	switch o.Mode {
	case awsdynamodb.MultiRegionStrong:
		return "convert the table to multi-Region strong consistency, or set " + single + see
	case awsdynamodb.MultiRegionSingleWriter:
		return fmt.Sprintf("run serve only in %s (this process's Region comes from the AWS configuration: AWS_REGION or the profile); to move the writing, change --%s (IC_DYNAMODB_WRITER_REGION) on every serve, stopping the old Region's first%s",
			o.WriterRegion, flagWriterRegion, see)
	default:
		return "set --" + flagMultiRegion + " strong (IC_DYNAMODB_MULTI_REGION) if the table has multi-Region strong consistency, or " + single + see
	}
}

func checkRegions(ctx context.Context, c awsdynamodb.Describer, table string, o awsdynamodb.RegionOptions, where string) error {
	err := awsdynamodb.CheckTableRegions(ctx, c, table, o)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, awsdynamodb.ErrMultiRegion), errors.Is(err, awsdynamodb.ErrRegionOptions):
		return cli.Usagef("%w: %s", err, regionHint(o))
	default:
		return awsProblem(err, fmt.Sprintf("table %q %s", table, where),
			"create it (chargerecovery setup --backend aws) or set --table / IC_TABLE", "dynamodb:DescribeTable")
	}
}

// OpenExisting opens what an operator command uses: the backend of c as
// it is. A mistyped --db or --postgres-schema is an error, never a new
// empty file or schema that reads as "all clear".
func OpenExisting(ctx context.Context, c *Config) (*Backend, error) {
	var p cli.Problems
	c.Check(&p)
	if err := p.Err(); err != nil {
		return nil, err
	}
	c.Existing = true
	return Open(ctx, *c, 30*time.Second, false)
}
