// Package recon is what chargerecovery reconcile does with app/reconcile:
// the statement's files and period as an operator names them ({from},
// today / yesterday, the bank's time zone), a run that keeps its report
// and metrics files, and the resolution of one break — judged against the
// four-eyes policy first, audited, and pinned to the break judged.
package recon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/finedge/idempotent-consumer/app/service/approval"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/app/metrics"
	"github.com/finedge/idempotent-consumer/app/reconcile"
	"github.com/finedge/idempotent-consumer/app/reconcile/statement"
	"github.com/finedge/idempotent-consumer/app/service/cli"
	"github.com/finedge/idempotent-consumer/app/service/pipeline"
	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
	"github.com/finedge/idempotent-consumer/internal/safetext"
)

// Source is what an operator names to reconcile against (reconcile's
// --statement, --collection-account, --from, --to, --time-zone).
type Source struct {
	// Statement (--statement) and Files (the arguments) are the statement
	// files, Statement comma-separated; a {from} in a path is From's day
	// (YYYY-MM-DD in Zone).
	Statement string
	Files     []string
	// CollectionAccount reads the statement as the fee collection
	// account's ("": the customers' own statements).
	CollectionAccount string
	// From and To are the period (YYYY-MM-DD at midnight in Zone, RFC
	// 3339, today or yesterday), both or neither ("": the statement's).
	From, To string
	// Zone is the bank's time zone (IANA name; "" or "UTC": UTC).
	Zone string
	// Keys are serve's fingerprint keys, which check a posting against
	// its charge.
	Keys pipeline.Config
}

// Bind binds the source's flags, shared by reconcile, reconcile resolve
// and approvals propose reconcile (--time-zone's default: UTC).
func (s *Source) Bind(f *cli.FlagSet) {
	f.String(&s.Statement, "statement", "", "", "the statement file(s), comma-separated: camt.053, camt.054 or the CSV export")
	f.String(&s.CollectionAccount, "collection-account", "IC_COLLECTION_ACCOUNT", "", "read the statement as the fee collection account's (IBAN or account id): our postings are its credits, the customer's account the debtor's; unset: the customers' own statements, our postings their debits")
	f.String(&s.From, "from", "", "", "the period's start: YYYY-MM-DD (midnight in --time-zone), RFC 3339, or yesterday / today; default: the statement's FrToDt. A statement path's {from} is this day (YYYY-MM-DD), for a daily job: --statement /statements/{from}.xml --from yesterday --to today")
	f.String(&s.To, "to", "", "", "the period's end (exclusive), as --from")
	f.String(&s.Zone, "time-zone", "IC_TIME_ZONE", "UTC", "the bank's time zone (IANA name, e.g. Asia/Kolkata): where a day of --from/--to starts, and how a statement's FrToDt written without an offset is read")
	s.Keys.BindKeys(f, false)
}

// Statement is a Source opened: what to read, and the period.
type Statement struct {
	Read   reconcile.Postings
	Period statement.Period
	// Files are the files named, as absolute paths where they can be made
	// so; CollectionAccount as given, trimmed.
	Files             []string
	CollectionAccount string
	// TimeZone is the zone as a proposal keeps it: "" for UTC, else the
	// IANA name as given.
	TimeZone string
	// Fingerprints are the Source's Keys read.
	Fingerprints *idempotency.Fingerprinter
}

// List is every statement file named, {from} made From's day where From
// is read, as absolute paths where they can be made so.
func (s Source) List(now time.Time) []string {
	var out []string
	day := ""
	if loc, err := time.LoadLocation(s.Zone); err == nil {
		if from, err := parseDay(s.From, loc, now); err == nil && s.From != "" {
			day = from.In(loc).Format(time.DateOnly)
		}
	}
	for _, f := range append(cli.SplitList(s.Statement), s.Files...) {
		if day != "" {
			f = strings.ReplaceAll(f, "{from}", day)
		}
		if abs, err := filepath.Abs(f); err == nil {
			f = abs
		}
		out = append(out, f)
	}
	return out
}

