package console

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/finedge/idempotent-consumer/app/audit"
	"github.com/finedge/idempotent-consumer/app/service/approval"
	"github.com/finedge/idempotent-consumer/app/service/backend"
	"github.com/finedge/idempotent-consumer/app/service/cli"
	"github.com/finedge/idempotent-consumer/app/service/session"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
)

// kept is what the console's start made of the settings kept in the
// backend.
type kept struct {
	policy approval.Policy
	keys   audit.Keyring // nil: no settings kept, the trail not signed
}

// ReadKeyFile reads an Ed25519 private key from an owner-only file
// (audit.ReadPrivateKeyFile).
func ReadKeyFile(path string) (ed25519.PrivateKey, error) { return audit.ReadPrivateKeyFile(path) }

// keepSettings is the console's start: the four-eyes settings are the
// console's configuration (its flags: the deployment's word), kept in the
// backend beside the records and signed with the console's key, so that
// every other process — the command line, serve, a Lambda — reads them
// there whatever it was given. A change is a new version with its audit
// line. Only the console's key changes them: a console started by anyone
// else (another key, or none) with other flags is refused, never obeyed.
//
// Without --console-key-file and with nothing kept, four-eyes is off and
// the trail is not signed (the demo); four-eyes asked for without a key
// is a usage error.
func (c *Config) keepSettings(ctx context.Context, store driver.Store, trail *audit.Trail, log *slog.Logger) (kept, error) {
	return c.keep(ctx, store, trail, log, "console start", "the console's configuration at its start")
}

// KeepSettings keeps the settings c says (its --approval-required,
// --console-auth, --console-token-file and --audit-file) in store, signed
// with its --console-key-file, by via for why: what the console's start
// does, for an installation without a console (chargerecovery approvals
// policy). It returns the policy kept.
func (c *Config) KeepSettings(ctx context.Context, store driver.Store, trail *audit.Trail, log *slog.Logger, via, why string) (approval.Policy, error) {
	if c.KeyFile == "" {
		return approval.Off, cli.Usagef("give --console-key-file: only the console's key keeps four-eyes settings")
	}
	k, err := c.keep(ctx, store, trail, log, via, why)
	return k.policy, err
}

// ChangePolicy keeps policy (with why) as the four-eyes settings where no
// console runs (chargerecovery approvals policy): what the console's start
// does, c naming the trail, the sign-in and the console's key. The
// request is checked first (usage errors); then open opens the backend,
// and the trail's heads are logged on head. It returns the policy kept.
func (c Config) ChangePolicy(ctx context.Context, policy, why string, open func() (*backend.Backend, error), head io.Writer, log *slog.Logger) (approval.Policy, error) {
	if _, err := approval.ParsePolicy(policy); err != nil {
		return approval.Off, cli.Usagef("%v", err)
	}
	if strings.TrimSpace(why) == "" {
		return approval.Off, cli.Usagef("--reason is required: say why the policy changes")
	}
	if c.AuditFile == "" || (c.Auth != "token" && c.Auth != "proxy") || (c.Auth == "token" && c.TokenFile == "") {
		return approval.Off, cli.Usagef("give --audit-file, --console-auth token|proxy and, for token, --console-token-file: the settings name them")
	}
	c.Approval, c.ApprovalTTL = policy, 24*time.Hour
	b, err := open()
	if err != nil {
		return approval.Off, err
	}
	defer b.Close()
	t, err := audit.Open(c.AuditFile)
	if err != nil {
		return approval.Off, fmt.Errorf("--audit-file: %w", err)
	}
	defer t.Close()
	session.LogHead(t, head)
	return c.KeepSettings(ctx, b.Store, t, log, "cli, the console's key", why)
}

