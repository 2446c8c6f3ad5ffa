package main

import (
	"context"
	"fmt"
	"github.com/finedge/idempotent-consumer/internal/secretfile"
	"strings"

	"github.com/finedge/idempotent-consumer/app/corebanksim"
	"github.com/finedge/idempotent-consumer/app/service/cli"
)

const statementSynopsis = `corebank statement --from D --to D [--format camt053|csv] [--collection-account ID] [--out FILE] [flags]

Exports the core-banking SIMULATOR's ledger as the bank statement of the
period [--from, --to) (GET /v1/statement: its admin API): camt.053 of the
fee collection account (--collection-account, default FEES-COLLECTION) or
CSV; each posting a credit, each reversal (corebank reverse) a debit with
RvslInd, a lost posting (corebank drop) left out. reconcile reads it
with the same --collection-account. --out writes the file owner-only
(0600), whole by rename; without it the statement goes to stdout. It
authenticates as corebank ledger does.`

const reverseSynopsis = `corebank reverse KEY [flags]

Has the core-banking SIMULATOR reverse the posting under bank key KEY
(POST /v1/ledger/KEY/reverse): a statement of a period holding now then
carries a reversal of it. The ledger keeps the posting (marked
reversedAt). For demos and drills of reconciliation. It authenticates as
corebank ledger does.`

const dropSynopsis = `corebank drop KEY [flags]

Has the core-banking SIMULATOR lose the posting under bank key KEY
(POST /v1/ledger/KEY/drop): its statements leave it out, which
reconcile reports as a break. The ledger keeps the posting (marked
dropped). For demos and drills of reconciliation. It authenticates as
corebank ledger does.`

func runCorebankStatement(ctx context.Context, env *cli.Env, args []string) error {
	f := cli.NewFlagSet(env, "corebank statement", statementSynopsis)
	var (
		sim                            simFlags
		from, to, format, account, out string
	)
	sim.bind(f)
	f.String(&from, "from", "", "", "the period's start, YYYY-MM-DD (UTC midnight) or RFC 3339 (required)")
	f.String(&to, "to", "", "", "the period's end (exclusive), YYYY-MM-DD or RFC 3339 (required)")
	f.String(&format, "format", "", "camt053", "camt053 or csv")
	f.String(&account, "collection-account", "IC_COLLECTION_ACCOUNT", "", "the fee collection account the camt.053 statement is of (IBAN or account id); default FEES-COLLECTION")
	f.String(&out, "out", "", "", "write the statement to this file (0600) instead of stdout")
	if err := f.Parse(args, false); err != nil {
		return err
	}
	var p cli.Problems
	fromT, errFrom := corebanksim.ParseStatementTime(from)
	toT, errTo := corebanksim.ParseStatementTime(to)
	switch {
	case from == "" || to == "":
		p.Add("--from and --to are required")
	case errFrom != nil:
		p.Add("--from: %v", errFrom)
	case errTo != nil:
		p.Add("--to: %v", errTo)
	case !fromT.Before(toT):
		p.Add("--from must be before --to")
	}
	if format != "camt053" && format != "csv" {
		p.Add("--format %q: want camt053 or csv", format)
	}
	admin, err := sim.admin(&p)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, sim.timeout)
	defer cancel()
	b, err := admin.Statement(ctx, fromT, toT, format, strings.TrimSpace(account))
	if err != nil {
		return sim.explain(err)
	}
	if out == "" {
		_, err := env.Stdout.Write(b)
		return err
	}
	if err := secretfile.Write(out, b); err != nil {
		return fmt.Errorf("--out: %w", err)
	}
	fmt.Fprintf(env.Stderr, "statement %s to %s written to %s (%d bytes)\n", fromT.UTC().Format("2006-01-02T15:04:05Z"), toT.UTC().Format("2006-01-02T15:04:05Z"), out, len(b))
	return nil
}

// runCorebankMark runs corebank reverse or corebank drop.
func runCorebankMark(ctx context.Context, env *cli.Env, name string, args []string) error {
	synopsis, call, done := reverseSynopsis, (*corebanksim.Admin).Reverse, "reversed: statements from now on carry its reversal"
	if name == "drop" {
		synopsis, call, done = dropSynopsis, (*corebanksim.Admin).Drop, "dropped: statements leave it out"
	}
	f := cli.NewFlagSet(env, "corebank "+name, synopsis)
	var sim simFlags
	sim.bind(f)
	if err := f.Parse(args, true); err != nil {
		return err
	}
	var p cli.Problems
	if n := len(f.Args()); n != 1 || strings.TrimSpace(f.Args()[0]) == "" {
		p.Add("want exactly one bank key (got %d arguments)", n)
	}
	admin, err := sim.admin(&p)
	if err != nil {
		return err
	}
	key := f.Args()[0]
	ctx, cancel := context.WithTimeout(ctx, sim.timeout)
	defer cancel()
	if err := call(admin, ctx, key); err != nil {
		return sim.explain(err)
	}
	fmt.Fprintf(env.Stdout, "%s: %s\n", key, done)
	return nil
}
