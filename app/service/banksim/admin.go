// Package banksim is the core-banking simulator as commands: its server's
// flags and start (corebank), and the calls of its admin API (corebank
// ledger, statement, reverse, drop) with serve's authentication.
package banksim

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
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
	"github.com/finedge/idempotent-consumer/internal/secretfile"
)

// AdminFlags are the flags of a command calling the simulator's admin API:
// its URL, a timeout (default 10s), and serve's core-banking
// authentication.
type AdminFlags struct {
	URL     string
	Timeout time.Duration
	Auth    pipeline.AuthFlags
}

// Bind defines the flags on f.
func (s *AdminFlags) Bind(f *cli.FlagSet) {
	f.String(&s.URL, "corebank-url", "IC_COREBANK_URL", "", "the simulator's base URL, e.g. https://127.0.0.1:8081 (required)")
	f.Duration(&s.Timeout, "timeout", "", 10*time.Second, "how long the call may take")
	s.Auth.Bind(f, "corebank", "IC_COREBANK", "core banking")
}

// Admin checks the flags (adding to p's problems, returned as one usage
// error) and returns a client of the simulator's admin API.
func (s *AdminFlags) Admin(p *cli.Problems) (*corebanksim.Admin, error) {
	if s.URL == "" {
		p.Add("--corebank-url (IC_COREBANK_URL) is required")
	}
	if s.Timeout <= 0 {
		p.Add("--timeout must be positive")
	}
	if s.Auth.ClientID != "" && s.Auth.TokenURL == "" && s.URL != "" {
		s.Auth.TokenURL = strings.TrimRight(s.URL, "/") + "/oauth/token"
	}
	a, err := s.Auth.Auth()
	if err != nil {
		p.Add("core-banking authentication: %v", err)
	} else if err := a.CheckURL("--corebank-url", s.URL); err != nil && s.URL != "" {
		p.Add("%v", err)
	}
	if err := p.Err(); err != nil {
		return nil, err
	}
	var hc *http.Client // nil: no authentication (a plain simulator)
	if a != nil {
		hc = a.Client()
	}
	admin, err := corebanksim.NewAdmin(s.URL, hc)
	if err != nil {
		return nil, cli.Usagef("--corebank-url: %v", err)
	}
	return admin, nil
}

// Explain turns a failed admin call into the error to print: the URL
// redacted, an authentication failure explained.
func (s *AdminFlags) Explain(err error) error {
	if why := clientauth.Explain(err); why != "" {
		return fmt.Errorf("%s: %s (%w)", redact.URL(s.URL), why, err)
	}
	if strings.Contains(err.Error(), "HTTP 401") && s.Auth.ClientID == "" {
		return fmt.Errorf("%s: %w (the simulator runs with OAuth2: give --corebank-oauth-client-id and --corebank-oauth-client-secret-file, the token is then fetched)", redact.URL(s.URL), err)
	}
	return fmt.Errorf("%s: %w", redact.URL(s.URL), err)
}

// LedgerLine is one posting as corebank ledger --json prints it: never a
// full account number.
type LedgerLine struct {
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

// LedgerOptions are corebank ledger's flags: the admin API's and --json
// (default: a table).
type LedgerOptions struct {
	Admin AdminFlags
	JSON  bool
}

// Bind defines the flags on f.
func (o *LedgerOptions) Bind(f *cli.FlagSet) {
	o.Admin.Bind(f)
	f.Bool(&o.JSON, "json", "", false, "print the postings as JSON (accounts masked)")
}

// Ledger reads the simulator's ledger (GET /v1/ledger) and prints it to
// out: one line per posting, accounts masked, then the count of repeated
// requests its keys absorbed.
func Ledger(ctx context.Context, o LedgerOptions, out io.Writer) error {
	var p cli.Problems
	admin, err := o.Admin.Admin(&p)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, o.Admin.Timeout)
	defer cancel()
	rep, err := admin.LedgerReport(ctx)
	if err != nil {
		return o.Admin.Explain(err)
	}
	lines := make([]LedgerLine, 0, len(rep.Entries))
	for _, e := range rep.Entries {
		lines = append(lines, LedgerLine{Seq: e.Seq, IdempotencyKey: e.IdempotencyKey, Account: charge.MaskAccount(e.AccountID),
			AmountMinor: e.AmountMinor, Currency: e.Currency, Amount: charge.Money{Minor: e.AmountMinor, Currency: charge.Currency(e.Currency)}.String(),
			ChargeType: e.ChargeType, Reference: e.Reference, PostedAt: e.PostedAt.UTC()})
	}
	if o.JSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(struct {
			Count             int            `json:"count"`
			Postings          []LedgerLine   `json:"postings"`
			DuplicateRequests map[string]int `json:"duplicateRequests"`
		}{len(lines), lines, rep.DuplicateRequests})
	}
	tw := tabwriter.NewWriter(out, 2, 8, 2, ' ', 0)
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
	fmt.Fprintf(out, "%d postings; %d repeated requests absorbed by their key\n", len(lines), dups)
	return nil
}

