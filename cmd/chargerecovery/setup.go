package main

import (
	"context"
	"fmt"
	"time"
)

func runSetup(ctx context.Context, env *environment, args []string) error {
	f := newFlagSet(env, "setup", "setup [flags]")
	var (
		bc         backendConfig
		visibility time.Duration
	)
	bc.bind(f)
	f.Duration(&visibility, "visibility", "IC_VISIBILITY", 30*time.Second, "visibility timeout of the queue created")
	if err := f.parse(args, false); err != nil {
		return err
	}
	var p problems
	bc.check(&p)
	if visibility < time.Second || visibility > 12*time.Hour {
		p.add("--visibility %s is outside 1s-12h", visibility)
	}
	if err := p.err(); err != nil {
		return err
	}
	b, err := openBackend(ctx, bc, visibility, true)
	if err != nil {
		return err
	}
	defer b.close()
	if err := b.ready(ctx); err != nil {
		return err
	}
	fmt.Fprintf(env.stdout, "ready: %s\n", b.desc)
	return nil
}
