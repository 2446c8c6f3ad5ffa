package main

import (
	"context"

	"github.com/finedge/idempotent-consumer/app/service/backend"
	"github.com/finedge/idempotent-consumer/app/service/cli"
)

func runSetup(ctx context.Context, env *cli.Env, args []string) error {
	f := cli.NewFlagSet(env, "setup", "setup [flags]")
	var o backend.SetupOptions
	o.Bind(f)
	if err := f.Parse(args, false); err != nil {
		return err
	}
	return backend.Setup(ctx, o, env.Stdout)
}
