package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/app/clientauth"
	"github.com/finedge/idempotent-consumer/app/corebanksim"
	"github.com/finedge/idempotent-consumer/app/service/cli"
	"github.com/finedge/idempotent-consumer/app/service/pipeline"
	"github.com/finedge/idempotent-consumer/internal/redact"
)

// corebank ledger rather than status --bank: the ledger is the
// simulator's admin API (GET /v1/ledger), which no real core-banking
// system offers; status reads our own backend, and should not seem to
// promise a bank's books.
const ledgerSynopsis = `corebank ledger [flags]

Reads the core-banking SIMULATOR's ledger (GET /v1/ledger: its admin API;
a real bank has none, hence here and not in status), one line per
posting: bank key, masked account, amount, posting time, reference. It
authenticates as serve does, with serve's own flags and IC_COREBANK_*
variables (mutual TLS files, the OAuth2 client; the token is fetched from
--corebank-oauth-token-url, by default the simulator's /oauth/token), so
no curl and no hand-minted token is needed.`

// ledgerLine is one posting as corebank ledger --json prints it: never a
// full account number.
type ledgerLine struct {
	Seq            int64     `json:"seq"`
	IdempotencyKey string    `json:"idempotencyKey"`
	Account        string    `json:"account"`
	AmountMinor    int64     `json:"amountMinor"`
	Currency       string    `json:"currency"`
	Amount         string    `json:"amount"`
	ChargeType     string    `json:"chargeType"`
	Reference      string    `json:"reference"`
	PostedAt       time.Time `json:"postedAt"`
}

func runCorebankLedger(ctx context.Context, env *cli.Env, args []string) error {
	f := cli.NewFlagSet(env, "corebank ledger", ledgerSynopsis)
	var (
		sim    simFlags
		asJSON bool
	)
	sim.bind(f)
	f.Bool(&asJSON, "json", "", false, "print the postings as JSON (accounts masked)")
	if err := f.Parse(args, false); err != nil {
		return err
	}
	var p cli.Problems
	admin, err := sim.admin(&p)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, sim.timeout)
	defer cancel()
	rep, err := admin.LedgerReport(ctx)
	if err != nil {
		return sim.explain(err)
	}
	lines := make([]ledgerLine, 0, len(rep.Entries))
	for _, e := range rep.Entries {
		lines = append(lines, ledgerLine{Seq: e.Seq, IdempotencyKey: e.IdempotencyKey, Account: charge.MaskAccount(e.AccountID),
			AmountMinor: e.AmountMinor, Currency: e.Currency, Amount: charge.Money{Minor: e.AmountMinor, Currency: charge.Currency(e.Currency)}.String(),
			ChargeType: e.ChargeType, Reference: e.Reference, PostedAt: e.PostedAt.UTC()})
	}
	if asJSON {
		enc := json.NewEncoder(env.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(struct {
			Count             int            `json:"count"`
			Postings          []ledgerLine   `json:"postings"`
			DuplicateRequests map[string]int `json:"duplicateRequests"`
		}{len(lines), lines, rep.DuplicateRequests})
	}
	tw := tabwriter.NewWriter(env.Stdout, 2, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "SEQ\tBANK KEY\tACCOUNT\tAMOUNT\tTYPE\tPOSTED AT\tREFERENCE")
	for _, l := range lines {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\n", l.Seq, l.IdempotencyKey, l.Account, l.Amount, l.ChargeType,
			l.PostedAt.Format(time.RFC3339), l.Reference)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	dups := 0
	for _, n := range rep.DuplicateRequests {
		dups += n
	}
	fmt.Fprintf(env.Stdout, "%d postings; %d repeated requests absorbed by their key\n", len(lines), dups)
	return nil
}

// simFlags are the flags of a command calling the simulator's admin API:
// its URL, a timeout, and serve's core-banking authentication.
type simFlags struct {
	url     string
	timeout time.Duration
	auth    pipeline.AuthFlags
}

func (s *simFlags) bind(f *cli.FlagSet) {
	f.String(&s.url, "corebank-url", "IC_COREBANK_URL", "", "the simulator's base URL, e.g. https://127.0.0.1:8081 (required)")
	f.Duration(&s.timeout, "timeout", "", 10*time.Second, "how long the call may take")
	s.auth.Bind(f, "corebank", "IC_COREBANK", "core banking")
}

// admin checks the flags (adding to p's problems, returned as one error)
// and returns a client of the simulator's admin API.
func (s *simFlags) admin(p *cli.Problems) (*corebanksim.Admin, error) {
	if s.url == "" {
		p.Add("--corebank-url (IC_COREBANK_URL) is required")
	}
	if s.timeout <= 0 {
		p.Add("--timeout must be positive")
	}
	if s.auth.ClientID != "" && s.auth.TokenURL == "" && s.url != "" {
		s.auth.TokenURL = strings.TrimRight(s.url, "/") + "/oauth/token"
	}
	a, err := s.auth.Auth()
	if err != nil {
		p.Add("core-banking authentication: %v", err)
	} else if err := a.CheckURL("--corebank-url", s.url); err != nil && s.url != "" {
		p.Add("%v", err)
	}
	if err := p.Err(); err != nil {
		return nil, err
	}
	var hc *http.Client // nil: no authentication (a plain simulator)
	if a != nil {
		hc = a.Client()
	}
	admin, err := corebanksim.NewAdmin(s.url, hc)
	if err != nil {
		return nil, cli.Usagef("--corebank-url: %v", err)
	}
	return admin, nil
}

// explain turns a failed admin call into the error to print: the URL
// redacted, an authentication failure explained.
func (s *simFlags) explain(err error) error {
	if why := clientauth.Explain(err); why != "" {
		return fmt.Errorf("%s: %s (%v)", redact.URL(s.url), why, err)
	}
	if strings.Contains(err.Error(), "HTTP 401") && s.auth.ClientID == "" {
		return fmt.Errorf("%s: %w (the simulator runs with OAuth2: give --corebank-oauth-client-id and --corebank-oauth-client-secret-file, the token is then fetched)", redact.URL(s.url), err)
	}
	return fmt.Errorf("%s: %w", redact.URL(s.url), err)
}
