package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"time"
)

var errHelp = errors.New("help shown")

// flagSet is a flag.FlagSet whose every flag may also come from an
// environment variable (the flag wins). Bad values, from either, are usage
// errors naming the flag and the variable.
type flagSet struct {
	fs   *flag.FlagSet
	env  *environment
	errs []string
	// args are the positional arguments, wherever they stood among the
	// flags ("reopen CHG-1 --reason X" and "reopen --reason X CHG-1").
	args []string
}

func newFlagSet(env *environment, name, synopsis string) *flagSet {
	fs := flag.NewFlagSet("chargerecovery "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	f := &flagSet{fs: fs, env: env}
	fs.Usage = func() {
		fmt.Fprintf(env.stderr, "usage: chargerecovery %s\n\nflags (environment variable in brackets):\n", synopsis)
		fs.SetOutput(env.stderr)
		fs.PrintDefaults()
		fs.SetOutput(io.Discard)
	}
	return f
}

func (f *flagSet) lookup(envName string) (string, bool) {
	if envName == "" {
		return "", false
	}
	v := f.env.getenv(envName)
	return v, v != ""
}

func (f *flagSet) desc(usage, envName string) string {
	if envName == "" {
		return usage
	}
	return usage + " [" + envName + "]"
}

func (f *flagSet) bad(name, envName, v, want string) {
	f.errs = append(f.errs, fmt.Sprintf("%s=%q is not %s (set --%s or unset it)", envName, v, want, name))
}

func (f *flagSet) String(p *string, name, envName, def, usage string) {
	if v, ok := f.lookup(envName); ok {
		def = v
	}
	f.fs.StringVar(p, name, def, f.desc(usage, envName))
}

// fromEnv returns def, or envName's value parsed when it is set; a value
// that does not parse is recorded as a usage problem.
func fromEnv[T any](f *flagSet, name, envName string, def T, parse func(string) (T, error), want string) T {
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

func (f *flagSet) Int(p *int, name, envName string, def int, usage string) {
	f.fs.IntVar(p, name, fromEnv(f, name, envName, def, strconv.Atoi, "a whole number"), f.desc(usage, envName))
}

func (f *flagSet) Float(p *float64, name, envName string, def float64, usage string) {
	parse := func(v string) (float64, error) { return strconv.ParseFloat(v, 64) }
	f.fs.Float64Var(p, name, fromEnv(f, name, envName, def, parse, "a number"), f.desc(usage, envName))
}

func (f *flagSet) Duration(p *time.Duration, name, envName string, def time.Duration, usage string) {
	f.fs.DurationVar(p, name, fromEnv(f, name, envName, def, time.ParseDuration, "a duration such as 30s or 5m"), f.desc(usage, envName))
}

func (f *flagSet) Bool(p *bool, name, envName string, def bool, usage string) {
	f.fs.BoolVar(p, name, fromEnv(f, name, envName, def, strconv.ParseBool, "true or false"), f.desc(usage, envName))
}

// parse parses args; it returns errHelp after -h, a usage error for bad
// flags, bad environment values or leftover arguments (unless positional
// arguments are allowed).
func (f *flagSet) parse(args []string, allowArgs bool) error {
	rest := args
	for {
		if err := f.fs.Parse(rest); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				f.fs.Usage()
				return errHelp
			}
			return usagef("%v (see -h)", err)
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
		return usagef("%s", strings.Join(f.errs, "; "))
	}
	if !allowArgs && len(f.args) > 0 {
		return usagef("unexpected argument %q (see -h)", f.args[0])
	}
	return nil
}

// problems collects configuration errors so that all are reported at once.
type problems []string

func (p *problems) add(format string, args ...any) { *p = append(*p, fmt.Sprintf(format, args...)) }

func (p problems) err() error {
	if len(p) == 0 {
		return nil
	}
	return usagef("configuration:\n  - %s", strings.Join(p, "\n  - "))
}

// logConfig is the logging flags.
type logConfig struct {
	level, format string
}

func (c *logConfig) bind(f *flagSet) {
	f.String(&c.level, "log-level", "IC_LOG_LEVEL", "info", "log level: debug, info, warn, error")
	f.String(&c.format, "log-format", "IC_LOG_FORMAT", "json", "log format: json or text")
}

func (c *logConfig) check(p *problems) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(c.level)); err != nil {
		p.add("--log-level %q is not one of debug, info, warn, error", c.level)
	}
	if c.format != "json" && c.format != "text" {
		p.add("--log-format %q is not json or text", c.format)
	}
}

func (c *logConfig) logger(w io.Writer) *slog.Logger {
	var l slog.Level
	_ = l.UnmarshalText([]byte(c.level))
	opts := &slog.HandlerOptions{Level: l}
	if c.format == "text" {
		return slog.New(slog.NewTextHandler(w, opts))
	}
	return slog.New(slog.NewJSONHandler(w, opts))
}
