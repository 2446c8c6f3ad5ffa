package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
	_ "time/tzdata" // the image is FROM scratch: --time-zone needs the zone database inside the binary

	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/app/metrics"
	"github.com/finedge/idempotent-consumer/app/reconcile"
	"github.com/finedge/idempotent-consumer/app/reconcile/statement"
	"github.com/finedge/idempotent-consumer/app/service/approval"
	"github.com/finedge/idempotent-consumer/app/service/backend"
	"github.com/finedge/idempotent-consumer/app/service/cli"
	"github.com/finedge/idempotent-consumer/app/service/pipeline"
	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/internal/safetext"
)

const reconcileSynopsis = `reconcile [flags] --statement FILE[,FILE…] [FILE…]
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

// statementFlags are the flags that say what to read.
type statementFlags struct {
	files, collection, from, to, zone string
	keys                              pipeline.Config
}

func (s *statementFlags) bind(f *cli.FlagSet) {
	f.String(&s.files, "statement", "", "", "the statement file(s), comma-separated: camt.053, camt.054 or the CSV export")
	f.String(&s.collection, "collection-account", "IC_COLLECTION_ACCOUNT", "", "read the statement as the fee collection account's (IBAN or account id): our postings are its credits, the customer's account the debtor's; unset: the customers' own statements, our postings their debits")
	f.String(&s.from, "from", "", "", "the period's start: YYYY-MM-DD (midnight in --time-zone), RFC 3339, or yesterday / today; default: the statement's FrToDt. A statement path's {from} is this day (YYYY-MM-DD), for a daily job: --statement /statements/{from}.xml --from yesterday --to today")
	f.String(&s.to, "to", "", "", "the period's end (exclusive), as --from")
	f.String(&s.zone, "time-zone", "IC_TIME_ZONE", "UTC", "the bank's time zone (IANA name, e.g. Asia/Kolkata): where a day of --from/--to starts, and how a statement's FrToDt written without an offset is read")
	s.keys.BindKeys(f)
}

// open checks the flags and returns the reader of every file and the
// period the flags give (zero: the statement's).
// list is every statement file named, as absolute paths where they can
// be made so.
func (s *statementFlags) list(extra []string) []string {
	var out []string
	day := ""
	if loc, err := time.LoadLocation(s.zone); err == nil {
		if from, err := parseDay(s.from, loc, time.Now()); err == nil && s.from != "" {
			day = from.In(loc).Format(time.DateOnly)
		}
	}
	for _, f := range append(cli.SplitList(s.files), extra...) {
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

func (s *statementFlags) open(extra []string) (reconcile.Postings, statement.Period, *idempotencyKeys, error) {
	files := s.list(extra)
	if len(files) == 0 {
		return nil, statement.Period{}, nil, cli.Usagef("give the statement: --statement FILE")
	}
	var p statement.Period
	var err error
	if (s.from == "") != (s.to == "") {
		return nil, p, nil, cli.Usagef("give --from and --to together")
	}
	loc, err := time.LoadLocation(s.zone)
	if err != nil {
		return nil, p, nil, cli.Usagef("--time-zone %q: %v", s.zone, err)
	}
	for _, f := range files {
		if strings.Contains(f, "{from}") {
			return nil, p, nil, cli.Usagef("--statement %s: {from} needs --from", f)
		}
	}
	if s.from != "" {
		now := time.Now()
		if p.From, err = parseDay(s.from, loc, now); err != nil {
			return nil, p, nil, cli.Usagef("--from: %v", err)
		}
		if p.To, err = parseDay(s.to, loc, now); err != nil {
			return nil, p, nil, cli.Usagef("--to: %v", err)
		}
		if !p.From.Before(p.To) {
			return nil, p, nil, cli.Usagef("--from %s is not before --to %s", s.from, s.to)
		}
	}
	fp, err := s.keys.Keys()
	if err != nil {
		return nil, p, nil, cli.Usagef("%v", err)
	}
	// The zone also reads a statement's FrToDt written without an offset
	// (the bank's wall-clock times and days).
	opts := statement.Options{CollectionAccount: strings.TrimSpace(s.collection), Location: loc}
	read := reconcile.ReadFiles(files, opts)
	return read, p, &idempotencyKeys{fp}, nil
}

// timeZone is --time-zone for a proposal's spec: "" for UTC (the
// default), else the IANA name as given.
func (s *statementFlags) timeZone() string {
	if z := strings.TrimSpace(s.zone); z != "UTC" {
		return z
	}
	return ""
}

type idempotencyKeys struct{ fp *idempotency.Fingerprinter }

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

// inputErr makes a statement's format error a usage error (exit 2: bad
// input, nothing judged).
func inputErr(err error) error {
	var (
		fe *statement.FormatError
		an *statement.AccountNotFoundError
		cs *statement.CollectionSideError
		pe *fs.PathError
	)
	if errors.As(err, &fe) || errors.As(err, &an) || errors.As(err, &cs) || errors.As(err, &pe) || errors.Is(err, reconcile.ErrNoPeriod) || errors.Is(err, reconcile.ErrGap) {
		return cli.Usagef("%v", err)
	}
	return err
}

// outputFile checks, before anything is read, that path can be written
// as a file: its directory exists and it is not a directory itself.
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

func runReconcile(ctx context.Context, env *cli.Env, args []string) error {
	if len(args) > 0 && args[0] == "resolve" {
		return runReconcileResolve(ctx, env, args[1:])
	}
	if len(args) > 0 && args[0] == "run" {
		args = args[1:]
	}
	f, bc, asJSON := opsFlags(env, "reconcile", reconcileSynopsis)
	var (
		sf          statementFlags
		asCSV       bool
		metricsFile string
		reportFile  string
		concurrency int
		skew        time.Duration
	)
	sf.bind(f)
	f.Duration(&skew, "skew-margin", "IC_SKEW_MARGIN", idempotency.DefaultSkewMargin, "an IN_PROGRESS record posted by the bank counts as in flight (not a break) until its lease passed by this much (as serve's)")
	f.Bool(&asCSV, "csv", "", false, "print the breaks as CSV (accounts masked)")
	f.String(&metricsFile, "metrics-file", "IC_RECONCILE_METRICS_FILE", "", "also write reconciliation_breaks{kind} and the run's figures in Prometheus's text format to this file (node_exporter's textfile collector), whole by rename")
	f.String(&reportFile, "report-file", "IC_RECONCILE_REPORT_FILE", "", "also keep the report as JSON in this file (owner-only, whole by rename): the console's Reconciliation page reads it (console --reconcile-report-file) and resolves its breaks against the same statement")
	f.Int(&concurrency, "concurrency", "", 16, "records read at once")
	if err := f.Parse(args, true); err != nil {
		return err
	}
	if *asJSON && asCSV {
		return cli.Usagef("--json or --csv, not both")
	}
	if concurrency < 1 || concurrency > 256 {
		return cli.Usagef("--concurrency must be between 1 and 256")
	}
	if err := errors.Join(outputFile("--report-file", reportFile), outputFile("--metrics-file", metricsFile)); err != nil {
		return cli.Usagef("%v", err)
	}
	read, period, keys, err := sf.open(f.Args())
	if err != nil {
		return err
	}
	b, err := openForOps(ctx, bc)
	if err != nil {
		return err
	}
	defer b.Close()
	rep, err := reconcile.Run(ctx, reconcile.Options{Store: b.Store, Fingerprints: keys.fp, Period: period, Concurrency: concurrency, SkewMargin: max(skew, 0)}, read)
	if err != nil {
		return inputErr(err)
	}
	switch {
	case *asJSON:
		enc := json.NewEncoder(env.Stdout)
		enc.SetIndent("", "  ")
		err = enc.Encode(rep)
	case asCSV:
		err = rep.WriteCSV(env.Stdout)
	default:
		err = rep.WriteText(env.Stdout)
	}
	if err != nil {
		return err
	}
	rep.Statements, rep.CollectionAccount = sf.list(f.Args()), strings.TrimSpace(sf.collection)
	if reportFile != "" {
		if err := reconcile.WriteReportFile(reportFile, rep); err != nil {
			return fmt.Errorf("--report-file: %w", err)
		}
	}
	if metricsFile != "" {
		end, _ := time.Parse(time.RFC3339, rep.Period.To)
		if err := metrics.WriteReconciliationFile(metricsFile, metrics.Reconciliation{Breaks: rep.Counts(), Postings: rep.Postings, KeyOnly: rep.Unverified,
			Matched: rep.Matched, Resolved: rep.Resolved, PeriodEnd: end, RunAt: time.Now()}); err != nil {
			return err
		}
	}
	if n := len(rep.Breaks); n > 0 {
		return fmt.Errorf("%d break(s) to resolve (chargerecovery reconcile resolve CHARGE_ID --statement … --reason …)", n)
	}
	return nil
}

func runReconcileResolve(ctx context.Context, env *cli.Env, args []string) error {
	f, bc, asJSON := opsFlags(env, "reconcile resolve", reconcileSynopsis)
	var (
		sf                               statementFlags
		kind, reason                     string
		lease, skew, retention           time.Duration
		unverified, noticeSent, refunded bool
	)
	sf.bind(f)
	f.String(&kind, "kind", "", "", "which break, when the charge has several: "+kindList())
	f.Bool(&unverified, "unverified", "", false, "adopt a posting that could not be checked against the charge (no narrative, or no fingerprint key): you checked its amount and account by hand")
	f.Bool(&noticeSent, "notice-sent", "", false, "an adopted posting's pre-debit notice is known to have gone out: record DEBITED (default: DEBITED_NOTIFICATION_FAILED with the notice kept, for renotify)")
	f.Bool(&refunded, "refunded", "", false, "failed_but_posted: the bank gave the money back: mark the break (the record stays FAILED); by default the posting is recorded as collected (DONE, never debited again)")
	f.String(&reason, "reason", "", "", "why it is resolved (kept with the resolution and in the audit trail), e.g. \"INC-88: refunded by the bank\" (required)")
	f.Duration(&lease, "lease", "IC_LEASE", idempotency.DefaultLease, "the claim an adoption takes on the record while it writes DONE (as serve's)")
	f.Duration(&retention, "retention", "IC_RETENTION", idempotency.DefaultRetention, "how long the adopted record and the resolution are kept (as serve's records)")
	f.Duration(&skew, "skew-margin", "IC_SKEW_MARGIN", idempotency.DefaultSkewMargin, "a lapsed claim is taken over only this long after it ends (as serve's)")
	var ac auditConfig
	ac.Bind(f)
	opFlag := cli.OperatorFlag(f)
	if err := f.Parse(args, true); err != nil {
		return err
	}
	if len(f.Args()) != 1 {
		return cli.Usagef("give exactly one CHARGE_ID (see chargerecovery reconcile -h)")
	}
	id := f.Args()[0]
	// A break's id as the report shows it: a charge id, the bank key of
	// an unknown posting, or either masked (reconcile.ShowKey).
	if _, ok := reconcile.ChargeOf(id); !ok && !strings.ContainsAny(id, "~_*") {
		return cli.Usagef("%q is not a charge id (nor the bank key of an unknown posting)", id)
	}
	if kind != "" && !reconcile.Kind(kind).Valid() {
		return cli.Usagef("--kind %q is not one of %s", kind, kindList())
	}
	if strings.TrimSpace(reason) == "" {
		return cli.Usagef("say why (--reason): it is kept with the resolution and in the audit trail")
	}
	if lease <= 0 || retention <= 0 || skew < 0 {
		return cli.Usagef("--lease and --retention must be positive, --skew-margin not negative")
	}
	read, period, keys, err := sf.open(nil)
	if err != nil {
		return err
	}
	trail, book, policy, err := ac.open(ctx, env, bc)
	if err != nil {
		return err
	}
	defer trail.Close()
	b, err := openForOps(ctx, bc)
	if err != nil {
		return err
	}
	defer b.Close()
	pinKind, pinBreak := reconcile.Kind(kind), ""
	if policy.ReconcileAdopt {
		// Whether it is an adoption is the break's kind: found first, by
		// the reconciliation of this charge alone (nothing written). Said
		// before anything is done, whoever asks.
		spec := approval.Spec{Kind: approval.Reconcile, Reason: reason, ChargeIDs: []string{id}, Statements: sf.list(nil),
			CollectionAccount: strings.TrimSpace(sf.collection), TimeZone: sf.timeZone(), From: period.From, To: period.To, BreakKind: reconcile.Kind(kind),
			Unverified: unverified, NoticeSent: noticeSent, Refunded: refunded}
		be := approval.Backend{Store: b.Store, Fingerprints: keys.fp, SkewMargin: max(skew, 0)}
		ts, err := be.Select(ctx, spec, time.Now())
		if err != nil {
			// Fails closed: what cannot be judged is not resolved.
			return inputErr(fmt.Errorf("nothing done: %w", err))
		}
		spec.BreakKind, spec.Collects = reconcile.Kind(ts[0].Code), ts[0].Collects
		if why := policy.Needs(spec, 1); why != "" {
			return needsProposal(trail, claimed(env, *opFlag, &ac, book), "reconcile-resolve", why, proposeReconcile(spec, kind != ""))
		}
		// The resolve below reads the statement again: it must close the
		// break decided on here, or nothing (ErrBreakChanged) — a statement
		// rewritten between the two reads must not turn a break that
		// needed no approval into an adoption by one operator.
		pinKind, pinBreak = spec.BreakKind, ts[0].BreakID
	}
	who, err := ac.who(env, *opFlag, book, "")
	if err != nil {
		return err
	}
	guard, err := guardFor(b, lease, retention, skew)
	if err != nil {
		return err
	}
	var res reconcile.Resolved
	err = actAudited(env, trail, who, "reconcile-resolve", id, reason, func(w io.Writer) error {
		var err error
		res, err = reconcile.Resolve(ctx, reconcile.Options{Store: b.Store, Fingerprints: keys.fp, Period: period, SkewMargin: skew}, read,
			reconcile.ResolveRequest{ChargeID: id, Kind: pinKind, BreakID: pinBreak, Reason: reason, Operator: who.Name, Guard: guard,
				Unverified: unverified, NoticeSent: noticeSent, Refunded: refunded})
		if err != nil {
			return err
		}
		line, _ := json.Marshal(map[string]any{"audit": true, "msg": fmt.Sprintf("reconciliation break %s %s", res.Break.Kind, res.Action),
			"action": "reconcile-resolve", "result": res.Action, "charge_id": id, "reason": reason,
			"kind": res.Break.Kind, "break": res.Break.ID, "bank_keys": res.Break.BankKeys})
		_, err = w.Write(append(line, '\n'))
		return err
	})
	if err != nil {
		return inputErr(err)
	}
	if *asJSON {
		return json.NewEncoder(env.Stdout).Encode(res)
	}
	switch res.Action {
	case "adopted":
		fmt.Fprintf(env.Stdout, "%s: %s adopted: the record is DONE %s with the bank's reference %s (no debit)\n",
			safetext.Text(id), res.Break.Kind, safetext.Text(res.Record.Status), safetext.Text(charge.ReferenceOf(res.Record.Status, res.Record.Detail)))
		if _, kept := charge.PendingNotice(res.Record.Status, res.Record.Detail); kept {
			fmt.Fprintf(env.Stdout, "  its pre-debit notice is kept: chargerecovery renotify %s sends it\n", safetext.Text(id))
		}
	default:
		fmt.Fprintf(env.Stdout, "%s: %s marked resolved (break %s): %s\n", safetext.Text(id), res.Break.Kind, res.Break.ID, strconv.QuoteToGraphic(reason))
	}
	return nil
}

// proposeReconcile is the approvals propose command of spec (withKind:
// the break's kind was given).
func proposeReconcile(spec approval.Spec, withKind bool) string {
	w := []string{"reconcile", "--charge-id", shellWord(spec.ChargeIDs[0]), "--statement", shellWord(strings.Join(spec.Statements, ","))}
	if spec.CollectionAccount != "" {
		w = append(w, "--collection-account", shellWord(spec.CollectionAccount))
	}
	if spec.TimeZone != "" {
		w = append(w, "--time-zone", shellWord(spec.TimeZone))
	}
	if !spec.From.IsZero() {
		w = append(w, "--from", spec.From.UTC().Format(time.RFC3339), "--to", spec.To.UTC().Format(time.RFC3339))
	}
	if withKind {
		w = append(w, "--kind", string(spec.BreakKind))
	}
	for _, f := range []struct {
		on   bool
		flag string
	}{{spec.Unverified, "--unverified"}, {spec.NoticeSent, "--notice-sent"}, {spec.Refunded, "--refunded"}} {
		if f.on {
			w = append(w, f.flag)
		}
	}
	return strings.Join(append(w, "--reason", strconv.Quote(spec.Reason)), " ")
}

// shellWord is s as one word of a shell command: as it is when plain,
// else single-quoted.
func shellWord(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_./:,@~+=-") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func kindList() string {
	var w []string
	for _, k := range reconcile.Kinds {
		w = append(w, string(k))
	}
	return strings.Join(w, ", ")
}

// guardFor is a Guard over b's store with serve's lease, retention and
// skew margin (0: none).
func guardFor(b *backend.Backend, lease, retention, skew time.Duration) (*idempotency.Guard, error) {
	if skew == 0 {
		skew = -1
	}
	return idempotency.NewGuard(b.Store, idempotency.Options{Lease: lease, Retention: retention, SkewMargin: skew})
}
