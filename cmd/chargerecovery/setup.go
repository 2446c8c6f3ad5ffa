package main

import (
	"context"
	"os"

	"github.com/finedge/idempotent-consumer/app/console"
	"github.com/finedge/idempotent-consumer/app/service/backend"
	"github.com/finedge/idempotent-consumer/app/service/bulk"
	"github.com/finedge/idempotent-consumer/app/service/cli"
)

// bound parses args into the options O of command name (its flags bound
// by O's Bind) and runs the command on them: the commands whose flow is
// one call of the application.
func bound[O any, P interface {
	*O
	Bind(*cli.FlagSet)
}](env *cli.Env, name, usage string, args []string, run func(O) error) error {
	f := cli.NewFlagSet(env, name, usage)
	var o O
	P(&o).Bind(f)
	if err := f.Parse(args, false); err != nil {
		return err
	}
	return run(o)
}

func runSetup(ctx context.Context, env *cli.Env, args []string) error {
	return bound(env, "setup", "setup [flags]", args, func(o backend.SetupOptions) error { return backend.Setup(ctx, o, env.Stdout) })
}

func runSend(ctx context.Context, env *cli.Env, args []string) error {
	return bound(env, "send", "send [flags]", args, func(o bulk.SendOptions) error { return bulk.Run(ctx, o, os.Stdin, env.Stdout, env.Stderr) })
}

// runConsole serves the console alone, on the backend's flags.
func runConsole(ctx context.Context, env *cli.Env, args []string) error {
	return bound(env, "console", "console [flags]", args, func(o console.RunOptions) error { return console.Run(ctx, o, env.Stderr) })
}
