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
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync"
	"syscall"
	_ "time/tzdata" // posting windows name IANA zones: the binary carries them (hosts and containers may not)

	"github.com/redis/go-redis/v9"

	"github.com/finedge/idempotent-consumer/app/service/bench"
	"github.com/finedge/idempotent-consumer/app/service/cli"
	"github.com/finedge/idempotent-consumer/app/service/demo"
)

// Exit codes.
const (
	exitOK     = 0
	exitFailed = 1 // the command ran and failed
	exitUsage  = 2 // bad flags or configuration: nothing was done
)

type command struct {
	name, summary string
	run           func(ctx context.Context, env *cli.Env, args []string) error
}

var commands = []command{
	{"serve", "run the consumer until SIGINT/SIGTERM", runServe},
	{"setup", "create the queues and the idempotency table (development, tests)", runSetup},
	{"send", "put a ChargeDueEvent (or N copies of it) on the queue", runSend},
	{"corebank", "run the core-banking simulator over HTTP(S); corebank ledger reads its postings, corebank statement|reverse|drop", runCorebank},
	{"pki", "development only: a CA, the simulator's server certificate, the consumer's client certificate and an OAuth2 secret (--dir)", runPKI},
	{"keygen", "a new Ed25519 key (--out FILE, owner-only) for the console (--console-key-file) or an operator (--operator-key-file); prints its public key", runKeygen},
	{"token", "a console token for NAME ROLE, shown once, and her token-file line (which keeps its hash only)", runToken},
	{"status", "queue depth, DLQ by reason code, records by state, stuck claims, the consumer's circuit", runStatus},
	{"inspect", "show the idempotency record of a charge", runInspect},
	{"stuck", "list claims IN_PROGRESS past their lease, oldest first", runStuck},
	{"reopen", "turn a FAILED charge back into one the next delivery debits (--reason; then redrive --reason debit_failed)", runReopen},
	{"renotify", "send missed pre-debit notices again (DEBITED_NOTIFICATION_FAILED → DEBITED; CHARGE_ID… or --all, --dry-run); never debits", runRenotify},
	{"purge", "delete idempotency records and queue messages past retention (embedded; --dry-run counts)", runPurge},
	{"dlq", "what is on the DLQ: dlq list (--reason, --charge-id, --older-than) and dlq show ID (body masked, with the charge's record)", runDLQ},
	{"redrive", "move dead-lettered messages back to the queue (--dry-run, --reason, --charge-id, --max; conflicts need --force)", runRedrive},
	{"approvals", "four-eyes and bulk actions: approvals propose redrive|reopen|renotify (what it will touch: count, sample, totals), list, show, approve (another operator), reject, run (in batches, resumable)", runApprovals},
	{"reconcile", "match the bank's statement (camt.053, camt.054, CSV) against the records and report every break; reconcile resolve CHARGE_ID closes one", runReconcile},
	{"audit", "the audit trail of console and command-line actions: audit verify (the hash chain), audit list (filtered)", runAudit},
	{"console", "the operators' web console: overview, DLQ, charges, and redrive/reopen/renotify with sign-in and an audit trail (--console-auth)", runConsole},
	{"bench", "month-end load benchmark with exactly-once verification (--baseline measures the guard's cost)", bench.Run},
	{"demo", "the whole exactly-once proof in one command (fresh state, simulator, consumer, 20 charges, ~30% redelivered)", demo.Run},
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
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(env.Stderr)
		if len(args) == 0 {
			return exitUsage
		}
		return exitOK
	}
	if env.ConfigKeys == nil {
		env.ConfigKeys = sync.OnceValue(func() map[string]string { return configKeys(ctx) })
	}
	for _, c := range commands {
		if c.name != args[0] {
			continue
		}
		err := c.run(ctx, env, args[1:])
		var ue *cli.UsageError
		switch {
		case err == nil:
			return exitOK
		case errors.Is(err, cli.ErrHelp):
			return exitOK
		case errors.As(err, &ue):
			fmt.Fprintf(env.Stderr, "chargerecovery %s: %v\n", c.name, err)
			if from := env.FromConfig(err); from != "" {
				fmt.Fprintf(env.Stderr, "  (%s)\n", from)
			}
			return exitUsage
		default:
			fmt.Fprintf(env.Stderr, "chargerecovery %s: %v\n", c.name, err)
			return exitFailed
		}
	}
	fmt.Fprintf(env.Stderr, "chargerecovery: unknown command %q\n\n", args[0])
	usage(env.Stderr)
	return exitUsage
}

// subcommands are the commands whose flags are a subcommand's.
var subcommands = map[string][]string{"dlq": {"list", "show", "purge"},
	"approvals": {"propose", "list", "show", "approve", "reject", "run", "policy"}, "audit": {"verify", "list", "rotate"}, "reconcile": {"run", "resolve"}}

// configKeys is every flag with an environment variable of every command:
// the keys a configuration file may hold (cli.Keys runs each command's
// flag definitions only).
func configKeys(ctx context.Context) map[string]string {
	var runs []func(*cli.Env) error
	for _, c := range commands {
		argvs := [][]string{{"-h"}}
		if subs, ok := subcommands[c.name]; ok {
			argvs = nil
			for _, s := range subs {
				argvs = append(argvs, []string{s, "-h"})
			}
		}
		for _, argv := range argvs {
			runs = append(runs, func(e *cli.Env) error { return c.run(ctx, e, argv) })
		}
	}
	keys, err := cli.Keys(runs...)
	if err != nil {
		panic(err) // a programming error; TestConfigKeys fails first
	}
	return keys
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: chargerecovery COMMAND [flags]   (chargerecovery COMMAND -h for its flags)")
	fmt.Fprintln(w)
	for _, c := range commands {
		fmt.Fprintf(w, "  %-10s %s\n", c.name, c.summary)
	}
}
