package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/finedge/idempotent-consumer/awsdynamodb"
	"github.com/finedge/idempotent-consumer/awssqs"
)

// openFresh opens a backend of its own for a demo or bench run: a new
// SQLite file in a temporary directory under dir (embedded), or queues and
// a table named prefix-RUN (aws). The returned drop closes it and deletes
// all of it, unless keep (then it prints where it is).
func openFresh(ctx context.Context, env *environment, bc backendConfig, prefix, dir string, visibility time.Duration, keep bool) (*backend, func(), error) {
	run := randomID()
	bc.queue, bc.dlq, bc.table = prefix+"-"+run, prefix+"-"+run+"-dlq", prefix+"-"+run
	var tmp string
	if bc.kind == backendEmbedded {
		var err error
		if tmp, err = os.MkdirTemp(dir, "chargerecovery-"+prefix+"-"); err != nil {
			return nil, nil, err
		}
		bc.db = filepath.Join(tmp, prefix+".db")
	}
	b, err := openBackend(ctx, bc, visibility, true)
	if err != nil {
		if tmp != "" {
			os.RemoveAll(tmp)
		}
		return nil, nil, err
	}
	drop := func() {
		b.close()
		switch {
		case keep && bc.kind == backendEmbedded:
			fmt.Fprintf(env.stderr, "kept %s\n", bc.db)
		case keep:
			fmt.Fprintf(env.stderr, "kept queues %s, %s and table %s\n", bc.queue, bc.dlq, bc.table)
		case bc.kind == backendEmbedded:
			os.RemoveAll(tmp)
		default:
			dropAWS(bc)
		}
	}
	return b, drop, nil
}

// dropAWS deletes a run's queues and table.
func dropAWS(c backendConfig) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg, err := loadAWS(ctx)
	if err != nil {
		return
	}
	sqsc := sqs.NewFromConfig(cfg)
	for _, name := range []string{c.queue, c.dlq} {
		if u, err := awssqs.QueueURL(ctx, sqsc, name); err == nil {
			_ = awssqs.DeleteQueue(ctx, sqsc, u)
		}
	}
	_ = awsdynamodb.DeleteTable(ctx, dynamodb.NewFromConfig(cfg), c.table)
}
