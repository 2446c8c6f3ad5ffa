package queue

import (
	"fmt"
	"time"
)

// TableOptions configure a queue kept in a database table beside its
// dead-letter queue (sqlite, postgres): SQS's queue attributes, in the
// same words. The zero value of a field takes its default.
type TableOptions struct {
	// Name of the queue; the DLQ is Name + "-dlq". The default is the
	// driver's ("charges" on SQLite; PostgreSQL requires one).
	Name string
	// VisibilityTimeout of every receive. Default 30s.
	VisibilityTimeout time.Duration
	// MaxReceiveCount: a message received this many times and still not
	// deleted moves to the DLQ (SQS's redrive policy). Default 10.
	MaxReceiveCount int
	// WaitTime is the long-poll wait of Receive. Default 1s.
	WaitTime time.Duration
	// PollInterval is how often an empty long poll looks again. The
	// default is the driver's (25ms on SQLite, 50ms on PostgreSQL).
	PollInterval time.Duration
	// SweepInterval is how often a receive looks for messages past
	// MaxReceiveCount to move to the DLQ (a read of the table, so not on
	// every receive). Default 5s.
	SweepInterval time.Duration
	// Retention and DLQRetention are how long a message stays on the queue
	// and on the DLQ (from when it was put there) before Expire deletes it,
	// like SQS's MessageRetentionPeriod. Defaults 4 days and 14 days (SQS's
	// default and maximum).
	Retention    time.Duration
	DLQRetention time.Duration
}

// The default message retentions of a table queue.
const (
	DefaultRetention    = 4 * 24 * time.Hour
	DefaultDLQRetention = 14 * 24 * time.Hour
)

// WithDefaults returns o with every zero field set to its default (name
// and pollInterval being the driver's), or an error naming a negative
// field.
func (o TableOptions) WithDefaults(name string, pollInterval time.Duration) (TableOptions, error) {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	if o.Name == "" {
		o.Name = name
	}
	def(&o.VisibilityTimeout, 30*time.Second)
	def(&o.WaitTime, time.Second)
	def(&o.PollInterval, pollInterval)
	def(&o.SweepInterval, 5*time.Second)
	def(&o.Retention, DefaultRetention)
	def(&o.DLQRetention, DefaultDLQRetention)
	if o.MaxReceiveCount == 0 {
		o.MaxReceiveCount = 10
	}
	for _, f := range []struct {
		name string
		neg  bool
	}{
		{"VisibilityTimeout", o.VisibilityTimeout < 0}, {"MaxReceiveCount", o.MaxReceiveCount < 0},
		{"WaitTime", o.WaitTime < 0}, {"PollInterval", o.PollInterval <= 0}, {"SweepInterval", o.SweepInterval < 0},
		{"Retention", o.Retention < 0}, {"DLQRetention", o.DLQRetention < 0},
	} {
		if f.neg {
			return o, fmt.Errorf("queue options must not be negative: %s", f.name)
		}
	}
	return o, nil
}