func (c *Config) keep(ctx context.Context, store driver.Store, trail *audit.Trail, log *slog.Logger, via, why string) (kept, error) {
	var given *approval.Policy
	if strings.TrimSpace(c.Approval) != "" {
		p, err := approval.ParsePolicy(c.Approval)
		if err != nil {
			return kept{}, cli.Usagef("%v", err)
		}
		given = &p
	}
	ks, err := approval.OpenKept(store, nil)
	if err != nil {
		return kept{}, err
	}
	cur, ok, err := ks.Settled(ctx)
	if err != nil {
		return kept{}, err
	}
	if c.KeyFile == "" {
		switch {
		case ok:
			return kept{}, cli.Usagef("the four-eyes settings are kept in the backend under a console key: give --console-key-file (IC_CONSOLE_KEY_FILE), the console's own key; a console without it changes nothing")
		case given != nil && given.On():
			return kept{}, cli.Usagef("--approval-required needs --console-key-file (IC_CONSOLE_KEY_FILE): the policy is kept in the backend, signed by the console's key, so that no process started without the flag, and no operator, can turn it off (chargerecovery keygen --out FILE writes a key)")
		}
		if c.ApprovalTTL > approval.DefaultMaxTTL {
			return kept{}, cli.Usagef("--approval-ttl %s is longer than %s", c.ApprovalTTL, approval.DefaultMaxTTL)
		}
		return kept{policy: approval.Off}, nil
	}
	key, err := ReadKeyFile(c.KeyFile)
	if err != nil {
		return kept{}, cli.Usagef("--console-key-file: %v", err)
	}
	trail.Sign, trail.RequireSign = &audit.Signer{Name: audit.ConsoleSigner, Key: key}, true
	abs, err := filepath.Abs(c.AuditFile)
	if err != nil {
		return kept{}, err
	}
	next := approval.Settings{Policy: approval.Off.String(), MaxTTL: approval.DefaultMaxTTL.String(), Trail: abs, SignIn: c.Auth,
		By: via, Why: why}
	if ok {
		next.Policy, next.MaxTTL, next.Retired = cur.Policy, cur.MaxTTL, slices.Clone(cur.Retired)
	}
	if given != nil {
		next.Policy = given.String()
	}
	if c.Auth == "token" {
		if next.Operators, err = CommandLineKeys(c.TokenFile); err != nil {
			return kept{}, cli.Usagef("--console-token-file: %v", err)
		}
	}
	head, err := trail.HeadSeq()
	if err != nil {
		return kept{}, fmt.Errorf("--audit-file: %w", err)
	}
	// A key no longer given is retired at the trail's head: it still
	// vouches for the lines it signed, never for a later one.
	var retired []string
	for _, o := range cur.Operators {
		if !slices.ContainsFunc(next.Operators, func(n approval.Operator) bool { return n.Key == o.Key && n.Name == o.Name }) {
			o.Until = max(head, 1)
			next.Retired = append(next.Retired, o)
			retired = append(retired, o.Name)
		}
	}
	if c.ApprovalTTL > next.TTLBound() {
		return kept{}, cli.Usagef("--approval-ttl %s is longer than the %s the kept settings allow", c.ApprovalTTL, next.TTLBound())
	}
	saved, changed, err := ks.Keep(ctx, key, next)
	if errors.Is(err, approval.ErrSettings) {
		return kept{}, cli.Usagef("--console-key-file: %v", err)
	}
	if err != nil {
		return kept{}, err
	}
	trail.SettingsVersion = saved.Version
	if changed {
		detail := saved.Describe()
		if ok {
			detail += "; was: " + cur.Describe()
		}
		if _, err := trail.Append(audit.Entry{Operator: "system", Via: via, Action: "settings", Result: saved.Policy,
			Reason: saved.Why, Detail: fmt.Sprintf("version %d: %s", saved.Version, detail)}); err != nil {
			return kept{}, err
		}
		if ok && cur.SignIn == "token" && c.Auth == "proxy" {
			// The token era ends: the identity provider names people now,
			// and the command line no longer acts.
			if _, err := trail.Append(audit.Entry{Operator: "system", Via: via, Action: "retire-tokens", Result: "retired",
				Detail: fmt.Sprintf("sign-in is by the proxy now: console tokens and command-line keys (%s) act no more; the command line acts only through the console", strings.Join(retired, ", "))}); err != nil {
				return kept{}, err
			}
		} else if ok && cur.SignIn != "" && cur.SignIn != c.Auth {
			// Any other switch renames people as much: a proposal made
			// before it is approved by no one after it (approval.Book).
			if _, err := trail.Append(audit.Entry{Operator: "system", Via: via, Action: "sign-in", Result: c.Auth,
				Detail: fmt.Sprintf("sign-in is by %s now, was %s: a proposal made before this line is not approved after it", c.Auth, cur.SignIn)}); err != nil {
				return kept{}, err
			}
		}
		log.Info("four-eyes settings kept in the backend", "version", saved.Version, "policy", saved.Policy, "sign_in", saved.SignIn)
	}
	p, err := approval.PolicyOf(saved)
	if err != nil {
		return kept{}, err
	}
	ring, err := saved.Keyring()
	if err != nil {
		return kept{}, err
	}
	return kept{policy: p, keys: ring}, nil
}

// BindPolicy defines the flags of approvals policy POLICY on f: the
// console's key and the settings it keeps, and why (into *why).
func (c *Config) BindPolicy(f *cli.FlagSet, why *string) {
	f.String(why, "reason", "", "", "why the settings change (required to change them)")
	f.String(&c.KeyFile, "console-key-file", "IC_CONSOLE_KEY_FILE", "", "the console's own key, which alone changes the settings")
	f.String(&c.AuditFile, "audit-file", "IC_AUDIT_FILE", "", "the audit trail the settings name")
	f.String(&c.Auth, "console-auth", "IC_CONSOLE_AUTH", "", "how people sign in: token or proxy")
	f.String(&c.TokenFile, "console-token-file", "IC_CONSOLE_TOKEN_FILE", "", "token sign-in: the console's token file (its fourth field: the operators' command-line keys)")
}
