package main

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/finedge/idempotent-consumer/app/service/backend"
	"github.com/finedge/idempotent-consumer/app/service/cli"
)

// runPurge is the sweep by hand.
func runPurge(ctx context.Context, env *cli.Env, args []string) error {
	f, bc, asJSON := opsFlags(env, "purge", "purge [flags]")
	var dry bool
	var sc backend.SweepConfig
	f.Bool(&dry, "dry-run", "", false, "count what is past retention; delete nothing")
	sc.Bind(f)
	if err := f.Parse(args, false); err != nil {
		return err
	}
	var p cli.Problems
	sc.Check(&p)
	if err := p.Err(); err != nil {
		return err
	}
	b, err := openForOps(ctx, bc)
	if err != nil {
		return err
	}
	defer b.Close()
	got, none, err := backend.PurgeNow(ctx, b, sc, dry, time.Now())
	if err != nil {
		return err
	}
	if none {
		fmt.Fprintln(env.Stdout, "nothing to do: this backend expires records (DynamoDB TTL on attribute ttl) and messages (SQS MessageRetentionPeriod) itself")
		return nil
	}
	if *asJSON {
		return json.NewEncoder(env.Stdout).Encode(struct {
			backend.SweepCounts
			DryRun bool `json:"dry_run"`
		}{got, dry})
	}
	verb := "deleted"
	if dry {
		verb = "would delete"
	}
	fmt.Fprintf(env.Stdout, "past retention: %s %d idempotency record(s), %d queue message(s), %d DLQ message(s)\n",
		verb, got.Records, got.Messages, got.DLQMessages)
	return nil
}