// Open checks the source (usage errors: nothing read yet) and returns
// the reader of every file, the period it gives (zero: the statement's),
// the days read at now, and the fingerprint keys.
func (s Source) Open(now time.Time) (Statement, error) {
	files := s.List(now)
	if len(files) == 0 {
		return Statement{}, cli.Usagef("give the statement: --statement FILE")
	}
	var p statement.Period
	if (s.From == "") != (s.To == "") {
		return Statement{}, cli.Usagef("give --from and --to together")
	}
	loc, err := time.LoadLocation(s.Zone)
	if err != nil {
		return Statement{}, cli.Usagef("--time-zone %q: %v", s.Zone, err)
	}
	for _, f := range files {
		if strings.Contains(f, "{from}") {
			return Statement{}, cli.Usagef("--statement %s: {from} needs --from", f)
		}
	}
	if s.From != "" {
		if p.From, err = parseDay(s.From, loc, now); err != nil {
			return Statement{}, cli.Usagef("--from: %v", err)
		}
		if p.To, err = parseDay(s.To, loc, now); err != nil {
			return Statement{}, cli.Usagef("--to: %v", err)
		}
		if !p.From.Before(p.To) {
			return Statement{}, cli.Usagef("--from %s is not before --to %s", s.From, s.To)
		}
	}
	st := Statement{Period: p, Files: files, CollectionAccount: strings.TrimSpace(s.CollectionAccount)}
	if z := strings.TrimSpace(s.Zone); z != "UTC" {
		st.TimeZone = z
	}
	if st.Fingerprints, err = s.Keys.Keys(); err != nil {
		return Statement{}, cli.Usagef("%v", err)
	}
	// The zone also reads a statement's FrToDt written without an offset
	// (the bank's wall-clock times and days).
	st.Read = reconcile.ReadFiles(files, statement.Options{CollectionAccount: st.CollectionAccount, Location: loc})
	return st, nil
}

// parseDay reads YYYY-MM-DD (midnight in loc), RFC 3339, or today /
// yesterday (the day's midnight in loc at now).
func parseDay(s string, loc *time.Location, now time.Time) (time.Time, error) {
	n := now.In(loc)
	switch s {
	case "today":
		return time.Date(n.Year(), n.Month(), n.Day(), 0, 0, 0, 0, loc).UTC(), nil
	case "yesterday":
		return time.Date(n.Year(), n.Month(), n.Day()-1, 0, 0, 0, 0, loc).UTC(), nil
	}
	if t, err := time.ParseInLocation(time.DateOnly, s, loc); err == nil {
		return t.UTC(), nil
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("%q is not YYYY-MM-DD, RFC 3339, today or yesterday", s)
	}
	return t.UTC(), nil
}

// InputErr makes a statement's format error a usage error (exit 2: bad
// input, nothing judged); other errors are returned as they are.
func InputErr(err error) error {
	var (
		fe *statement.FormatError
		an *statement.AccountNotFoundError
		cs *statement.CollectionSideError
		pe *os.PathError
	)
	if errors.As(err, &fe) || errors.As(err, &an) || errors.As(err, &cs) || errors.As(err, &pe) || errors.Is(err, reconcile.ErrNoPeriod) || errors.Is(err, reconcile.ErrGap) {
		return cli.Usagef("%v", err)
	}
	return err
}

// KindList is the kinds of break, comma-separated, for a flag's help.
func KindList() string {
	var w []string
	for _, k := range reconcile.Kinds {
		w = append(w, string(k))
	}
	return strings.Join(w, ", ")
}

// RunOptions are a run's: where it reads the records, and the files it
// keeps.
type RunOptions struct {
	Store driver.Store
	// Concurrency is how many records are read at once (1 to 256).
	Concurrency int
	// SkewMargin: an IN_PROGRESS record posted by the bank counts as in
	// flight until its lease passed by this much (negative: 0).
	SkewMargin time.Duration
	// ReportFile, when set, keeps the report as JSON (the console's
	// Reconciliation page reads it); MetricsFile, when set, the breaks
	// and the run's figures in Prometheus's text format.
	ReportFile, MetricsFile string
}

// Check checks, before anything is read, the concurrency, and that the
// files to keep can be written: their directory exists and they are not
// directories.
func (o RunOptions) Check() error {
	if o.Concurrency < 1 || o.Concurrency > 256 {
		return cli.Usagef("--concurrency must be between 1 and 256")
	}
	if err := errors.Join(outputFile("--report-file", o.ReportFile), outputFile("--metrics-file", o.MetricsFile)); err != nil {
		return cli.Usagef("%v", err)
	}
	return nil
}

func outputFile(flag, path string) error {
	if path == "" {
		return nil
	}
	if st, err := os.Stat(filepath.Dir(path)); err != nil || !st.IsDir() {
		return cli.Usagef("%s %s: its directory does not exist", flag, path)
	}
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		return cli.Usagef("%s %s is a directory: name a file", flag, path)
	}
	return nil
}

// Run reconciles st against the records, has show print the report,
// then keeps its files. It returns an error naming the breaks to resolve
// if there are any; a statement that cannot be read is a usage error
// (InputErr).
func Run(ctx context.Context, st Statement, o RunOptions, show func(reconcile.Report) error) error {
	rep, err := reconcile.Run(ctx, reconcile.Options{Store: o.Store, Fingerprints: st.Fingerprints, Period: st.Period,
		Concurrency: o.Concurrency, SkewMargin: max(o.SkewMargin, 0)}, st.Read)
	if err != nil {
		return InputErr(err)
	}
	if err := show(rep); err != nil {
		return err
	}
	rep.Statements, rep.CollectionAccount = st.Files, st.CollectionAccount
	if o.ReportFile != "" {
		if err := reconcile.WriteReportFile(o.ReportFile, rep); err != nil {
			return fmt.Errorf("--report-file: %w", err)
		}
	}
	if o.MetricsFile != "" {
		end, _ := time.Parse(time.RFC3339, rep.Period.To)
		if err := metrics.WriteReconciliationFile(o.MetricsFile, metrics.Reconciliation{Breaks: rep.Counts(), Postings: rep.Postings, KeyOnly: rep.Unverified,
			Matched: rep.Matched, Resolved: rep.Resolved, PeriodEnd: end, RunAt: time.Now()}); err != nil {
			return err
		}
	}
	if n := len(rep.Breaks); n > 0 {
		return fmt.Errorf("%d break(s) to resolve (chargerecovery reconcile resolve CHARGE_ID --statement … --reason …)", n)
	}
	return nil
}

