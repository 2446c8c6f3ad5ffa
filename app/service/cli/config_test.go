package cli

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// cmdFlags is a command with a flag of each kind that has a variable, and
// one without.
type cmdFlags struct {
	queue string
	lease time.Duration
	conc  int
	sync  bool
	rate  float64
	json  bool
}

func parseWith(t *testing.T, file string, env map[string]string, args ...string) (cmdFlags, *Env, error) {
	t.Helper()
	if env == nil {
		env = map[string]string{}
	}
	if file != "" {
		p := filepath.Join(t.TempDir(), "ic.conf")
		if err := os.WriteFile(p, []byte(file), 0o640); err != nil {
			t.Fatal(err)
		}
		if _, ok := env["IC_CONFIG"]; !ok {
			args = append([]string{"--config", p}, args...)
		} else {
			env["IC_CONFIG"] = p
		}
	}
	var out, errb bytes.Buffer
	e := &Env{Stdout: &out, Stderr: &errb, Getenv: func(k string) string { return env[k] },
		// another command's key: serve's --http-addr
		ConfigKeys: func() map[string]string {
			return map[string]string{"http-addr": "IC_HTTP_ADDR", "queue": "IC_QUEUE", "lease": "IC_LEASE", "transient-rate": "IC_COREBANK_TRANSIENT_RATE",
				"queue-name": "IC_QUEUE"} // another command's name for this one's --queue
		}}
	f := NewFlagSet(e, "test", "test [flags]")
	var c cmdFlags
	f.String(&c.queue, "queue", "IC_QUEUE", "default-queue", "")
	f.Duration(&c.lease, "lease", "IC_LEASE", time.Minute, "")
	f.Int(&c.conc, "concurrency", "IC_CONCURRENCY", 8, "")
	f.Bool(&c.sync, "sync", "IC_SYNC", false, "")
	f.Float(&c.rate, "transient-rate", "", 0, "") // as demo's: no variable here
	f.Bool(&c.json, "json", "", false, "")
	err := f.Parse(args, false)
	return c, e, err
}

