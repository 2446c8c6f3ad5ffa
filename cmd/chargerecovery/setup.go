package main

import (
	"context"
	"fmt"
	"time"

	"github.com/finedge/idempotent-consumer/service/backend"
	"github.com/finedge/idempotent-consumer/service/cli"
)

func runSetup(ctx context.Context, env *cli.Env, args []string) error {
	f := cli.NewFlagSet(env, "setup", "setup [flags]")
	var (
		bc         backend.Config
		visibility time.Duration
	)
	bc.Bind(f)
	f.Duration(&visibility, "visibility", "IC_VISIBILITY", 30*time.Second, "visibility timeout of the queue created")
	if err := f.Parse(args, false); err != nil {
		return err
	}
	var p cli.Problems
	bc.Check(&p)
	if visibility < time.Second || visibility > 12*time.Hour {
		p.Add("--visibility %s is outside 1s-12h", visibility)
	}
	if err := p.Err(); err != nil {
		return err
	}
	b, err := backend.Open(ctx, bc, visibility, true)
	if err != nil {
		return err
	}
	defer b.Close()
	if err := b.Ready(ctx); err != nil {
		return err
	}
	fmt.Fprintf(env.Stdout, "ready: %s\n", b.Desc)
	return nil
}
