// Package cli is what the chargerecovery commands share: flags that may
// also come from environment variables, configuration problems reported
// all at once, usage errors (exit 2), and the logging flags.
package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/finedge/idempotent-consumer/charge"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
	"github.com/finedge/idempotent-consumer/queue"
	"github.com/finedge/idempotent-consumer/tracing"
)

// ErrHelp: -h was asked for and shown.
var ErrHelp = errors.New("help shown")

// Env is what a command may touch: no globals.
type Env struct {
	Stdout, Stderr io.Writer
	Getenv         func(string) string
	// Drill, set only by a test binary, wraps the queue, the store and the
	// debiter serve runs on, to inject faults a production binary must
	// never have (a SIGKILL right after a step). nil in the production
	// binary.
	Drill func(queue.Queue, driver.Store, charge.Debiter) (queue.Queue, driver.Store, charge.Debiter)
}

// UsageError is a configuration problem: exit 2 with its message.
type UsageError struct{ err error }

func (e *UsageError) Error() string { return e.err.Error() }

// Unwrap gives the formatted error, so that errors.Is and errors.As see
// what its format wrapped with %w.
func (e *UsageError) Unwrap() error { return e.err }

// Usagef returns a UsageError, formatted as fmt.Errorf does (%w wraps).
func Usagef(format string, args ...any) error { return &UsageError{fmt.Errorf(format, args...)} }

// FlagSet is a flag.FlagSet whose every flag may also come from an
// environment variable (the flag wins). Bad values, from either, are usage
// errors naming the flag and the variable.
type FlagSet struct {
	fs   *flag.FlagSet
	env  *Env
	errs []string
	// args are the positional arguments, wherever they stood among the
	// flags ("reopen CHG-1 --reason X" and "reopen --reason X CHG-1").
	args  []string
	name  string
	usage func()
}