func TestConfigPrecedence(t *testing.T) {
	const file = "# comment\nqueue = from-file\nlease = 2m # inline comment\nconcurrency = \"16\"\nsync = true\n"
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
		want cmdFlags
	}{
		{"config over default", nil, nil, cmdFlags{queue: "from-file", lease: 2 * time.Minute, conc: 16, sync: true}},
		{"env over config", map[string]string{"IC_QUEUE": "from-env", "IC_LEASE": "3m"}, nil, cmdFlags{queue: "from-env", lease: 3 * time.Minute, conc: 16, sync: true}},
		{"flag over env and config", map[string]string{"IC_QUEUE": "from-env"}, []string{"--queue", "from-flag", "--concurrency=4", "--sync=false"}, cmdFlags{queue: "from-flag", lease: 2 * time.Minute, conc: 4}},
		{"empty env is unset", map[string]string{"IC_QUEUE": ""}, nil, cmdFlags{queue: "from-file", lease: 2 * time.Minute, conc: 16, sync: true}},
		{"IC_CONFIG names the file", map[string]string{"IC_CONFIG": ""}, nil, cmdFlags{queue: "from-file", lease: 2 * time.Minute, conc: 16, sync: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, _, err := parseWith(t, file, tc.env, tc.args...)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
	t.Run("no file: defaults", func(t *testing.T) {
		got, _, err := parseWith(t, "", nil)
		if err != nil || got != (cmdFlags{queue: "default-queue", lease: time.Minute, conc: 8}) {
			t.Errorf("got %+v, %v", got, err)
		}
	})
}

func TestConfigRefused(t *testing.T) {
	for _, tc := range []struct {
		name, file string
		want       []string // in the message, with the line
	}{
		{"unknown key", "queue = q\nqueue-ulr = x\n", []string{"line 2", `unknown key "queue-ulr"`}},
		{"duplicate key", "queue = a\n\nqueue = b\n", []string{"line 3", "queue is given twice (first on line 1)"}},
		{"wrong type", "lease = 5\nconcurrency = many\n", []string{`line 1: lease = "5" is not a duration`, `line 2: concurrency = "many" is not a whole number`}},
		{"bool", "sync = yes\n", []string{`line 1: sync = "yes" is not true or false`}},
		{"a per-run flag", "json = true\n", []string{"line 1: json: --json is given on the command line"}},
		{"an IC_ name", "IC_QUEUE = q\n", []string{"line 1: IC_QUEUE: write the flag's name, queue"}},
		{"an IC_ name lower-case", "ic_queue = q\n", []string{"line 1: ic_queue: write the flag's name, queue"}},
		{"not a key", "que ue = q\n", []string{"line 1", "not a key"}},
		{"operator", "operator = alice\n", []string{"line 1: operator: who acts is per person"}},
		{"operator's token", "operator-token-file = /home/alice/.token\n", []string{"line 1: operator-token-file: who acts is per person"}},
		{"no equals", "queue\n", []string{"line 1", "not key = value"}},
		{"no equals: the text not printed", "hunter2-s3cret\n", []string{"line 1: the line is not key = value"}},
		{"section", "[serve]\n", []string{"line 1", "sections are not supported"}},
		{"unterminated quote", "queue = \"abc\n", []string{"line 1: queue"}},
		{"text after quote", "queue = \"a\" b\n", []string{"line 1: queue"}},
		{"password in a URL", "queue = postgres://u:pw@db/x\n", []string{"line 1: queue holds a password"}},
		{"password in a DSN", "queue = host=db password=pw\n", []string{"line 1: queue holds a password"}},
		{"nested config", "config = other.conf\n", []string{"line 1: config"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := parseWith(t, tc.file, nil)
			var ue *UsageError
			if !errors.As(err, &ue) {
				t.Fatalf("err = %v, want a usage error (exit 2)", err)
			}
			if !strings.Contains(err.Error(), "ic.conf") {
				t.Errorf("%q does not name the file", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%q does not say %q", err, w)
				}
			}
			if strings.Contains(err.Error(), "pw@") || strings.Contains(err.Error(), "password=pw") || strings.Contains(err.Error(), "s3cret") {
				t.Errorf("%q prints the password", err)
			}
		})
	}
}

func TestConfigOtherCommandsKeys(t *testing.T) {
	// http-addr is serve's; transient-rate is the simulator's, and this
	// command's own --transient-rate has no variable: both skipped.
	got, _, err := parseWith(t, "http-addr = :9999\ntransient-rate = 0.5\nqueue = q\n", nil)
	if err != nil {
		t.Fatal(err)
	}
	if got.queue != "q" || got.rate != 0 {
		t.Errorf("got %+v", got)
	}
}

// A key acts as its variable: another command's name for a variable this
// command reads under its own flag sets that flag; the two names with two
// values are refused.
func TestConfigOneVariableTwoNames(t *testing.T) {
	got, _, err := parseWith(t, "queue-name = shared\n", nil)
	if err != nil || got.queue != "shared" {
		t.Fatalf("queue-name (IC_QUEUE) = %q, %v; want shared", got.queue, err)
	}
	if got, _, err := parseWith(t, "queue-name = shared\nqueue = shared\n", nil); err != nil || got.queue != "shared" {
		t.Fatalf("both names, one value: %q, %v", got.queue, err)
	}
	if got, _, err := parseWith(t, "queue-name = shared\n", nil, "--queue", "flag"); err != nil || got.queue != "flag" {
		t.Fatalf("the flag wins: %q, %v", got.queue, err)
	}
	if got, _, err := parseWith(t, "queue-name = shared\n", map[string]string{"IC_QUEUE": "env"}); err != nil || got.queue != "env" {
		t.Fatalf("the variable wins: %q, %v", got.queue, err)
	}
	_, _, err = parseWith(t, "queue = one\nqueue-name = two\n", nil)
	if err == nil || !strings.Contains(err.Error(), "same variable") {
		t.Fatalf("two names, two values: %v", err)
	}
}

func TestConfigFileProblems(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.conf")
	if err := os.WriteFile(good, []byte("queue = via-link\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link.conf")
	if err := os.Symlink(good, link); err != nil {
		t.Fatal(err)
	}
	dangling := filepath.Join(dir, "dangling.conf")
	if err := os.Symlink(filepath.Join(dir, "gone.conf"), dangling); err != nil {
		t.Fatal(err)
	}
	dirLink := filepath.Join(dir, "dir.conf")
	if err := os.Symlink(t.TempDir(), dirLink); err != nil {
		t.Fatal(err)
	}
	writable := filepath.Join(dir, "w.conf")
	if err := os.WriteFile(writable, []byte("queue = q\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(writable, 0o666); err != nil {
		t.Fatal(err)
	}
	huge := filepath.Join(dir, "huge.conf")
	if err := os.WriteFile(huge, bytes.Repeat([]byte("# padding\n"), maxConfigSize/10+1), 0o644); err != nil {
		t.Fatal(err)
	}
	parse := func(args ...string) (string, error) {
		e := &Env{Stdout: &bytes.Buffer{}, Stderr: &bytes.Buffer{}, Getenv: func(string) string { return "" }}
		f := NewFlagSet(e, "test", "test")
		var q string
		f.String(&q, "queue", "IC_QUEUE", "", "")
		err := f.Parse(args, false)
		return q, err
	}
	if q, err := parse("--config", link); err != nil || q != "via-link" {
		t.Errorf("a symlink to a file (as a mounted ConfigMap): %q, %v", q, err)
	}
	if q, err := parse("--config", os.DevNull); err != nil || q != "" {
		t.Errorf("--config /dev/null (no settings; a device, mode 0666): %q, %v", q, err)
	}
	if q, err := parse("--config", ""); err != nil || q != "" {
		t.Errorf(`--config "" (none): %q, %v`, q, err)
	}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"missing", []string{"--config", filepath.Join(dir, "nope.conf")}, "nope.conf: no such file"},
		{"directory", []string{"--config", dir}, "is a directory"},
		{"writable by others", []string{"--config", writable}, "writable by every user"},
		{"huge", []string{"--config", huge}, "is over 1048576 bytes"},
		{"an endless device", []string{"--config", "/dev/zero"}, "is over 1048576 bytes"},
		{"a dangling symlink", []string{"--config", dangling}, "no such file"},
		{"a symlink to a directory", []string{"--config", dirLink}, "is a directory"},
		{"twice", []string{"--config", good, "--config", link}, "--config is given twice"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parse(tc.args...)
			var ue *UsageError
			if !errors.As(err, &ue) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want a usage error saying %q", err, tc.want)
			}
		})
	}
}

