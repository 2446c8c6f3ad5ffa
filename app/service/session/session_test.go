package session_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/finedge/idempotent-consumer/app/audit"
	"github.com/finedge/idempotent-consumer/app/service/approval"
	"github.com/finedge/idempotent-consumer/app/service/backend"
	"github.com/finedge/idempotent-consumer/app/service/cli"
	"github.com/finedge/idempotent-consumer/app/service/session"
	"github.com/finedge/idempotent-consumer/memstore"
)

// newKey is a fresh Ed25519 key.
func newKey(t *testing.T) ed25519.PrivateKey {
	seed := make([]byte, ed25519.SeedSize)
	rand.Read(seed)
	return ed25519.NewKeyFromSeed(seed)
}

func pubOf(k ed25519.PrivateKey) ed25519.PublicKey { return k.Public().(ed25519.PublicKey) }

// keyFile writes k as an operator's owner-only key file.
func keyFile(t *testing.T, k ed25519.PrivateKey) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "op.key")
	b, err := audit.PrivateKeyPEM(k)
	if err == nil {
		err = os.WriteFile(path, b, 0o600)
	}
	if err != nil {
		t.Fatal(err)
	}
	return path
}

func isUsage(err error) bool {
	var ue *cli.UsageError
	return errors.As(err, &ue)
}

// none is a backend that keeps no settings.
func none(context.Context) (approval.Settings, bool, error) { return approval.Settings{}, false, nil }

func TestOpenWithoutKeptSettings(t *testing.T) {
	file := filepath.Join(t.TempDir(), "audit.jsonl")
	for _, tc := range []struct {
		name      string
		o         session.Options
		usage     bool
		withTrail bool
	}{
		{name: "nothing given: nothing audited", o: session.Options{}},
		{name: "a trail given: unsigned", o: session.Options{File: file}, withTrail: true},
		{name: "the policy off", o: session.Options{File: file, Policy: "off"}, withTrail: true},
		{name: "four-eyes asked by a flag", o: session.Options{Policy: "bulk>5"}, usage: true},
		{name: "a retired token file", o: session.Options{TokenFile: "t"}, usage: true},
		{name: "a policy not read", o: session.Options{Policy: "sometimes"}, usage: true},
		{name: "a batch too large", o: session.Options{Batch: 501}, usage: true},
		{name: "a TTL too long", o: session.Options{TTL: approval.DefaultMaxTTL + 1}, usage: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := session.Open(t.Context(), tc.o, none)
			if tc.usage {
				if !isUsage(err) {
					t.Fatalf("err = %v, want a usage error", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if (s.Trail != nil) != tc.withTrail || (s.Book != nil) != tc.withTrail || s.Policy.On() {
				t.Fatalf("trail %v, book %v, policy %s", s.Trail, s.Book, s.Policy)
			}
			env := &cli.Env{Getenv: func(string) string { return "" }}
			if who, err := s.Who(env, "olga", ""); err != nil || who.Name != "olga" {
				t.Fatalf("who = %+v, %v", who, err)
			}
			if _, err := s.Who(env, "olga", "another operator"); err == nil {
				t.Fatal("a proposal needing another operator approved with nobody to name her by")
			}
		})
	}
}

func TestABadFlagIsRefusedBeforeTheBackendIsRead(t *testing.T) {
	read := false
	_, err := session.Open(t.Context(), session.Options{Policy: "sometimes"}, func(context.Context) (approval.Settings, bool, error) {
		read = true
		return approval.Settings{}, false, nil
	})
	if !isUsage(err) || read {
		t.Fatalf("err = %v, backend read %v", err, read)
	}
}

func TestOpenUnderKeptSettings(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	trail := filepath.Join(dir, "audit.jsonl")
	console, olga, viewer, stranger := newKey(t), newKey(t), newKey(t), newKey(t)
	keep := func(t *testing.T, signIn string) func(context.Context) (approval.Settings, bool, error) {
		store := memstore.New()
		ks, err := approval.OpenKept(store, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := ks.Keep(ctx, console, approval.Settings{Policy: "bulk>5", Trail: trail, SignIn: signIn, Operators: []approval.Operator{
			{Name: "olga", Role: "operator", Key: audit.PublicKeyString(pubOf(olga))},
			{Name: "vera", Role: "viewer", Key: audit.PublicKeyString(pubOf(viewer))},
		}}); err != nil {
			t.Fatal(err)
		}
		return func(ctx context.Context) (approval.Settings, bool, error) { return session.LoadKept(ctx, store, nil) }
	}
	env := &cli.Env{Getenv: func(string) string { return "" }}
	for _, tc := range []struct {
		name    string
		signIn  string
		o       session.Options
		openErr string // "": opens
		usage   bool
		whoErr  string // "": olga acts
		opFlag  string
	}{
		{name: "her own key names her", signIn: "token", o: session.Options{KeyFile: keyFile(t, olga)}},
		{name: "the trail named, given", signIn: "token", o: session.Options{File: trail, KeyFile: keyFile(t, olga), Policy: "bulk>5"}},
		{name: "another trail", signIn: "token", o: session.Options{File: filepath.Join(dir, "other.jsonl")}, openErr: "is not the trail", usage: true},
		{name: "another policy", signIn: "token", o: session.Options{Policy: "all"}, openErr: "the backend keeps bulk>5", usage: true},
		{name: "a key not kept", signIn: "token", o: session.Options{KeyFile: keyFile(t, stranger)}, openErr: "is not one the backend's settings keep"},
		{name: "no key", signIn: "token", o: session.Options{}, whoErr: "names you by your own key"},
		{name: "a viewer's key", signIn: "token", o: session.Options{KeyFile: keyFile(t, viewer)}, whoErr: "vera is a viewer: only operators act"},
		{name: "another name than the key's", signIn: "token", o: session.Options{KeyFile: keyFile(t, olga)}, opFlag: "ivan", whoErr: "is not whom the key names"},
		{name: "proxy sign-in", signIn: "proxy", o: session.Options{KeyFile: keyFile(t, olga)}, whoErr: "the command line does not act"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := session.Open(ctx, tc.o, keep(t, tc.signIn))
			if tc.openErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.openErr) || isUsage(err) != tc.usage {
					t.Fatalf("err = %v, want %q (usage %v)", err, tc.openErr, tc.usage)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if s.Trail.Path() != trail || !s.Trail.RequireSign || s.Policy.String() != "bulk>5" {
				t.Fatalf("trail %s (signed %v), policy %s", s.Trail.Path(), s.Trail.RequireSign, s.Policy)
			}
			who, err := s.Who(env, tc.opFlag, "")
			if tc.whoErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.whoErr) {
					t.Fatalf("who = %+v, %v; want %q", who, err, tc.whoErr)
				}
				return
			}
			if err != nil || who.Name != "olga" {
				t.Fatalf("who = %+v, %v", who, err)
			}
		})
	}
}

