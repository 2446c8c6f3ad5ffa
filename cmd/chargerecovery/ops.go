package main

import (
	"cmp"
	"context"
	"io"
	"time"

	"github.com/finedge/idempotent-consumer/app/service/approval"
	"github.com/finedge/idempotent-consumer/app/service/backend"
	"github.com/finedge/idempotent-consumer/app/service/cli"
	"github.com/finedge/idempotent-consumer/app/service/operate"
	"github.com/finedge/idempotent-consumer/app/service/status"
)

// opsFlags are the flags every operator command shares.
func opsFlags(env *cli.Env, name, synopsis string) (*cli.FlagSet, *backend.Config, *bool) {
	f := cli.NewFlagSet(env, name, synopsis)
	bc := &backend.Config{}
	bc.Bind(f)
	asJSON := new(bool)
	f.Bool(asJSON, "json", "", false, "print JSON")
	return f, bc, asJSON
}

// onBackend runs fn on the backend of bc as it is, closed after.
func onBackend(ctx context.Context, bc *backend.Config, fn func(*backend.Backend) error) error {
	b, err := backend.OpenExisting(ctx, bc)
	if err != nil {
		return err
	}
	defer b.Close()
	return fn(b)
}

func runInspect(ctx context.Context, env *cli.Env, args []string) error {
	f, bc, asJSON := opsFlags(env, "inspect", "inspect [flags] CHARGE_ID")
	if err := f.Parse(args, true); err != nil {
		return err
	}
	if len(f.Args()) != 1 {
		return cli.Usagef("give exactly one CHARGE_ID (see chargerecovery %s -h)", f.Name())
	}
	return onBackend(ctx, bc, func(b *backend.Backend) error {
		return status.Inspect(ctx, b.Store, f.Args()[0], *asJSON, time.Now(), env.Stdout)
	})
}

// runReopen turns a FAILED record back into one the next delivery claims
// afresh, for an operator who fixed the cause (a charge failed by a bank
// answer that was wrongly taken as final, say). The flow: fix the cause →
// reopen → redrive --reason debit_failed.
func runReopen(ctx context.Context, env *cli.Env, args []string) error {
	f, bc, asJSON := opsFlags(env, "reopen", "reopen [flags] CHARGE_ID --reason TEXT [--new-attempt]")
	o := operate.ReopenOptions{Out: env.Stdout, Audit: env.Stderr}
	o.Bind(f)
	var ac auditConfig
	trail, book, policy, opFlag, err := ac.parseOpen(ctx, env, bc, f, args, true)
	if err != nil {
		return err
	}
	defer trail.Close()
	if err := o.Settle(f.Name(), f.Args()); err != nil {
		return err
	}
	o.JSON = *asJSON
	if why := policy.Needs(approval.Spec{Kind: approval.Reopen, NewAttempt: o.NewAttempt}, 1); why != "" {
		// Said first, whoever asks: nothing is done without a proposal.
		return needsProposal(trail, claimed(env, *opFlag, &ac, book), "reopen --new-attempt", why, o.Proposal())
	}
	who, err := ac.who(env, *opFlag, book, "")
	if err != nil {
		return err
	}
	o.Operator = who.Name
	return onBackend(ctx, bc, func(b *backend.Backend) error {
		action := "reopen"
		if o.NewAttempt {
			action = "reopen --new-attempt"
			// A hard decline is never presented again directly: where the
			// policy lets it be at all (represent-hard-decline), only by a
			// proposal another operator approves with its code shown.
			if why := operate.HardDecline(ctx, b.Store, o.ID, time.Now()); why != "" && policy.RepresentHardDecline {
				return needsProposal(trail, who, action, why, o.Proposal())
			}
		}
		return actAudited(env, trail, who, action, o.ID, o.Reason, func(w io.Writer) error {
			o.Audit = w
			return operate.ReopenCharge(ctx, b.Store, o)
		})
	})
}

func runStuck(ctx context.Context, env *cli.Env, args []string) error {
	f, bc, asJSON := opsFlags(env, "stuck", "stuck [flags]")
	var limit int
	f.Int(&limit, "limit", "", 20, "list at most this many")
	if err := f.Parse(args, false); err != nil {
		return err
	}
	if limit < 1 {
		return cli.Usagef("--limit must be at least 1")
	}
	return onBackend(ctx, bc, func(b *backend.Backend) error {
		return status.Stuck(ctx, b.Store, cmp.Or(bc.Store, bc.Kind), limit, *asJSON, time.Now(), env.Stdout)
	})
}

func runRedrive(ctx context.Context, env *cli.Env, args []string) error {
	f, bc, asJSON := opsFlags(env, "redrive", "redrive [flags]")
	r := operate.RedriveFlags{Run: operate.RedriveRun{Out: env.Stdout, Audit: env.Stderr}}
	r.Bind(f)
	var ac auditConfig
	trail, book, policy, opFlag, err := ac.parseOpen(ctx, env, bc, f, args, false)
	if err != nil {
		return err
	}
	defer trail.Close()
	if err := r.Settle(time.Now()); err != nil {
		return err
	}
	o := &r.Run
	o.JSON = *asJSON
	return onBackend(ctx, bc, func(b *backend.Backend) error {
		if o.DryRun {
			o.Operator = claimed(env, *opFlag, &ac, book).Name
			return operate.Redrive(ctx, b.Queue, *o)
		}
		if policy.On() {
			// What would move decides whether a second operator must approve.
			n, err := operate.CountMoves(ctx, b.Queue, *o)
			if err != nil {
				return err
			}
			if why := policy.Needs(approval.Spec{Kind: approval.Redrive, Force: o.Force}, n); why != "" {
				return needsProposal(trail, claimed(env, *opFlag, &ac, book), "redrive", why, r.Proposal())
			}
			o.Max = cmp.Or(o.Max, n) // never more than was counted for the policy
		}
		who, err := ac.who(env, *opFlag, book, "")
		if err != nil {
			return err
		}
		o.Operator = who.Name
		return actAudited(env, trail, who, "redrive", "", r.Codes, func(w io.Writer) error {
			o.Audit = w
			return operate.Redrive(ctx, b.Queue, *o)
		})
	})
}

func runStatus(ctx context.Context, env *cli.Env, args []string) error {
	f, bc, asJSON := opsFlags(env, "status", "status [flags]")
	var metricsURL string
	f.String(&metricsURL, "metrics-url", "IC_METRICS_URL", "http://127.0.0.1:9090/metrics", "a consumer's /metrics on this host, for its circuit state (\"\": skip)")
	if err := f.Parse(args, false); err != nil {
		return err
	}
	return onBackend(ctx, bc, func(b *backend.Backend) error {
		return status.Show(ctx, status.Sources{Backend: b.Desc, Queue: b.Queue, Store: b.Store, MetricsURL: metricsURL, Now: time.Now()}, *asJSON, env.Stdout)
	})
}

// claimed is who acts, for the audit line of a refusal: the person her
// token names where it does, else who she says she is (unverified).
func claimed(env *cli.Env, opFlag string, ac *auditConfig, book *approval.Book) approval.Actor {
	if who, err := ac.who(env, opFlag, book, ""); err == nil {
		return who
	}
	name, err := cli.WhoActs(env, opFlag)
	if err != nil {
		name = "unknown"
	}
	return approval.Actor{Name: name + " (unverified)", Via: "cli"}
}
