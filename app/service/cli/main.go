package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
)

// Exit codes of a command line.
const (
	ExitOK     = 0
	ExitFailed = 1 // the command ran and failed
	ExitUsage  = 2 // bad flags or configuration: nothing was done
)

// Command is one command of a program: its name, its line of the usage,
// and its run.
type Command struct {
	Name, Summary string
	Run           func(ctx context.Context, env *Env, args []string) error
}

// Program is a command line's commands; Subcommands names, for each
// command whose flags are a subcommand's, those subcommands.
type Program struct {
	Name        string // "chargerecovery"
	Commands    []Command
	Subcommands map[string][]string
}

// Main runs args (the command's name first) in env and returns the exit
// code: ExitOK, ExitFailed with the error on env.Stderr, ExitUsage with
// the usage error (and where a configuration file set the flag it names).
// No command, -h or help prints the usage.
func (p Program) Main(ctx context.Context, env *Env, args []string) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		p.usage(env.Stderr)
		if len(args) == 0 {
			return ExitUsage
		}
		return ExitOK
	}
	if env.ConfigKeys == nil {
		env.ConfigKeys = sync.OnceValue(func() map[string]string { return p.ConfigKeys(ctx) })
	}
	for _, c := range p.Commands {
		if c.Name != args[0] {
			continue
		}
		err := c.Run(ctx, env, args[1:])
		var ue *UsageError
		switch {
		case err == nil:
			return ExitOK
		case errors.Is(err, ErrHelp):
			return ExitOK
		case errors.As(err, &ue):
			fmt.Fprintf(env.Stderr, "%s %s: %v\n", p.Name, c.Name, err)
			if from := env.FromConfig(err); from != "" {
				fmt.Fprintf(env.Stderr, "  (%s)\n", from)
			}
			return ExitUsage
		default:
			fmt.Fprintf(env.Stderr, "%s %s: %v\n", p.Name, c.Name, err)
			return ExitFailed
		}
	}
	fmt.Fprintf(env.Stderr, "%s: unknown command %q\n\n", p.Name, args[0])
	p.usage(env.Stderr)
	return ExitUsage
}

// ConfigKeys is every flag with an environment variable of every command
// (and subcommand): the keys a configuration file may hold (Keys runs each
// command's flag definitions only). A command whose flags cannot be read
// so is a programming error: it panics.
func (p Program) ConfigKeys(ctx context.Context) map[string]string {
	var runs []func(*Env) error
	for _, c := range p.Commands {
		argvs := [][]string{{"-h"}}
		if subs, ok := p.Subcommands[c.Name]; ok {
			argvs = nil
			for _, s := range subs {
				argvs = append(argvs, []string{s, "-h"})
			}
		}
		for _, argv := range argvs {
			runs = append(runs, func(e *Env) error { return c.Run(ctx, e, argv) })
		}
	}
	keys, err := Keys(runs...)
	if err != nil {
		panic(err) // a programming error; the program's config test fails first
	}
	return keys
}

func (p Program) usage(w io.Writer) {
	fmt.Fprintf(w, "usage: %s COMMAND [flags]   (%s COMMAND -h for its flags)\n", p.Name, p.Name)
	fmt.Fprintln(w)
	for _, c := range p.Commands {
		fmt.Fprintf(w, "  %-10s %s\n", c.Name, c.Summary)
	}
}