func NewFlagSet(env *Env, name, synopsis string) *FlagSet {
	fs := flag.NewFlagSet("chargerecovery "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	f := &FlagSet{fs: fs, env: env, name: name}
	// The flag package calls Usage on -h and on every bad flag; the usage
	// is printed once, for -h only (Parse), and a bad flag gets one line.
	fs.Usage = func() {}
	f.usage = func() {
		fmt.Fprintf(env.Stderr, "usage: chargerecovery %s\n\nflags (environment variable in brackets):\n", synopsis)
		fs.SetOutput(env.Stderr)
		fs.PrintDefaults()
		fs.SetOutput(io.Discard)
	}
	return f
}

// Name is the command's name ("serve", "dlq list").
func (f *FlagSet) Name() string { return f.name }

func (f *FlagSet) lookup(envName string) (string, bool) {
	if envName == "" {
		return "", false
	}
	v := f.env.Getenv(envName)
	return v, v != ""
}

func (f *FlagSet) desc(usage, envName string) string {
	if envName == "" {
		return usage
	}
	return usage + " [" + envName + "]"
}

func (f *FlagSet) bad(name, envName, v, want string) {
	f.errs = append(f.errs, fmt.Sprintf("%s=%q is not %s (set --%s or unset it)", envName, v, want, name))
}

func (f *FlagSet) String(p *string, name, envName, def, usage string) {
	if v, ok := f.lookup(envName); ok {
		def = v
	}
	f.fs.StringVar(p, name, def, f.desc(usage, envName))
}

// fromEnv returns def, or envName's value parsed when it is set; a value
// that does not parse is recorded as a usage problem.
func fromEnv[T any](f *FlagSet, name, envName string, def T, parse func(string) (T, error), want string) T {
	if v, ok := f.lookup(envName); ok {
		x, err := parse(v)
		if err != nil {
			f.bad(name, envName, v, want)
			return def
		}
		return x
	}
	return def
}

func (f *FlagSet) Int(p *int, name, envName string, def int, usage string) {
	f.fs.IntVar(p, name, fromEnv(f, name, envName, def, strconv.Atoi, "a whole number"), f.desc(usage, envName))
}

func (f *FlagSet) Float(p *float64, name, envName string, def float64, usage string) {
	parse := func(v string) (float64, error) { return strconv.ParseFloat(v, 64) }
	f.fs.Float64Var(p, name, fromEnv(f, name, envName, def, parse, "a number"), f.desc(usage, envName))
}

func (f *FlagSet) Duration(p *time.Duration, name, envName string, def time.Duration, usage string) {
	f.fs.DurationVar(p, name, fromEnv(f, name, envName, def, time.ParseDuration, "a duration such as 30s or 5m"), f.desc(usage, envName))
}

func (f *FlagSet) Bool(p *bool, name, envName string, def bool, usage string) {
	f.fs.BoolVar(p, name, fromEnv(f, name, envName, def, strconv.ParseBool, "true or false"), f.desc(usage, envName))
}

// Parse parses args; it returns ErrHelp after -h, a usage error for bad
// flags, bad environment values or leftover arguments (unless positional
// arguments are allowed).
func (f *FlagSet) Parse(args []string, allowArgs bool) error {
	rest := args
	for {
		if err := f.fs.Parse(rest); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				f.usage()
				return ErrHelp
			}
			return Usagef("%v (see chargerecovery %s -h)", err, f.name)
		}
		if f.fs.NArg() == 0 {
			break
		}
		if len(rest) > 0 && len(rest)-f.fs.NArg() > 0 && rest[len(rest)-f.fs.NArg()-1] == "--" {
			f.args = append(f.args, f.fs.Args()...) // everything after "--" is positional
			break
		}
		f.args = append(f.args, f.fs.Arg(0))
		rest = f.fs.Args()[1:]
	}
	if len(f.errs) > 0 {
		return Usagef("%s", strings.Join(f.errs, "; "))
	}
	if !allowArgs && len(f.args) > 0 {
		return Usagef("unexpected argument %q (see chargerecovery %s -h)", f.args[0], f.name)
	}
	return nil
}

// Problems collects configuration errors so that all are reported at once.
type Problems []string

// Add records one problem.
func (p *Problems) Add(format string, args ...any) { *p = append(*p, fmt.Sprintf(format, args...)) }

// Err is a usage error listing every problem, or nil.
func (p Problems) Err() error {
	if len(p) == 0 {
		return nil
	}
	return Usagef("configuration:\n  - %s", strings.Join(p, "\n  - "))
}

// LogConfig is the logging flags.
type LogConfig struct {
	level, format string
}

func (c *LogConfig) Bind(f *FlagSet) {
	f.String(&c.level, "log-level", "IC_LOG_LEVEL", "info", "log level: debug, info, warn, error")
	f.String(&c.format, "log-format", "IC_LOG_FORMAT", "json", "log format: json or text")
}

func (c *LogConfig) Check(p *Problems) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(c.level)); err != nil {
		p.Add("--log-level %q is not one of debug, info, warn, error", c.level)
	}
	if c.format != "json" && c.format != "text" {
		p.Add("--log-format %q is not json or text", c.format)
	}
}

func (c *LogConfig) Logger(w io.Writer) *slog.Logger {
	var l slog.Level
	_ = l.UnmarshalText([]byte(c.level))
	opts := &slog.HandlerOptions{Level: l}
	var h slog.Handler = slog.NewJSONHandler(w, opts)
	if c.format == "text" {
		h = slog.NewTextHandler(w, opts)
	}
	return slog.New(tracing.LogHandler(h))
}

// Args are the positional arguments, wherever they stood among the flags.
func (f *FlagSet) Args() []string { return f.args }

// Flags is the underlying flag set, for flags without an environment
// variable of a type FlagSet does not offer.
func (f *FlagSet) Flags() *flag.FlagSet { return f.fs }
