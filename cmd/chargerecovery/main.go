// Command chargerecovery is the charge-recovery consumer and its tools:
//
//	chargerecovery serve      run the consumer (SQS + DynamoDB, or embedded SQLite)
//	chargerecovery setup      create the queue(s) and the idempotency table (development)
//	chargerecovery send       put a ChargeDueEvent (or N copies) on the queue
//	chargerecovery corebank   run the core-banking simulator (HTTP); corebank ledger reads it, corebank statement exports it
//	chargerecovery pki        development certificates for the simulator and the consumer
//	chargerecovery status     queue depth, DLQ by code, records by state, the circuit
//	chargerecovery inspect    show the idempotency record of a charge
//	chargerecovery stuck      list claims IN_PROGRESS past their lease
//	chargerecovery reopen     turn a FAILED charge back into one the next delivery debits
//	chargerecovery purge      delete records and messages past retention (embedded)
//	chargerecovery dlq        list the DLQ, show one entry
//	chargerecovery redrive    move dead-lettered messages back to the queue
//	chargerecovery approvals  propose, approve (four-eyes) and run bulk actions
//	chargerecovery reconcile  match the bank's statement against the records; resolve a break
//	chargerecovery audit      verify and list the audit trail
//	chargerecovery console    the operators' web console (sign-in, roles, audit trail)
//	chargerecovery demo       the whole exactly-once proof in one command
//	chargerecovery bench      month-end load benchmark with exactly-once verification
//
// Every flag can also be set by an environment variable (IC_*, shown in
// each command's -h). AWS region, credentials and endpoint come from the
// standard AWS chain (AWS_REGION, AWS_PROFILE, AWS_ENDPOINT_URL, ...).
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
	_ "time/tzdata" // posting windows name IANA zones: the binary carries them (hosts and containers may not)

	"github.com/redis/go-redis/v9"

	"github.com/finedge/idempotent-consumer/app/service/bench"
	"github.com/finedge/idempotent-consumer/app/service/cli"
	"github.com/finedge/idempotent-consumer/app/service/demo"
)

// Exit codes.
const (
	exitOK     = cli.ExitOK
	exitFailed = cli.ExitFailed // the command ran and failed
	exitUsage  = cli.ExitUsage  // bad flags or configuration: nothing was done
)

var commands = []cli.Command{
	{Name: "serve", Summary: "run the consumer until SIGINT/SIGTERM", Run: runServe},
	{Name: "setup", Summary: "create the queues and the idempotency table (development, tests)", Run: runSetup},
	{Name: "send", Summary: "put a ChargeDueEvent (or N copies of it) on the queue", Run: runSend},
	{Name: "corebank", Summary: "run the core-banking simulator over HTTP(S); corebank ledger reads its postings, corebank statement|reverse|drop", Run: runCorebank},
	{Name: "pki", Summary: "development only: a CA, the simulator's server certificate, the consumer's client certificate and an OAuth2 secret (--dir)", Run: runPKI},
	{Name: "keygen", Summary: "a new Ed25519 key (--out FILE, owner-only) for the console (--console-key-file) or an operator (--operator-key-file); prints its public key", Run: runKeygen},
	{Name: "token", Summary: "a console token for NAME ROLE, shown once, and her token-file line (which keeps its hash only)", Run: runToken},
	{Name: "status", Summary: "queue depth, DLQ by reason code, records by state, stuck claims, the consumer's circuit", Run: runStatus},
	{Name: "inspect", Summary: "show the idempotency record of a charge", Run: runInspect},
	{Name: "stuck", Summary: "list claims IN_PROGRESS past their lease, oldest first", Run: runStuck},
	{Name: "reopen", Summary: "turn a FAILED charge back into one the next delivery debits (--reason; then redrive --reason debit_failed)", Run: runReopen},
	{Name: "renotify", Summary: "send missed pre-debit notices again (DEBITED_NOTIFICATION_FAILED → DEBITED; CHARGE_ID… or --all, --dry-run); never debits", Run: runRenotify},
	{Name: "purge", Summary: "delete idempotency records and queue messages past retention (embedded; --dry-run counts)", Run: runPurge},
	{Name: "dlq", Summary: "what is on the DLQ: dlq list (--reason, --charge-id, --older-than) and dlq show ID (body masked, with the charge's record)", Run: runDLQ},
	{Name: "redrive", Summary: "move dead-lettered messages back to the queue (--dry-run, --reason, --charge-id, --max; conflicts need --force)", Run: runRedrive},
	{Name: "approvals", Summary: "four-eyes and bulk actions: approvals propose redrive|reopen|renotify (what it will touch: count, sample, totals), list, show, approve (another operator), reject, run (in batches, resumable)", Run: runApprovals},
	{Name: "reconcile", Summary: "match the bank's statement (camt.053, camt.054, CSV) against the records and report every break; reconcile resolve CHARGE_ID closes one", Run: runReconcile},
	{Name: "audit", Summary: "the audit trail of console and command-line actions: audit verify (the hash chain), audit list (filtered)", Run: runAudit},
	{Name: "console", Summary: "the operators' web console: overview, DLQ, charges, and redrive/reopen/renotify with sign-in and an audit trail (--console-auth)", Run: runConsole},
	{Name: "bench", Summary: "month-end load benchmark with exactly-once verification (--baseline measures the guard's cost)", Run: bench.Run},
	{Name: "demo", Summary: "the whole exactly-once proof in one command (fresh state, simulator, consumer, 20 charges, ~30% redelivered)", Run: demo.Run},
}

// redisLog drops go-redis's own retry chatter (its package-level logger):
// the commands report a failed connection themselves, once, with what to
// set.
type redisLog struct{}

func (redisLog) Printf(context.Context, string, ...any) {}

func main() { os.Exit(runProcess(&cli.Env{Stdout: os.Stdout, Stderr: os.Stderr, Getenv: os.Getenv})) }

// runProcess runs the command line of this process in env.
func runProcess(env *cli.Env) int {
	redis.SetLogger(redisLog{})
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return run(ctx, env, os.Args[1:])
}

func run(ctx context.Context, env *cli.Env, args []string) int {
	return cli.Program{Name: "chargerecovery", Commands: commands, Subcommands: subcommands}.Main(ctx, env, args)
}

// subcommands are the commands whose flags are a subcommand's.
var subcommands = map[string][]string{"dlq": {"list", "show", "purge"},
	"approvals": {"propose", "list", "show", "approve", "reject", "run", "policy"}, "audit": {"verify", "list", "rotate"}, "reconcile": {"run", "resolve"}}

// configKeys is every flag with an environment variable of every command:
// the keys a configuration file may hold.
func configKeys(ctx context.Context) map[string]string {
	return cli.Program{Commands: commands, Subcommands: subcommands}.ConfigKeys(ctx)
}
