package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/finedge/idempotent-consumer/app/audit"
	"github.com/finedge/idempotent-consumer/app/service/backend"
	"github.com/finedge/idempotent-consumer/app/service/cli"
	"github.com/finedge/idempotent-consumer/app/service/session"
)

// runAudit is chargerecovery audit verify|list.
func runAudit(ctx context.Context, env *cli.Env, args []string) error {
	sub := ""
	if len(args) > 0 {
		sub = args[0]
	}
	switch sub {
	case "verify", "list", "rotate":
	case "-h", "--help":
		fmt.Fprintln(env.Stderr, "usage: chargerecovery audit verify [--head SEQ:SHA256,…] [--audit-file FILE | FILE…] | audit list [flags] | audit rotate --to FILE\n\n  verify  check the hash chain of the trail (files given oldest first are checked as one chain), and that it holds the heads logged when lines were written (--head); exit 1 naming the first line that breaks it\n  list    the last entries, newest first, filtered (--operator, --action, --charge-id, --proposal, --via)\n  rotate  move the trail to FILE and go on in a new file at its path, chained to it (monthly, for retention)\n\nchargerecovery audit verify -h, audit list -h and audit rotate -h give the flags.")
		return cli.ErrHelp
	default:
		return cli.Usagef("say audit verify or audit list (see chargerecovery audit -h)")
	}
	f := cli.NewFlagSet(env, "audit "+sub, "audit "+sub+" [flags]")
	var ac auditConfig
	f.String(&ac.File, "audit-file", "IC_AUDIT_FILE", "", "the audit trail")
	var asJSON bool
	f.Bool(&asJSON, "json", "", false, "print JSON")
	var flt audit.Filter
	limit := 50
	var heads, to string
	var chainOnly bool
	bc := &backend.Config{}
	switch sub {
	case "verify":
		f.String(&heads, "head", "", "", "heads logged when lines were written (the \"audit head\" log lines), SEQ:SHA256 comma-separated: the trail must hold each")
		bc.Bind(f)
		f.Bool(&chainOnly, "chain-only", "", false, "check the hash chain alone, without the keys the backend keeps (a line appended by hand, well chained, then passes)")
	case "rotate":
		f.String(&to, "to", "", "", "where the current trail goes (a new name, e.g. audit-2026-11.jsonl)")
		bc.Bind(f)
		f.String(&ac.KeyFile, "operator-key-file", "IC_OPERATOR_KEY_FILE", "", "your own key: it signs the rotate line where the backend keeps four-eyes settings")
		f.String(&flt.Operator, "operator", "IC_OPERATOR", "", "who rotates (named in the new file's first line)")
	}
	if sub == "list" {
		f.String(&flt.Operator, "operator", "", "", "only this person's")
		f.String(&flt.Action, "action", "", "", "only actions starting so (redrive, reopen, approve, batch…)")
		f.String(&flt.ChargeID, "charge-id", "", "", "only lines naming this charge")
		f.String(&flt.Proposal, "proposal", "", "", "only this proposal's")
		f.String(&flt.Via, "via", "", "", "console or cli")
		f.Int(&limit, "limit", "", 50, "at most this many")
	}
	if err := f.Parse(args[1:], sub == "verify"); err != nil {
		return err
	}
	files := f.Args()
	if len(files) == 0 && ac.File != "" {
		files = []string{ac.File}
	}
	if len(files) == 0 {
		return cli.Usagef("give the trail: --audit-file FILE (IC_AUDIT_FILE)")
	}
	if sub == "rotate" {
		if to == "" {
			return cli.Usagef("give --to FILE: where the current trail goes")
		}
		ac.File = files[0]
		if _, _, _, err := ac.open(ctx, env, bc); err != nil {
			return err
		}
		defer ac.s.Close()
		e, err := ac.s.Rotate(env, flt.Operator, to)
		if err != nil {
			return err
		}
		fmt.Fprintf(env.Stdout, "rotated: the trail up to seq %d is in %s; %s goes on at seq %d (check both with chargerecovery audit verify %s %s)\n", e.Seq-1, to, files[0], e.Seq, to, files[0])
		return nil
	}
	if sub == "list" {
		if limit < 1 {
			return cli.Usagef("--limit must be at least 1")
		}
		es, err := audit.RecentIn(files[0], limit, flt)
		if err != nil {
			return err
		}
		return printed(env, asJSON, map[string]any{"entries": es}, func(w io.Writer) { audit.PrintEntries(w, es) })
	}
	anchors, err := audit.ParseAnchors(cli.SplitList(heads))
	if err != nil {
		return cli.Usagef("%v", err)
	}
	o := audit.CheckOptions{Files: files, Anchors: anchors, ChainOnly: chainOnly}
	if !chainOnly {
		cur, ok, err := keptSettings(ctx, env, bc)
		if err != nil {
			return cli.Usagef("the backend holds the keys that vouch for the trail's lines, and it cannot be read (%v): give --backend and its flags, or --chain-only", err)
		}
		if o.Keys, o.KeptVersion, err = session.Keyring(cur, ok); err != nil {
			return err
		}
	}
	checked, err := audit.Check(o)
	if pe := (*os.PathError)(nil); errors.As(err, &pe) {
		return cli.Usagef("%v", err)
	} else if err != nil {
		return err
	}
	checked.Print(env.Stdout)
	return nil
}
