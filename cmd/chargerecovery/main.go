// Command chargerecovery is the charge-recovery consumer and its tools:
//
//	chargerecovery serve      run the consumer (SQS + DynamoDB, or embedded SQLite)
//	chargerecovery setup      create the queue(s) and the idempotency table (development)
//	chargerecovery send       put a ChargeDueEvent (or N copies) on the queue
//	chargerecovery corebank   run the core-banking simulator (HTTP)
//	chargerecovery inspect    show the idempotency record of a charge
//	chargerecovery stuck      list claims IN_PROGRESS past their lease
//	chargerecovery reopen     turn a FAILED charge back into one the next delivery debits
//	chargerecovery purge      delete records and messages past retention (embedded)
//	chargerecovery redrive    move dead-lettered messages back to the queue
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
	"syscall"
)

// Exit codes.
const (
	exitOK     = 0
	exitFailed = 1 // the command ran and failed
	exitUsage  = 2 // bad flags or configuration: nothing was done
)

// usageError is a configuration problem: exit 2 with its message.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return &usageError{fmt.Sprintf(format, args...)} }

type command struct {
	name, summary string
	run           func(ctx context.Context, env *environment, args []string) error
}

// environment is what a command may touch: no globals.
type environment struct {
	stdout, stderr io.Writer
	getenv         func(string) string
}

var commands = []command{
	{"serve", "run the consumer until SIGINT/SIGTERM", runServe},
	{"setup", "create the queues and the idempotency table (development, tests)", runSetup},
	{"send", "put a ChargeDueEvent (or N copies of it) on the queue", runSend},
	{"corebank", "run the core-banking simulator over HTTP", runCorebank},
	{"inspect", "show the idempotency record of a charge", runInspect},
	{"stuck", "list claims IN_PROGRESS past their lease, oldest first", runStuck},
	{"reopen", "turn a FAILED charge back into one the next delivery debits (--reason; then redrive --reason debit_failed)", runReopen},
	{"purge", "delete idempotency records and queue messages past retention (embedded; --dry-run counts)", runPurge},
	{"redrive", "move dead-lettered messages back to the queue (--dry-run, --reason, --max; conflicts need --force)", runRedrive},
	{"bench", "month-end load benchmark with exactly-once verification (--baseline measures the guard's cost)", runBench},
	{"demo", "the whole exactly-once proof in one command (fresh state, simulator, consumer, 20 charges, ~30% redelivered)", runDemo},
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, &environment{stdout: os.Stdout, stderr: os.Stderr, getenv: os.Getenv}, os.Args[1:])
	stop()
	os.Exit(code)
}

func run(ctx context.Context, env *environment, args []string) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(env.stderr)
		if len(args) == 0 {
			return exitUsage
		}
		return exitOK
	}
	for _, c := range commands {
		if c.name != args[0] {
			continue
		}
		err := c.run(ctx, env, args[1:])
		var ue *usageError
		switch {
		case err == nil:
			return exitOK
		case errors.Is(err, errHelp):
			return exitOK
		case errors.As(err, &ue):
			fmt.Fprintf(env.stderr, "chargerecovery %s: %v\n", c.name, err)
			return exitUsage
		default:
			fmt.Fprintf(env.stderr, "chargerecovery %s: %v\n", c.name, err)
			return exitFailed
		}
	}
	fmt.Fprintf(env.stderr, "chargerecovery: unknown command %q\n\n", args[0])
	usage(env.stderr)
	return exitUsage
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: chargerecovery COMMAND [flags]   (chargerecovery COMMAND -h for its flags)")
	fmt.Fprintln(w)
	for _, c := range commands {
		fmt.Fprintf(w, "  %-10s %s\n", c.name, c.summary)
	}
}
