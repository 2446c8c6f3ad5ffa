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
)

// runRenotify sends the pre-debit notices that failed after a successful
// debit (DEBITED_NOTIFICATION_FAILED records), with the same notification
// key, and on success records DEBITED with an audit line: one conditional
// write on the record as read. It never calls the bank.
func runRenotify(ctx context.Context, env *cli.Env, args []string) error {
	f, bc, asJSON := opsFlags(env, "renotify", "renotify [flags] (CHARGE_ID… | --all)")
	var r operate.RenotifyFlags
	r.Bind(f)
	var ac auditConfig
	trail, book, policy, opFlag, err := ac.parseOpen(ctx, env, bc, f, args, true)
	if err != nil {
		return err
	}
	defer trail.Close()
	who, err := ac.who(env, *opFlag, book, "")
	if err != nil && !r.DryRun {
		return err
	}
	ids := f.Args()
	if err := r.Check(ids); err != nil {
		return err
	}
	return onBackend(ctx, bc, func(b *backend.Backend) error {
		now := time.Now()
		recs, err := r.Pending(ctx, b.Store, cmp.Or(bc.Store, bc.Kind), ids, now)
		if err != nil {
			return err
		}
		if why := policy.Needs(approval.Spec{Kind: approval.Renotify}, len(recs)); why != "" && !r.DryRun {
			return needsProposal(trail, who, "renotify", why, r.Proposal(ids))
		}
		rn, err := r.Renotifier(ctx, b.Store, r.Log.Logger(env.Stderr))
		if err != nil {
			return err
		}
		run := operate.RenotifyRun{Operator: who.Name, Reason: r.Reason, DryRun: r.DryRun, JSON: *asJSON, Now: now, Out: env.Stdout, Audit: env.Stderr}
		if r.DryRun {
			return rn.Renotify(ctx, recs, run)
		}
		return actAudited(env, trail, who, "renotify", "", r.Reason, func(w io.Writer) error {
			run.Audit = w
			return rn.Renotify(ctx, recs, run)
		})
	})
}
