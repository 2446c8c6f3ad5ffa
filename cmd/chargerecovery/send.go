package main

import (
	"context"
	"os"

	"github.com/finedge/idempotent-consumer/app/service/bulk"
	"github.com/finedge/idempotent-consumer/app/service/cli"
)

func runSend(ctx context.Context, env *cli.Env, args []string) error {
	f := cli.NewFlagSet(env, "send", "send [flags]")
	var o bulk.SendOptions
	o.Bind(f)
	if err := f.Parse(args, false); err != nil {
		return err
	}
	return bulk.Run(ctx, o, os.Stdin, env.Stdout, env.Stderr)
}
