package main

import (
	"context"

	"github.com/finedge/idempotent-consumer/app/console"
	"github.com/finedge/idempotent-consumer/app/service/cli"
)

// runConsole serves the console alone, on the backend's flags.
func runConsole(ctx context.Context, env *cli.Env, args []string) error {
	f := cli.NewFlagSet(env, "console", "console [flags]")
	var o console.RunOptions
	o.Bind(f)
	if err := f.Parse(args, false); err != nil {
		return err
	}
	return console.Run(ctx, o, env.Stderr)
}
