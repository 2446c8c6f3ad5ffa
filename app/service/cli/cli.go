// Package cli is what the chargerecovery commands share: flags that may
// also come from environment variables, configuration problems reported
// all at once, usage errors (exit 2), and the logging flags.
package cli

import (
	"cmp"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/app/tracing"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
	"github.com/finedge/idempotent-consumer/queue"
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
	// ConfigKeys is every key a configuration file may hold: each flag
	// name of every command that has an environment variable, with that
	// variable (see Keys). A key outside it is an error; a key in it that
	// this command does not read is another command's, and skipped. nil:
	// only this command's keys are known.
	ConfigKeys func() map[string]string

	// keys, set only in an Env made by Keys, collects the flags of the
	// command run in it (its Parse does nothing else).
	keys map[string]string
	// checkOnly, set only in an Env made by CheckConfig, stops Parse after
	// the configuration file.
	checkOnly bool
	// fromFile is the flags the configuration file set, with its line.
	fromFile []fileValue
}

type fileValue struct {
	path, key string
	line      int
}

// FromConfig explains a usage error about a value that came from the
// configuration file: "--backend: config FILE line 3", for each flag the
// error names; "" when it names none.
func (e *Env) FromConfig(err error) string {
	var out []string
	for _, v := range e.fromFile {
		if strings.Contains(err.Error(), "--"+v.key) {
			out = append(out, fmt.Sprintf("--%s is from config %s line %d", v.key, v.path, v.line))
		}
	}
	return strings.Join(out, "; ")
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
	// envOf is each flag's environment variable ("" for none).
	envOf  map[string]string
	want   map[string]string // what a flag's value must be, for a file's bad value
	config configFlag
}

// configFlag is --config: given twice is an error (the flag package would
// keep the last one silently, and the first file would be ignored).
type configFlag struct {
	path string
	n    int
}

func (c *configFlag) String() string { return c.path }
func (c *configFlag) Set(v string) error {
	if c.n++; c.n > 1 {
		return errors.New("--config is given twice: one file holds the configuration")
	}
	c.path = v
	return nil
}

