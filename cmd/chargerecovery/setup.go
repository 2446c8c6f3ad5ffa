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
		maxReceive int
	)
	bc.bind(f)
	f.Duration(&visibility, "visibility", "IC_VISIBILITY", 30*time.Second, "visibility timeout of the queue created")
	f.Int(&maxReceive, "max-receive", "IC_MAX_RECEIVE", 10, "redrive policy: receives before the queue itself moves a message to the DLQ")
	if err := f.parse(args, false); err != nil {
		return err
	}
	var p problems
	bc.check(&p)
	if visibility < time.Second || visibility > 12*time.Hour {
		p.add("--visibility %s is outside 1s-12h", visibility)
	}
	if maxReceive < 1 || maxReceive > 1000 {
		p.add("--max-receive %d is outside 1-1000", maxReceive)
	}
	if err := p.err(); err != nil {
		return err
	}
	b, err := openBackend(ctx, bc, &setupSpec{visibility: visibility, maxReceive: maxReceive})
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
