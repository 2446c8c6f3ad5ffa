package main

import (
	"context"
	"io"

	"github.com/finedge/idempotent-consumer/app/console"
	"github.com/finedge/idempotent-consumer/app/service/cli"
	"github.com/finedge/idempotent-consumer/app/service/pipeline"
	"github.com/finedge/idempotent-consumer/app/service/serve"
)

func runServe(ctx context.Context, env *cli.Env, args []string) error {
	f := cli.NewFlagSet(env, "serve", "serve [flags]")
	var o serve.Options
	var con serveConsole
	o.Bind(f)
	con.c.Bind(f)
	if err := f.Parse(args, false); err != nil {
		return err
	}
	return serve.Run(ctx, env, o, &con)
}

// serveConsole is the console serve --console starts beside the consumer.
type serveConsole struct{ c console.Config }

func (s *serveConsole) Check(p *cli.Problems) { s.c.Check(p) }

func (s *serveConsole) Start(ctx context.Context, parts serve.Parts) (io.Closer, error) {
	cc := parts.Pipeline
	fp, err := cc.Keys()
	if err != nil {
		return nil, cli.Usagef("%w", err)
	}
	return s.c.Start(ctx, console.Deps{Backend: parts.Backend, Retention: cc.Retention, MetricsURL: parts.MetricsURL, Notifier: parts.Notifier,
		Channel: parts.Channel, Lease: cc.Lease, SkewMargin: pipeline.GuardSkew(cc.Skew), Fingerprints: fp}, parts.Log)
}