// TestConfigFromConfig: a value the file set that a command's check then
// refuses is traced to its line.
func TestConfigFromConfig(t *testing.T) {
	_, e, err := parseWith(t, "queue = nope\n", nil)
	if err != nil {
		t.Fatal(err)
	}
	got := e.FromConfig(Usagef("--queue %q is not a queue", "nope"))
	if !strings.Contains(got, "--queue is from config") || !strings.Contains(got, "line 1") {
		t.Errorf("FromConfig = %q", got)
	}
	if e.FromConfig(Usagef("--other bad")) != "" {
		t.Error("FromConfig names a flag the error does not")
	}
}

func TestKeysConflict(t *testing.T) {
	def := func(envName string) func(*Env) error {
		return func(e *Env) error {
			f := NewFlagSet(e, "x", "x")
			var s string
			f.String(&s, "addr", envName, "", "")
			return f.Parse([]string{"-h"}, false)
		}
	}
	if _, err := Keys(def("IC_A"), def("IC_A")); err != nil {
		t.Fatal(err)
	}
	if _, err := Keys(def("IC_A"), def("IC_B")); err == nil {
		t.Error("one flag name with two variables accepted")
	}
}

// A flag given a value it does not take says what it wants, not the flag
// package's "parse error" (issue 54: --poll-wait 5).
func TestABadFlagValueSaysWhatItWants(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--lease", "5"}, `--lease "5" is not a duration such as 30s or 5m (see chargerecovery test -h)`},
		{[]string{"--concurrency", "eight"}, `--concurrency "eight" is not a whole number`},
		{[]string{"--transient-rate", "half"}, `--transient-rate "half" is not a number`},
		{[]string{"--sync=maybe"}, `--sync "maybe" is not true or false`},
		{[]string{"--lease", `5"s`}, `--lease "5\"s" is not a duration`},
	} {
		_, _, err := parseWith(t, "", nil, tt.args...)
		var u *UsageError
		if !errors.As(err, &u) || !strings.Contains(err.Error(), tt.want) || strings.Contains(err.Error(), "parse error") {
			t.Errorf("%q: %v; want a usage error saying %s", tt.args, err, tt.want)
		}
	}
}