// StatementOptions are corebank statement's flags: the period [From, To)
// (required), Format (default camt053), the collection account (default
// the simulator's FEES-COLLECTION), and Out (default: stdout).
type StatementOptions struct {
	Admin                              AdminFlags
	From, To, Format, Account, OutFile string
}

// Bind defines the flags on f.
func (o *StatementOptions) Bind(f *cli.FlagSet) {
	o.Admin.Bind(f)
	f.String(&o.From, "from", "", "", "the period's start, YYYY-MM-DD (UTC midnight) or RFC 3339 (required)")
	f.String(&o.To, "to", "", "", "the period's end (exclusive), YYYY-MM-DD or RFC 3339 (required)")
	f.String(&o.Format, "format", "", "camt053", "camt053 or csv")
	f.String(&o.Account, "collection-account", "IC_COLLECTION_ACCOUNT", "", "the fee collection account the camt.053 statement is of (IBAN or account id); default FEES-COLLECTION")
	f.String(&o.OutFile, "out", "", "", "write the statement to this file (0600) instead of stdout")
}

// Statement exports the simulator's ledger as the statement of a period
// (GET /v1/statement): to stdout, or to o.OutFile (owner-only, whole by
// rename) with a line on stderr.
func Statement(ctx context.Context, o StatementOptions, stdout, stderr io.Writer) error {
	var p cli.Problems
	fromT, errFrom := corebanksim.ParseStatementTime(o.From)
	toT, errTo := corebanksim.ParseStatementTime(o.To)
	switch {
	case o.From == "" || o.To == "":
		p.Add("--from and --to are required")
	case errFrom != nil:
		p.Add("--from: %v", errFrom)
	case errTo != nil:
		p.Add("--to: %v", errTo)
	case !fromT.Before(toT):
		p.Add("--from must be before --to")
	}
	if o.Format != "camt053" && o.Format != "csv" {
		p.Add("--format %q: want camt053 or csv", o.Format)
	}
	admin, err := o.Admin.Admin(&p)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, o.Admin.Timeout)
	defer cancel()
	b, err := admin.Statement(ctx, fromT, toT, o.Format, strings.TrimSpace(o.Account))
	if err != nil {
		return o.Admin.Explain(err)
	}
	if o.OutFile == "" {
		_, err := stdout.Write(b)
		return err
	}
	if err := secretfile.Write(o.OutFile, b); err != nil {
		return fmt.Errorf("--out: %w", err)
	}
	fmt.Fprintf(stderr, "statement %s to %s written to %s (%d bytes)\n", fromT.UTC().Format("2006-01-02T15:04:05Z"), toT.UTC().Format("2006-01-02T15:04:05Z"), o.OutFile, len(b))
	return nil
}

// Mark has the simulator reverse ("reverse") or lose ("drop") the posting
// under the bank key the arguments name, and says so on out.
func Mark(ctx context.Context, o AdminFlags, verb string, args []string, out io.Writer) error {
	call, done := (*corebanksim.Admin).Reverse, "reversed: statements from now on carry its reversal"
	if verb == "drop" {
		call, done = (*corebanksim.Admin).Drop, "dropped: statements leave it out"
	}
	var p cli.Problems
	if n := len(args); n != 1 || strings.TrimSpace(args[0]) == "" {
		p.Add("want exactly one bank key (got %d arguments)", n)
	}
	admin, err := o.Admin(&p)
	if err != nil {
		return err
	}
	key := args[0]
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	if err := call(admin, ctx, key); err != nil {
		return o.Explain(err)
	}
	fmt.Fprintf(out, "%s: %s\n", key, done)
	return nil
}
