package main

import (
	"context"
	"io"
	"time"

	"github.com/finedge/idempotent-consumer/app/audit"
	"github.com/finedge/idempotent-consumer/app/service/approval"
	"github.com/finedge/idempotent-consumer/app/service/backend"
	"github.com/finedge/idempotent-consumer/app/service/cli"
	"github.com/finedge/idempotent-consumer/app/service/session"
)

// auditConfig is the one audit trail and the four-eyes policy, on every
// command that acts (and the console, with the same names).
type auditConfig struct {
	session.Options
	s *session.Session // once open
}

func (c *auditConfig) Bind(f *cli.FlagSet) {
	f.String(&c.File, "audit-file", "IC_AUDIT_FILE", "", "the audit trail, shared with the console: every action a hash-chained JSON line, synced before it is done (where the backend keeps four-eyes settings, the trail they name: another is refused)")
	f.String(&c.Policy, "approval-required", "IC_APPROVAL_REQUIRED", "", "four-eyes: the policy kept in the backend by the console (reopen-new-attempt, redrive-force, reconcile-adopt, bulk>N, all, represent-hard-decline); a process given another is refused. The backend's policy holds whether this is given or not")
	f.Duration(&c.TTL, "approval-ttl", "IC_APPROVAL_TTL", 24*time.Hour, "how long a proposal waits for approval, and an approved one for its run (at most what the kept settings allow, 72h by default)")
	f.String(&c.KeyFile, "operator-key-file", "IC_OPERATOR_KEY_FILE", "", "your own Ed25519 key (an owner-only file of yours; chargerecovery keygen writes one, and its public key goes on your line of the console's token file): it names you and signs your audit lines, where the backend keeps four-eyes settings")
	f.String(&c.TokenFile, "operator-token-file", "IC_OPERATOR_TOKEN_FILE", "", "retired: the command line signs with your own key (--operator-key-file)")
}

// open opens the session (session.Open) over the settings kept in bc's
// backend: the trail, the book beside it and the policy.
func (c *auditConfig) open(ctx context.Context, env *cli.Env, bc *backend.Config) (*audit.Trail, *approval.Book, approval.Policy, error) {
	c.Head = env.Stderr
	s, err := session.Open(ctx, c.Options, func(ctx context.Context) (approval.Settings, bool, error) { return keptSettings(ctx, env, bc) })
	if err != nil {
		return nil, nil, approval.Off, err
	}
	c.s = s
	return s.Trail, s.Book, s.Policy, nil
}

// keptSettings reads the four-eyes settings kept in bc's backend,
// checked against the console key this host pins (if it does).
func keptSettings(ctx context.Context, env *cli.Env, bc *backend.Config) (approval.Settings, bool, error) {
	pin, err := session.Pin(session.PinFile, env.Getenv)
	if err != nil {
		return approval.Settings{}, false, err
	}
	b, err := openForOps(ctx, bc)
	if err != nil {
		return approval.Settings{}, false, err
	}
	defer b.Close()
	return session.LoadKept(ctx, b.Store, pin)
}

// who is the person acting (session.Session.Who).
func (c *auditConfig) who(env *cli.Env, opFlag string, _ *approval.Book, needs string) (approval.Actor, error) {
	if c.s == nil {
		c.s = &session.Session{}
	}
	return c.s.Who(env, opFlag, needs)
}

// actAudited runs act audited (session.Act), its lines logged on stderr.
func actAudited(env *cli.Env, trail *audit.Trail, who approval.Actor, action, chargeID, reason string, act func(auditW io.Writer) error) error {
	return session.Act(env.Stderr, trail, who, action, chargeID, reason, act)
}

// needsProposal is the audited refusal of an action to be proposed.
var needsProposal = session.NeedsProposal