func TestProgramMain(t *testing.T) {
	withFlag := func(ctx context.Context, env *Env, args []string) error {
		f := NewFlagSet(env, "flagged", "flagged [flags]")
		var v string
		f.String(&v, "colour", "IC_COLOUR", "red", "a colour")
		if err := f.Parse(args, false); err != nil {
			return err
		}
		if v != "red" {
			return Usagef("--colour %s is not red", v)
		}
		return nil
	}
	p := Program{Name: "prog", Commands: []Command{
		{Name: "ok", Summary: "does nothing", Run: func(context.Context, *Env, []string) error { return nil }},
		{Name: "fails", Summary: "fails", Run: func(context.Context, *Env, []string) error { return errors.New("it broke") }},
		{Name: "flagged", Summary: "has a flag", Run: withFlag},
	}}
	for _, tc := range []struct {
		args   []string
		code   int
		stderr string
	}{
		{nil, ExitUsage, "usage: prog COMMAND [flags]   (prog COMMAND -h for its flags)\n\n  ok         does nothing\n"},
		{[]string{"help"}, ExitOK, "  flagged    has a flag\n"},
		{[]string{"nope"}, ExitUsage, "prog: unknown command \"nope\"\n\nusage: prog"},
		{[]string{"ok"}, ExitOK, ""},
		{[]string{"fails"}, ExitFailed, "prog fails: it broke\n"},
		{[]string{"flagged", "-h"}, ExitOK, "usage: chargerecovery flagged [flags]"},
		{[]string{"flagged", "--colour", "blue"}, ExitUsage, "prog flagged: --colour blue is not red\n"},
		{[]string{"flagged", "--bogus"}, ExitUsage, "prog flagged: "},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var stderr bytes.Buffer
			env := &Env{Stdout: new(bytes.Buffer), Stderr: &stderr, Getenv: func(string) string { return "" }}
			if code := p.Main(t.Context(), env, tc.args); code != tc.code || !strings.Contains(stderr.String(), tc.stderr) || tc.stderr == "" && stderr.Len() > 0 {
				t.Fatalf("exit %d, want %d; stderr:\n%s\nwant it to hold %q", code, tc.code, stderr.String(), tc.stderr)
			}
		})
	}
	// Keys runs each command with -h: one that fails so is a programming
	// error (ConfigKeys panics), so only the others here.
	p.Commands = []Command{p.Commands[0], p.Commands[2]}
	if keys := p.ConfigKeys(t.Context()); keys["colour"] != "IC_COLOUR" {
		t.Fatalf("ConfigKeys = %v, want colour → IC_COLOUR", keys)
	}
}
