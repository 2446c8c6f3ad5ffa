package main

import (
	"context"
	"fmt"
	"time"

	"github.com/finedge/idempotent-consumer/app/service/backend"
	"github.com/finedge/idempotent-consumer/app/service/cli"
	"github.com/finedge/idempotent-consumer/app/service/operate"
)

// dlqEntry is one DLQ entry as an operator sees it.
type dlqEntry = operate.Entry

func runDLQ(ctx context.Context, env *cli.Env, args []string) error {
	if len(args) == 0 || (args[0] != "list" && args[0] != "show" && args[0] != "purge") {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help") {
			fmt.Fprintln(env.Stderr, "usage: chargerecovery dlq list [flags] | dlq show [flags] ID | dlq purge [flags] ID…\n\n  list   what is on the DLQ: charge, masked account, amount, reason, receive count, age\n  show   one entry (by its DLQ id or its charge id): the body with the account masked, and the charge's record\n  purge  delete entries for good: those over the size limit, which can never be redriven (others only with --force)\n\nchargerecovery dlq list -h, dlq show -h and dlq purge -h give the flags.")
			return cli.ErrHelp
		}
		return cli.Usagef("say dlq list, dlq show ID or dlq purge ID… (see chargerecovery dlq -h)")
	}
	switch args[0] {
	case "list":
		return runDLQList(ctx, env, args[1:])
	case "purge":
		return runDLQPurge(ctx, env, args[1:])
	}
	return runDLQShow(ctx, env, args[1:])
}

func runDLQList(ctx context.Context, env *cli.Env, args []string) error {
	f, bc, asJSON := opsFlags(env, "dlq list", "dlq list [--reason CODE,…] [--charge-id ID,…] [--older-than D] [--limit N] [--json]")
	var l operate.ListFlags
	l.Bind(f)
	if err := f.Parse(args, false); err != nil {
		return err
	}
	o, err := l.Options(time.Now())
	if err != nil {
		return err
	}
	l.JSON = *asJSON
	return onBackend(ctx, bc, func(b *backend.Backend) error { return l.ListTo(ctx, b.Queue, o, env.Stdout) })
}

func runDLQShow(ctx context.Context, env *cli.Env, args []string) error {
	f, bc, asJSON := opsFlags(env, "dlq show", "dlq show [flags] ID (a DLQ entry id or a charge id)")
	if err := f.Parse(args, true); err != nil {
		return err
	}
	if len(f.Args()) != 1 {
		return cli.Usagef("give exactly one ID: a DLQ entry id or a charge id (see dlq list)")
	}
	return onBackend(ctx, bc, func(b *backend.Backend) error {
		return operate.Show(ctx, b.Queue, b.Store, operate.ShowOptions{ID: f.Args()[0], JSON: *asJSON, Out: env.Stdout})
	})
}

// runDLQPurge deletes DLQ entries by id for good (operate.PurgeDLQ).
func runDLQPurge(ctx context.Context, env *cli.Env, args []string) error {
	f, bc, asJSON := opsFlags(env, "dlq purge", "dlq purge [--force] [--operator NAME] ID [ID …] (DLQ entry ids, from dlq list)")
	o := operate.PurgeOptions{Out: env.Stdout, Audit: env.Stderr}
	f.Bool(&o.Force, "force", "", false, "also delete entries that could be redriven (a charge on them is then no longer on the DLQ: check each with dlq show first)")
	var ac auditConfig
	ac.Bind(f)
	opFlag := cli.OperatorFlag(f)
	if err := f.Parse(args, true); err != nil {
		return err
	}
	if o.IDs = f.Args(); len(o.IDs) == 0 {
		return cli.Usagef("give the DLQ entry ids to delete (dlq list shows them)")
	}
	if _, _, _, err := ac.open(ctx, env, bc); err != nil {
		return err
	}
	defer ac.s.Close()
	o.JSON, o.Audited = *asJSON, ac.s.Audited(env, *opFlag, "dlq purge")
	return onBackend(ctx, bc, func(b *backend.Backend) error { return operate.PurgeDLQ(ctx, b.Queue, o) })
}