func NewFlagSet(env *Env, name, synopsis string) *FlagSet {
	fs := flag.NewFlagSet("chargerecovery "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	f := &FlagSet{fs: fs, env: env, name: name, envOf: map[string]string{}, want: map[string]string{}}
	// The flag package calls Usage on -h and on every bad flag; the usage
	// is printed once, for -h only (Parse), and a bad flag gets one line.
	fs.Usage = func() {}
	f.usage = func() {
		fmt.Fprintf(env.Stderr, "usage: chargerecovery %s\n\nflags (environment variable in brackets):\n", synopsis)
		fs.SetOutput(env.Stderr)
		fs.PrintDefaults()
		fs.SetOutput(io.Discard)
	}
	f.config.path, _ = f.lookup("IC_CONFIG")
	fs.Var(&f.config, "config", f.desc("read flags from this `FILE`: key = value lines, the key a flag's name (queue = …), acting as its environment variable; flags and environment variables override it (docs/operations/configuration.md)", "IC_CONFIG"))
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
	f.envOf[name] = envName
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
	f.envOf[name] = envName
	f.want[name] = "a whole number"
	f.fs.IntVar(p, name, fromEnv(f, name, envName, def, strconv.Atoi, "a whole number"), f.desc(usage, envName))
}

func (f *FlagSet) Float(p *float64, name, envName string, def float64, usage string) {
	f.envOf[name] = envName
	f.want[name] = "a number"
	parse := func(v string) (float64, error) { return strconv.ParseFloat(v, 64) }
	f.fs.Float64Var(p, name, fromEnv(f, name, envName, def, parse, "a number"), f.desc(usage, envName))
}

func (f *FlagSet) Duration(p *time.Duration, name, envName string, def time.Duration, usage string) {
	f.envOf[name] = envName
	f.want[name] = "a duration such as 30s or 5m"
	f.fs.DurationVar(p, name, fromEnv(f, name, envName, def, time.ParseDuration, "a duration such as 30s or 5m"), f.desc(usage, envName))
}

func (f *FlagSet) Bool(p *bool, name, envName string, def bool, usage string) {
	f.envOf[name] = envName
	f.want[name] = "true or false"
	f.fs.BoolVar(p, name, fromEnv(f, name, envName, def, strconv.ParseBool, "true or false"), f.desc(usage, envName))
}

// Parse parses args; it returns ErrHelp after -h, a usage error for bad
// flags, bad environment values or leftover arguments (unless positional
// arguments are allowed).
func (f *FlagSet) Parse(args []string, allowArgs bool) error {
	if f.env.keys != nil {
		for name, envName := range f.envOf {
			if envName != "" {
				f.env.keys[name] = envName
			}
		}
		return ErrHelp
	}
	rest := args
	for {
		if err := f.fs.Parse(rest); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				f.usage()
				return ErrHelp
			}
			if m := badValue.FindStringSubmatch(err.Error()); m != nil && f.want[m[2]] != "" {
				// The flag package says "parse error": say what is wanted.
				return Usagef("--%s %s is not %s (see chargerecovery %s -h)", m[2], m[1], f.want[m[2]], f.name)
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
	if err := f.applyConfig(); err != nil {
		return err
	}
	if f.env.checkOnly {
		if len(f.errs) > 0 {
			return Usagef("%s", strings.Join(f.errs, "; "))
		}
		return ErrHelp
	}
	if len(f.errs) > 0 {
		return Usagef("%s", strings.Join(f.errs, "; "))
	}
	if !allowArgs && len(f.args) > 0 {
		return Usagef("unexpected argument %q (see chargerecovery %s -h)", f.args[0], f.name)
	}
	return nil
}

// badValue is the flag package's error for a value its flag does not take:
// the value (quoted) and the flag's name.
var badValue = regexp.MustCompile(`^invalid (?:boolean )?value ("(?:[^"\\]|\\.)*") for (?:flag )?-([A-Za-z0-9-]+): `)

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

// applyConfig sets, from the file --config (IC_CONFIG) names, each flag of
// this command that has an environment variable, is not on the command
// line, and whose variable is unset or empty.
func (f *FlagSet) applyConfig() error {
	path := f.config.path
	if path == "" {
		return nil
	}
	lines, err := readConfig(path)
	if err != nil {
		return err
	}
	onLine := map[string]bool{}
	f.fs.Visit(func(fl *flag.Flag) { onLine[fl.Name] = true })
	var known map[string]string
	if f.env.ConfigKeys != nil {
		known = f.env.ConfigKeys()
	}
	byEnv := map[string]string{}
	for name, envName := range known {
		byEnv[envName] = name
	}
	for name, envName := range f.envOf {
		if envName != "" {
			byEnv[envName] = name
		}
	}
	// A key another command names for a variable this command reads
	// under another flag's name sets that flag: a key acts as its
	// variable would (reconcile's report-file and the console's
	// reconcile-report-file are both IC_RECONCILE_REPORT_FILE).
	mineByEnv := map[string]string{}
	for name, envName := range f.envOf {
		if envName != "" {
			mineByEnv[envName] = name
		}
	}
	setBy := map[string]configLine{} // the flag set from the file, by the line that set it
	var errs []string
	for _, l := range lines {
		envName, mine := f.envOf[l.key]
		if !mine {
			if name, ok := mineByEnv[known[l.key]]; ok && known[l.key] != "" {
				if prev, ok := setBy[name]; ok && prev.value != l.value {
					errs = append(errs, fmt.Sprintf("line %d: %s: line %d's %s is the same variable, %s, with another value: give one", l.line, l.key, prev.line, prev.key, known[l.key]))
					continue
				}
				if holdsPassword(l.value) {
					errs = append(errs, fmt.Sprintf("line %d: %s holds a password: a configuration file holds no secrets (use a password file, see docs/operations/configuration.md)", l.line, l.key))
					continue
				}
				if _, set := f.lookup(known[l.key]); set || onLine[name] {
					continue // the flag or the environment wins
				}
				if err := f.fs.Set(name, l.value); err != nil {
					errs = append(errs, fmt.Sprintf("line %d: %s = %q is not %s", l.line, l.key, l.value, cmp.Or(f.want[name], err.Error())))
					continue
				}
				setBy[name] = l
				f.env.fromFile = append(f.env.fromFile, fileValue{path: path, key: name, line: l.line})
				continue
			}
		}
		if prev, ok := setBy[l.key]; mine && ok && prev.value != l.value {
			errs = append(errs, fmt.Sprintf("line %d: %s: line %d's %s is the same variable, %s, with another value: give one", l.line, l.key, prev.line, prev.key, envName))
			continue
		}
		switch {
		case l.key == "config":
			errs = append(errs, fmt.Sprintf("line %d: config: a configuration file does not name another", l.line))
		case l.key == "operator" || l.key == "operator-token-file" || l.key == "operator-key-file":
			errs = append(errs, fmt.Sprintf("line %d: %s: who acts is per person, never in a shared file (set IC_OPERATOR, IC_OPERATOR_KEY_FILE or the flag)", l.line, l.key))
		case mine && envName != "":
			if holdsPassword(l.value) {
				errs = append(errs, fmt.Sprintf("line %d: %s holds a password: a configuration file holds no secrets (use a password file, see docs/operations/configuration.md)", l.line, l.key))
				continue
			}
			if _, set := f.lookup(envName); set || onLine[l.key] {
				continue // the flag or the environment wins
			}
			if err := f.fs.Set(l.key, l.value); err != nil {
				errs = append(errs, fmt.Sprintf("line %d: %s = %q is not %s", l.line, l.key, l.value, cmp.Or(f.want[l.key], err.Error())))
				continue
			}
			setBy[l.key] = l
			f.env.fromFile = append(f.env.fromFile, fileValue{path: path, key: l.key, line: l.line})
		case known[l.key] != "":
			// Another command's (or a flag of this command's own without a
			// variable, such as demo's --concurrency): skipped, as its
			// environment variable would be.
		case mine:
			errs = append(errs, fmt.Sprintf("line %d: %s: --%s is given on the command line, per run; a file holds only what has an environment variable", l.line, l.key, l.key))
		default:
			if name, ok := byEnv[strings.ToUpper(l.key)]; ok {
				errs = append(errs, fmt.Sprintf("line %d: %s: write the flag's name, %s", l.line, l.key, name))
				continue
			}
			errs = append(errs, fmt.Sprintf("line %d: unknown key %q: no command has --%s with an environment variable (keys are the flag names in chargerecovery COMMAND -h)", l.line, l.key, l.key))
		}
	}
	if len(errs) > 0 {
		return Usagef("config %s %s", path, strings.Join(errs, "; "))
	}
	return nil
}

// Keys is every flag name with an environment variable of the commands
// run(env, args) runs: each is run in an Env of its own, where Parse
// records the flags and returns ErrHelp, so nothing is done or printed.
// A flag that two commands give different variables is an error (one key,
// one meaning).
func Keys(runs ...func(*Env) error) (map[string]string, error) {
	all := map[string]string{}
	for _, run := range runs {
		env := &Env{Stdout: io.Discard, Stderr: io.Discard, Getenv: func(string) string { return "" }, keys: map[string]string{}}
		if err := run(env); err != nil && !errors.Is(err, ErrHelp) {
			return nil, err
		}
		for name, envName := range env.keys {
			if prev, ok := all[name]; ok && prev != envName {
				return nil, fmt.Errorf("--%s has two environment variables, %s and %s: a configuration key must mean one thing", name, prev, envName)
			}
			all[name] = envName
		}
	}
	return all, nil
}

// CheckConfig reads the configuration file path in each of the commands
// run(env) runs, stopping each after its flags: the first problem, or nil.
// For an example file that must not rot.
func CheckConfig(path string, keys func() map[string]string, runs ...func(*Env) error) error {
	for _, run := range runs {
		env := &Env{Stdout: io.Discard, Stderr: io.Discard, ConfigKeys: keys, checkOnly: true,
			Getenv: func(k string) string {
				if k == "IC_CONFIG" {
					return path
				}
				return ""
			}}
		if err := run(env); err != nil && !errors.Is(err, ErrHelp) {
			return err
		}
	}
	return nil
}