func TestActAndTheRefusalAreAudited(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	s, err := session.Open(t.Context(), session.Options{File: path}, none)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	who := approval.Actor{Name: "olga", Role: "operator", Via: "cli"}
	var log bytes.Buffer
	for _, tc := range []struct {
		name    string
		act     func(io.Writer) error
		results []string // the trail's lines for the action, oldest first
		err     string
	}{
		{name: "done", act: func(w io.Writer) error {
			// One line a write, as slog writes them.
			if _, err := io.WriteString(w, `{"audit":true,"action":"reopen","result":"reopened","charge_id":"CHG-1","msg":"reopened","bank_key":"K1"}`+"\n"); err != nil {
				return err
			}
			_, err := io.WriteString(w, `{"msg":"not audit"}`+"\n")
			return err
		}, results: []string{"requested", "reopened"}},
		{name: "failed", act: func(io.Writer) error { return errors.New("bank down") }, results: []string{"requested"}, err: "bank down"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before, err := s.Trail.Recent(100, audit.Filter{})
			if err != nil {
				t.Fatal(err)
			}
			err = session.Act(&log, s.Trail, who, "reopen", "CHG-1", "INC-1", tc.act)
			if (err == nil) != (tc.err == "") || (err != nil && !strings.Contains(err.Error(), tc.err)) {
				t.Fatalf("err = %v, want %q", err, tc.err)
			}
			es, err := s.Trail.Recent(100, audit.Filter{})
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for i := len(es) - len(before) - 1; i >= 0; i-- {
				got = append(got, es[i].Result)
			}
			if strings.Join(got, ",") != strings.Join(tc.results, ",") || es[0].Operator != "olga" {
				t.Fatalf("lines %v by %s, want %v", got, es[0].Operator, tc.results)
			}
		})
	}
	if !strings.Contains(log.String(), `"not audit"`) {
		t.Fatalf("the command's own lines not logged: %s", log.String())
	}
	es, _ := s.Trail.Recent(100, audit.Filter{})
	if d := es[len(es)-2].Detail; d != "reopened; bank key K1" {
		t.Fatalf("detail %q", d)
	}
	err = session.NeedsProposal(s.Trail, who, "redrive", "bulk>5", "redrive --force")
	if err == nil || !strings.Contains(err.Error(), "chargerecovery approvals propose redrive --force") {
		t.Fatalf("refusal: %v", err)
	}
	if es, _ := s.Trail.Recent(1, audit.Filter{}); es[0].Result != "refused" || es[0].Action != "redrive" {
		t.Fatalf("the refusal's line: %+v", es[0])
	}
}

