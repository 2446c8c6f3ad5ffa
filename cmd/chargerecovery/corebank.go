package main

import (
	"context"

	"github.com/finedge/idempotent-consumer/app/service/banksim"
	"github.com/finedge/idempotent-consumer/app/service/cli"
)

// ledgerLine is one posting as corebank ledger --json prints it.
type ledgerLine = banksim.LedgerLine

func runCorebank(ctx context.Context, env *cli.Env, args []string) error {
	if len(args) > 0 {
		switch sub := args[0]; sub {
		case "ledger":
			f, o := cli.NewFlagSet(env, "corebank ledger", banksim.LedgerSynopsis), banksim.LedgerOptions{}
			o.Bind(f)
			if err := f.Parse(args[1:], false); err != nil {
				return err
			}
			return banksim.Ledger(ctx, o, env.Stdout)
		case "statement":
			f, o := cli.NewFlagSet(env, "corebank statement", banksim.StatementSynopsis), banksim.StatementOptions{}
			o.Bind(f)
			if err := f.Parse(args[1:], false); err != nil {
				return err
			}
			return banksim.Statement(ctx, o, env.Stdout, env.Stderr)
		case "reverse", "drop":
			f, o := cli.NewFlagSet(env, "corebank "+sub, banksim.MarkSynopsis[sub]), banksim.AdminFlags{}
			o.Bind(f)
			if err := f.Parse(args[1:], true); err != nil {
				return err
			}
			return banksim.Mark(ctx, o, sub, f.Args(), env.Stdout)
		}
	}
	f, o := cli.NewFlagSet(env, "corebank", "corebank [flags]   (corebank ledger -h: read its ledger; corebank statement -h: export it as a bank statement; corebank reverse|drop -h: have the bank reverse or lose a posting)"), banksim.ServerOptions{}
	o.Bind(f)
	if err := f.Parse(args, false); err != nil {
		return err
	}
	return banksim.Serve(ctx, o, env.Stdout, env.Stderr)
}
