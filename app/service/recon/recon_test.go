package recon_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/app/reconcile"
	"github.com/finedge/idempotent-consumer/app/service/approval"
	"github.com/finedge/idempotent-consumer/app/service/cli"
	"github.com/finedge/idempotent-consumer/app/service/pipeline"
	"github.com/finedge/idempotent-consumer/app/service/recon"
	"github.com/finedge/idempotent-consumer/app/service/session"
	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
	"github.com/finedge/idempotent-consumer/memstore"
)

// isUsage says err is a usage error as the command returns it (exit 2).
func isUsage(err error) bool {
	_, ok := err.(*cli.UsageError)
	return ok
}

func TestASourceOpensAsTheOperatorNamedIt(t *testing.T) {
	dir := t.TempDir()
	now := time.Date(2026, 12, 7, 3, 0, 0, 0, time.UTC) // 08:30 on the 7th in Kolkata
	kolkataDay := func(d int) time.Time {
		return time.Date(2026, 12, d, 0, 0, 0, 0, time.FixedZone("IST", 5*3600+1800)).UTC()
	}
	for _, tc := range []struct {
		name     string
		src      recon.Source
		usage    string // "": opens
		from, to time.Time
		file     string
		zone     string
	}{
		{name: "the statement's own period", src: recon.Source{Files: []string{filepath.Join(dir, "s.xml")}, Zone: "UTC"}, file: filepath.Join(dir, "s.xml")},
		{name: "a daily job's day in the bank's zone", src: recon.Source{Files: []string{filepath.Join(dir, "{from}.xml")}, From: "yesterday", To: "today", Zone: "Asia/Kolkata"},
			from: kolkataDay(6), to: kolkataDay(7), file: filepath.Join(dir, "2026-12-06.xml"), zone: "Asia/Kolkata"},
		{name: "days and RFC 3339", src: recon.Source{Files: []string{"s.csv"}, From: "2026-12-01", To: "2026-12-02T06:00:00+05:30", Zone: "Asia/Kolkata"},
			from: kolkataDay(1), to: kolkataDay(2).Add(6 * time.Hour), zone: "Asia/Kolkata"},
		{name: "no file", src: recon.Source{Zone: "UTC"}, usage: "give the statement"},
		{name: "from without to", src: recon.Source{Files: []string{"s.csv"}, From: "today", Zone: "UTC"}, usage: "together"},
		{name: "an unknown zone", src: recon.Source{Files: []string{"s.csv"}, Zone: "Mars/Olympus"}, usage: "--time-zone"},
		{name: "{from} without from", src: recon.Source{Files: []string{"{from}.csv"}, Zone: "UTC"}, usage: "{from} needs --from"},
		{name: "not a day", src: recon.Source{Files: []string{"s.csv"}, From: "monday", To: "today", Zone: "UTC"}, usage: "--from: "},
		{name: "backwards", src: recon.Source{Files: []string{"s.csv"}, From: "today", To: "yesterday", Zone: "UTC"}, usage: "is not before"},
		{name: "a fingerprint key that cannot be read", src: recon.Source{Statement: "a.csv,b.csv", Zone: "UTC", Keys: pipeline.Config{FingerprintKeyFile: filepath.Join(dir, "no.key")}},
			usage: "--fingerprint-key-file: "},
		{name: "--statement, then the arguments", src: recon.Source{Statement: "a.csv", Files: []string{"b.csv"}, Zone: "UTC"}, file: "two"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, err := tc.src.Open(now)
			if tc.usage != "" {
				if !isUsage(err) || !strings.Contains(err.Error(), tc.usage) {
					t.Fatalf("err = %v, want a usage error saying %q", err, tc.usage)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !st.Period.From.Equal(tc.from) || !st.Period.To.Equal(tc.to) || st.TimeZone != tc.zone || st.Read == nil {
				t.Fatalf("period %v–%v, zone %q", st.Period.From, st.Period.To, st.TimeZone)
			}
			if tc.file == "two" && (len(st.Files) != 2 || filepath.Base(st.Files[0]) != "a.csv" || filepath.Base(st.Files[1]) != "b.csv") {
				t.Fatalf("files %v, want a.csv then b.csv", st.Files)
			} else if tc.file != "" && tc.file != "two" && (len(st.Files) != 1 || st.Files[0] != tc.file) {
				t.Fatalf("files %v, want %s", st.Files, tc.file)
			}
			if !filepath.IsAbs(st.Files[0]) {
				t.Fatalf("file %s is not absolute", st.Files[0])
			}
		})
	}
}

// claimedAndDead is a store where a worker claimed charge CHGA1 and died
// before DONE, its lease long passed.
func claimedAndDead(t *testing.T) driver.Store {
	t.Helper()
	store := memstore.New()
	g, err := idempotency.NewGuard(store, idempotency.Options{Lease: time.Millisecond, SkewMargin: -1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.Claim(t.Context(), "CHGA1", "fp"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	return store
}

// statementOf writes a CSV statement of one posting under charge CHGA1's
// key (the bank posted it: with claimedAndDead, posted_not_recorded) and
// opens it.
func statementOf(t *testing.T) recon.Statement {
	t.Helper()
	path := filepath.Join(t.TempDir(), "stmt.csv")
	text := "booking_date,bank_key,account,amount_minor,currency,reference,reversal\n2026-12-01,CHGA1,0012345600001,50000,INR,REF-1,false\n"
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	st, err := recon.Source{Files: []string{path}, From: "2026-12-01", To: "2026-12-02", Zone: "UTC"}.Open(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func TestRunKeepsItsFilesAndNamesTheBreaks(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name  string
		o     recon.RunOptions
		usage string
	}{
		{name: "no files", o: recon.RunOptions{Concurrency: 4}},
		{name: "report and metrics", o: recon.RunOptions{Concurrency: 4, ReportFile: filepath.Join(dir, "report.json"), MetricsFile: filepath.Join(dir, "recon.prom")}},
		{name: "too many at once", o: recon.RunOptions{Concurrency: 257}, usage: "--concurrency"},
		{name: "a report in no directory", o: recon.RunOptions{Concurrency: 4, ReportFile: filepath.Join(dir, "none", "r.json")}, usage: "its directory does not exist"},
		{name: "metrics to a directory", o: recon.RunOptions{Concurrency: 4, MetricsFile: dir}, usage: "is a directory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.o.Check(); tc.usage != "" || err != nil {
				if !isUsage(err) || !strings.Contains(err.Error(), tc.usage) {
					t.Fatalf("check: %v, want a usage error saying %q", err, tc.usage)
				}
				return
			}
			tc.o.Store = claimedAndDead(t)
			st := statementOf(t)
			var shown reconcile.Report
			err := recon.Run(t.Context(), st, tc.o, func(r reconcile.Report) error { shown = r; return nil })
			if err == nil || !strings.Contains(err.Error(), "1 break(s) to resolve") {
				t.Fatalf("err = %v", err)
			}
			if len(shown.Breaks) != 1 || shown.Breaks[0].Kind != reconcile.PostedNotRecorded {
				t.Fatalf("shown %+v", shown.Breaks)
			}
			if tc.o.ReportFile != "" {
				kept, err := reconcile.ReadReportFile(tc.o.ReportFile)
				if err != nil || len(kept.Statements) != 1 || kept.Statements[0] != st.Files[0] || len(kept.Breaks) != 1 {
					t.Fatalf("report file: %+v %v", kept, err)
				}
				if m, err := os.ReadFile(tc.o.MetricsFile); err != nil || !strings.Contains(string(m), `reconciliation_breaks{kind="posted_not_recorded"} 1`) {
					t.Fatalf("metrics file: %v %s", err, m)
				}
			}
		})
	}
}

func TestResolveAsksThePolicyFirstThenAdoptsAudited(t *testing.T) {
	olga := approval.Actor{Name: "olga", Role: "operator", Via: "cli"}
	for _, tc := range []struct {
		name   string
		policy string
		err    string // "": adopted
	}{
		{name: "four-eyes off: adopted", policy: "off"},
		{name: "adoptions need approval: refused with the command that proposes it", policy: "reconcile-adopt",
			err: "chargerecovery approvals propose reconcile --charge-id CHGA1 --statement "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := approval.ParsePolicy(tc.policy)
			if err != nil {
				t.Fatal(err)
			}
			store := claimedAndDead(t)
			st := statementOf(t)
			var log strings.Builder
			r := recon.ResolveRequest{ChargeID: "CHGA1", Reason: "INC-1: checked by hand", Unverified: true, Lease: time.Minute, Retention: idempotency.DefaultRetention,
				Session: &session.Session{Policy: p}, Who: func() (approval.Actor, error) { return olga, nil }, Claimed: func() approval.Actor { return olga }, Log: &log}
			if err := r.Check(); err != nil {
				t.Fatal(err)
			}
			res, err := recon.Resolve(t.Context(), store, st, r)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) || !strings.Contains(err.Error(), "--from 2026-12-01T00:00:00Z --to 2026-12-02T00:00:00Z --unverified --reason") {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				if rec, err := store.Get(t.Context(), "CHGA1", time.Now()); err != nil || rec.State != driver.StateInProgress {
					t.Fatalf("the record was written before approval: %+v %v", rec, err)
				}
				return
			}
			if err != nil || res.Action != "adopted" {
				t.Fatalf("resolve: %+v, %v", res, err)
			}
			if !strings.Contains(log.String(), `"result":"adopted"`) {
				t.Fatalf("no audit line: %s", log.String())
			}
			// The audit line is a log line as every other command's: its
			// time and level first (issue 54).
			for _, l := range strings.Split(strings.TrimSpace(log.String()), "\n") {
				if strings.Contains(l, `"result":"adopted"`) && (!strings.HasPrefix(l, `{"time":"`) || !strings.Contains(l, `"level":"WARN"`)) {
					t.Fatalf("the audit line lacks its time or level: %s", l)
				}
			}
			var out strings.Builder
			recon.PrintResolved(&out, r.ChargeID, r.Reason, res)
			if !strings.Contains(out.String(), "CHGA1: posted_not_recorded adopted: the record is DONE") {
				t.Fatalf("printed %q", out.String())
			}
			if err := recon.Run(t.Context(), st, recon.RunOptions{Store: store, Concurrency: 1}, func(reconcile.Report) error { return nil }); err != nil {
				t.Fatalf("the break came back: %v", err)
			}
		})
	}
}

func TestResolveRequestCheck(t *testing.T) {
	ok := recon.ResolveRequest{ChargeID: "CHGA1", Reason: "why", Lease: time.Minute, Retention: idempotency.DefaultRetention}
	for _, tc := range []struct {
		name string
		edit func(*recon.ResolveRequest)
		want string
	}{
		{name: "not a charge id", edit: func(r *recon.ResolveRequest) { r.ChargeID = "-x" }, want: "is not a charge id"},
		{name: "a masked key", edit: func(r *recon.ResolveRequest) { r.ChargeID = "-x~" }},
		{name: "an unknown kind", edit: func(r *recon.ResolveRequest) { r.Kind = "lost" }, want: "is not one of posted_not_recorded"},
		{name: "no reason", edit: func(r *recon.ResolveRequest) { r.Reason = " " }, want: "say why"},
		{name: "no lease", edit: func(r *recon.ResolveRequest) { r.Lease = 0 }, want: "must be positive"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := ok
			tc.edit(&r)
			err := r.Check()
			if (tc.want == "") != (err == nil) || (err != nil && (!isUsage(err) || !strings.Contains(err.Error(), tc.want))) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
}

func TestProposeCommandQuotesWhatTheShellWouldSplit(t *testing.T) {
	spec := approval.Spec{ChargeIDs: []string{"CHGA1"}, Statements: []string{"/s/a b.xml", "/s/it's.xml"}, CollectionAccount: "IN12",
		TimeZone: "Asia/Kolkata", BreakKind: reconcile.PostedNotRecorded, Refunded: true, Reason: `say "why"`}
	want := `reconcile --charge-id CHGA1 --statement '/s/a b.xml,/s/it'\''s.xml' --collection-account IN12 --time-zone Asia/Kolkata --kind posted_not_recorded --refunded --reason "say \"why\""`
	if got := recon.ProposeCommand(spec, true); got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
}
