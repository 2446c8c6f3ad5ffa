package main

import (
	"context"
	"io"

	"github.com/finedge/idempotent-consumer/app/audit"
	"github.com/finedge/idempotent-consumer/app/service/approval"
	"github.com/finedge/idempotent-consumer/app/service/backend"
	"github.com/finedge/idempotent-consumer/app/service/cli"
	"github.com/finedge/idempotent-consumer/app/service/session"
)

// auditConfig is the one audit trail and the four-eyes policy, on every
// command that acts (and the console, with the same names); Bind binds
// its flags (session.Options.Bind).
type auditConfig struct {
	session.Options
	s *session.Session // once open
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

// parseOpen binds the audit and operator flags after the command's own,
// parses args (allowArgs as FlagSet.Parse) and opens the session: how an
// audited command starts.
func (c *auditConfig) parseOpen(ctx context.Context, env *cli.Env, bc *backend.Config, f *cli.FlagSet, args []string, allowArgs bool) (trail *audit.Trail, book *approval.Book, policy approval.Policy, opFlag *string, err error) {
	c.Bind(f)
	opFlag = cli.OperatorFlag(f)
	if err = f.Parse(args, allowArgs); err != nil {
		return nil, nil, approval.Off, opFlag, err
	}
	trail, book, policy, err = c.open(ctx, env, bc)
	return trail, book, policy, opFlag, err
}

// openBook is open where proposals are kept: the trail must be given.
func (c *auditConfig) openBook(ctx context.Context, env *cli.Env, bc *backend.Config) (*approval.Book, error) {
	if c.File == "" {
		return nil, cli.Usagef("proposals are kept beside the audit trail: give --audit-file (IC_AUDIT_FILE)")
	}
	_, book, _, err := c.open(ctx, env, bc)
	return book, err
}

// keptSettings reads the four-eyes settings kept in bc's backend,
// checked against the console key this host pins (if it does).
func keptSettings(ctx context.Context, env *cli.Env, bc *backend.Config) (approval.Settings, bool, error) {
	return session.LoadPinned(ctx, env.Getenv, func() (*backend.Backend, error) { return backend.OpenExisting(ctx, bc) })
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
