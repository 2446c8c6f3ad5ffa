package cli

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
)

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
