package main

import (
	"context"

	"github.com/finedge/idempotent-consumer/app/service/backend"
	"github.com/finedge/idempotent-consumer/app/service/cli"
)

// runPurge is the sweep by hand.
func runPurge(ctx context.Context, env *cli.Env, args []string) error {
	f, bc, asJSON := opsFlags(env, "purge", "purge [flags]")
	var r backend.PurgeRun
	f.Bool(&r.DryRun, "dry-run", "", false, "count what is past retention; delete nothing")
	r.Sweep.Bind(f)
	if err := f.Parse(args, false); err != nil {
		return err
	}
	var p cli.Problems
	if r.Sweep.Check(&p); p.Err() != nil {
		return p.Err()
	}
	r.JSON = *asJSON
	return onBackend(ctx, bc, func(b *backend.Backend) error { return backend.Purge(ctx, b, r, env.Stdout) })
}