// Printer prints a report as JSON (indented), as CSV (accounts masked),
// or as text.
func Printer(w io.Writer, asJSON, asCSV bool) func(reconcile.Report) error {
	return func(rep reconcile.Report) error {
		switch {
		case asJSON:
			enc := json.NewEncoder(w)
			enc.SetIndent("", "  ")
			return enc.Encode(rep)
		case asCSV:
			return rep.WriteCSV(w)
		}
		return rep.WriteText(w)
	}
}

// Guard is a Guard over store with serve's lease, retention and skew
// margin (0: none).
func Guard(store driver.Store, lease, retention, skew time.Duration) (*idempotency.Guard, error) {
	if skew == 0 {
		skew = -1
	}
	return idempotency.NewGuard(store, idempotency.Options{Lease: lease, Retention: retention, SkewMargin: skew})
}

// PrintResolved shows what a resolution did to charge id.
func PrintResolved(w io.Writer, id, reason string, res reconcile.Resolved) {
	switch res.Action {
	case "adopted":
		fmt.Fprintf(w, "%s: %s adopted: the record is DONE %s with the bank's reference %s (no debit)\n",
			safetext.Text(id), res.Break.Kind, safetext.Text(res.Record.Status), safetext.Text(charge.ShowRef(charge.ReferenceOf(res.Record.Status, res.Record.Detail))))
		if _, kept := charge.PendingNotice(res.Record.Status, res.Record.Detail); kept {
			fmt.Fprintf(w, "  its pre-debit notice is kept: chargerecovery renotify %s sends it\n", safetext.Text(id))
		}
	default:
		fmt.Fprintf(w, "%s: %s marked resolved (break %s): %s\n", safetext.Text(id), res.Break.Kind, res.Break.ID, strconv.QuoteToGraphic(reason))
	}
}

// Synopsis is `chargerecovery reconcile -h`'s text above the flags.
const Synopsis = `reconcile [flags] --statement FILE[,FILE…] [FILE…]
reconcile resolve [flags] --statement FILE[,FILE…] --reason TEXT CHARGE_ID

Matches the bank's books (ISO 20022 camt.053 / camt.054, or the CSV
export: booking_date,bank_key,account,amount_minor,currency,reference,
reversal[,narrative[,return_reason]]) against the records, over the
statement's period (its FrToDt, or --from/--to), and reports every break:
posted_not_recorded, recorded_not_posted, posted_twice, amount_mismatch,
failed_but_posted, unknown_posting. A reversal or a return (camt RtrInf,
or a BkTxCd PMNT/IDDT/UPDD without it; named with its reason code: AC04,
AM04, MD06, …) cancels its posting; a bank's storno without our key
(EndToEndId NOTPROVIDED) cancels the posting of its AcctSvcrRef, or is a
warning naming its amount. A collection account's statement needs
--collection-account (refused without it). Exit 0: none; 1: breaks; 2:
bad input.

resolve closes one charge's break, as the statement shows it now:
posted_not_recorded adopts the posting (DONE with the bank's reference; no
debit, no notice); any other kind is marked resolved with the reason. A
resolved break does not come back on the next run of the same statement.`

// BindProposal defines the flags of approvals propose reconcile beyond the
// statement's (Source.Bind): which break, and how it is resolved when the
// proposal runs.
func BindProposal(f *cli.FlagSet, spec *approval.Spec, be *approval.Backend) {
	f.String((*string)(&spec.BreakKind), "kind", "", "", "reconcile: which break, when the charge has several: "+KindList())
	f.Bool(&spec.Unverified, "unverified", "", false, "reconcile: adopt a posting that could not be checked against the charge: you checked its amount and account by hand")
	f.Bool(&spec.NoticeSent, "notice-sent", "", false, "reconcile: an adopted posting's pre-debit notice is known to have gone out: record DEBITED")
	f.Bool(&spec.Refunded, "refunded", "", false, "reconcile, failed_but_posted: the bank gave the money back: mark the break (the record stays FAILED)")
	f.Duration(&be.SkewMargin, "skew-margin", "IC_SKEW_MARGIN", idempotency.DefaultSkewMargin, "reconcile: an IN_PROGRESS record posted by the bank counts as in flight until its lease passed by this much (as serve's)")
}