func TestPin(t *testing.T) {
	// The files below are the test's user's; the session reads them as
	// another's (a root-owned pin, read by an operator).
	defer session.SetEUID(func() int { return -1 })()
	k := pubOf(newKey(t))
	dir := t.TempDir()
	write := func(name, text string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	env := func(v string) func(string) string {
		return func(k string) string {
			if k == "IC_CONSOLE_PUBLIC_KEY" {
				return v
			}
			return ""
		}
	}
	other := audit.PublicKeyString(pubOf(newKey(t)))
	for _, tc := range []struct {
		name  string
		file  string
		env   string
		want  ed25519.PublicKey
		err   string
		usage bool
	}{
		{name: "none", file: filepath.Join(dir, "absent.pub")},
		{name: "the file, whatever the environment says", file: write("pin.pub", audit.PublicKeyString(k), 0o644), env: other, want: k},
		{name: "the environment, without the file", file: filepath.Join(dir, "absent.pub"), env: audit.PublicKeyString(k), want: k},
		{name: "a file others may write", file: write("open.pub", audit.PublicKeyString(k), 0o666), err: "is writable by others"},
		{name: "a file that is no key", file: write("bad.pub", "nonsense", 0o644), err: "bad.pub: "},
		{name: "an environment that is no key", file: filepath.Join(dir, "absent.pub"), env: "nonsense", err: "IC_CONSOLE_PUBLIC_KEY", usage: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := session.Pin(tc.file, env(tc.env))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) || isUsage(err) != tc.usage {
					t.Fatalf("err = %v, want %q (usage %v)", err, tc.err, tc.usage)
				}
				return
			}
			if err != nil || !got.Equal(tc.want) {
				t.Fatalf("pin = %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}

func TestRotateGoesOnInANewFileChainedToTheOld(t *testing.T) {
	dir := t.TempDir()
	path, moved := filepath.Join(dir, "audit.jsonl"), filepath.Join(dir, "audit-2026-11.jsonl")
	env := &cli.Env{Getenv: func(string) string { return "" }}
	if _, err := (&session.Session{}).Rotate(env, "olga", moved); !isUsage(err) {
		t.Fatalf("a rotation without a trail: %v", err)
	}
	s, err := session.Open(t.Context(), session.Options{File: path}, none)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Trail.Append(audit.Entry{Operator: "olga", Action: "redrive", Result: "moved"}); err != nil {
		t.Fatal(err)
	}
	e, err := s.Rotate(env, "olga", moved)
	if err != nil || e.Seq != 2 || e.Operator != "olga" {
		t.Fatalf("rotate: %+v, %v", e, err)
	}
	es, err := audit.RecentIn(path, 10, audit.Filter{})
	if err != nil || len(es) != 1 || es[0].Seq != 2 {
		t.Fatalf("the new file: %+v, %v", es, err)
	}
	if _, err := audit.Check(audit.CheckOptions{Files: []string{moved, path}}); err != nil {
		t.Fatalf("the two files are not one chain: %v", err)
	}
}

func TestLoadPinnedReadsTheSettingsUnderThePin(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	cfg := backend.Config{Kind: backend.Embedded, DB: filepath.Join(dir, "ic.db"), Queue: "charges"}
	open := func() (*backend.Backend, error) { return backend.Open(ctx, cfg, 0, true) }
	b, err := open()
	if err != nil {
		t.Fatal(err)
	}
	console := newKey(t)
	ks, err := approval.OpenKept(b.Store, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := ks.Keep(ctx, console, approval.Settings{Policy: "bulk>5", Trail: filepath.Join(dir, "audit.jsonl"), SignIn: "token"}); err != nil {
		t.Fatal(err)
	}
	b.Close()
	for _, tc := range []struct {
		name string
		pin  string
		err  string
	}{
		{name: "no pin", pin: ""},
		{name: "the console's key pinned", pin: audit.PublicKeyString(pubOf(console))},
		{name: "another key pinned", pin: audit.PublicKeyString(pubOf(newKey(t))), err: "this host pins"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			getenv := func(k string) string { return map[string]string{"IC_CONSOLE_PUBLIC_KEY": tc.pin}[k] }
			cur, ok, err := session.LoadPinned(ctx, getenv, open)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				return
			}
			ring, version, err := session.Keyring(cur, ok)
			if err != nil || !ok || cur.Policy != "bulk>5" || version != 1 || ring == nil {
				t.Fatalf("settings %+v %v, keyring %v version %d, %v", cur, ok, ring, version, err)
			}
		})
	}
	if ring, version, err := session.Keyring(approval.Settings{}, false); ring != nil || version != 0 || err != nil {
		t.Fatalf("no settings: %v %d %v", ring, version, err)
	}
}
