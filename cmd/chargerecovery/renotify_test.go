package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sns"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/finedge/idempotent-consumer/app/awssns"
	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/app/corebanksim"
	"github.com/finedge/idempotent-consumer/app/service/backend"
	"github.com/finedge/idempotent-consumer/app/service/operate"
	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
	"github.com/finedge/idempotent-consumer/internal/awstest"
	"github.com/finedge/idempotent-consumer/queue"
)

// noticeSink is a webhook that counts the deliveries of each notice, each
// taking a while (so that two runs at once overlap).
type noticeSink struct {
	mu    sync.Mutex
	count map[string]int // notification key → deliveries
	srv   *httptest.Server
}

func newNoticeSink(t *testing.T, latency time.Duration) *noticeSink {
	s := &noticeSink{count: map[string]int{}}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var nt charge.Notice
		if err := json.Unmarshal(body, &nt); err != nil {
			t.Errorf("notice %s: %v", body, err)
		}
		time.Sleep(latency)
		s.mu.Lock()
		s.count[nt.NotificationKey]++
		s.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *noticeSink) deliveries(key string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.count[key]
}

// missedNotices writes n DEBITED_NOTIFICATION_FAILED records, each keeping
// its notice, on a new embedded backend; it returns the env that names it,
// the backend and the charge ids.
func missedNotices(t *testing.T, sink *noticeSink, n int) (map[string]string, *backend.Backend, []string) {
	t.Helper()
	env := map[string]string{"IC_BACKEND": "embedded", "IC_DB": filepath.Join(t.TempDir(), "renotify.db"), "IC_LOG_LEVEL": "warn",
		"IC_NOTIFY": "webhook", "IC_NOTIFY_URL": sink.srv.URL + "/notices", "IC_OPERATOR": "olga"}
	b, err := backend.Open(t.Context(), *backendFor(env), 3*time.Second, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	g, err := idempotency.NewGuard(b.Store, idempotency.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for i := range n {
		c := charge.Charge{ID: fmt.Sprintf("CHG-RN-%03d", i), AccountID: fmt.Sprintf("0098765%05d", i),
			Amount: charge.Money{Minor: 1000 + int64(i), Currency: "INR"}, Type: charge.ChequeBookFee, DueDate: time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)}
		cl, err := g.Claim(t.Context(), c.ID, "fp-"+c.ID)
		if err != nil || cl.Outcome != idempotency.Acquired {
			t.Fatal(cl.Outcome, err)
		}
		notice, err := charge.NoticeOf(c, charge.DebitReceipt{Reference: fmt.Sprintf("CBS%010d", i)}, time.Now()).Marshal()
		if err != nil {
			t.Fatal(err)
		}
		if err := g.Complete(t.Context(), cl.Lease(), string(charge.DebitedNotificationFailed), string(notice)); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, c.ID)
	}
	return env, b, ids
}

// Two `renotify --all` at once (two operators after an incident) send each
// missed notice exactly once between them: each claims a notice in the
// store before sending it, and the other skips it; every record ends
// DEBITED with one audit line.
func TestTwoConcurrentRenotifyRunsSendEachNoticeOnce(t *testing.T) {
	const n = 20
	sink := newNoticeSink(t, 10*time.Millisecond)
	env, b, ids := missedNotices(t, sink, n)
	var wg sync.WaitGroup
	results := make([]result, 2)
	for i := range results {
		wg.Go(func() {
			results[i] = runCmd(t.Context(), env, "renotify", "--all", "--reason", fmt.Sprintf("INC-77: run %d", i), "--json")
		})
	}
	wg.Wait()
	sent := 0
	for i, r := range results {
		if r.code != 0 {
			t.Fatalf("run %d: exit %d\n%s\n%s", i, r.code, r.stdout, r.stderr)
		}
		var out struct{ Records []operate.Renotified }
		if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
			t.Fatalf("run %d: %v\n%s", i, err, r.stdout)
		}
		for _, rn := range out.Records {
			switch rn.Result {
			case "sent":
				sent++
			case "skipped":
			default:
				t.Errorf("run %d: %+v, want sent or skipped", i, rn)
			}
		}
	}
	for _, id := range ids {
		if d := sink.deliveries(charge.NotificationKey(id)); d != 1 {
			t.Errorf("%s: notice delivered %d times, want once", id, d)
		}
		rec, err := b.Store.Get(t.Context(), id, time.Now())
		if err != nil || rec.Status != string(charge.Debited) || len(rec.History) != 1 || !strings.Contains(rec.History[0], "INC-77") {
			t.Errorf("%s: %s %q %v, want DEBITED with one audit line", id, rec.Status, rec.History, err)
		}
	}
	if sent != n {
		t.Fatalf("the two runs report %d sent between them, want %d", sent, n)
	}
}

// A renotify that stopped after claiming a notice (a crash) holds it only
// for its lease: a run meanwhile skips it and sends nothing; a run after
// the lease takes the claim over and sends it, once.
func TestRenotifyAfterACrashedRunSendsOnceTheLeaseHasPassed(t *testing.T) {
	sink := newNoticeSink(t, 0)
	env, b, ids := missedNotices(t, sink, 1)
	id := ids[0]
	rec, err := b.Store.Get(t.Context(), id, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	notice, ok := charge.PendingNotice(rec.Status, rec.Detail)
	if !ok {
		t.Fatal("no notice kept")
	}
	// The crashed run: its claim, as renotify makes it, never finished.
	const lease = 1500 * time.Millisecond
	crashed, err := idempotency.NewGuard(b.Store, idempotency.Options{Lease: lease, SkewMargin: -1})
	if err != nil {
		t.Fatal(err)
	}
	claimedAt := time.Now()
	if cl, err := crashed.Claim(t.Context(), operate.NoticeClaimKey(notice), rec.Token); err != nil || cl.Outcome != idempotency.Acquired {
		t.Fatalf("the crashed run's claim: %v %v", cl.Outcome, err)
	}
	args := []string{"renotify", "--all", "--reason", "INC-78", "--lease", "2s", "--notify-timeout", "500ms", "--skew-margin", "0s"}
	r := runCmd(t.Context(), env, args...)
	if r.code != 0 || !strings.Contains(r.stdout, "0 sent") || !strings.Contains(r.stdout, "1 skipped") || !strings.Contains(r.stdout, "another renotify is sending it") {
		t.Fatalf("renotify while the crashed run's claim is live: %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	if time.Since(claimedAt) < lease && sink.deliveries(notice.NotificationKey) != 0 {
		t.Fatal("sent while another run held the claim")
	}
	time.Sleep(time.Until(claimedAt.Add(lease + 50*time.Millisecond)))
	r = runCmd(t.Context(), env, args...)
	if r.code != 0 || !strings.Contains(r.stdout, "1 sent") {
		t.Fatalf("renotify after the lease: %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	if d := sink.deliveries(notice.NotificationKey); d != 1 {
		t.Fatalf("notice delivered %d times, want once", d)
	}
	if rec, err := b.Store.Get(t.Context(), id, time.Now()); err != nil || rec.Status != string(charge.Debited) {
		t.Fatalf("record %s %v, want DEBITED", rec.Status, err)
	}
	if r := runCmd(t.Context(), env, args...); r.code != 0 || !strings.Contains(r.stdout, "0 record(s)") {
		t.Fatalf("a third run: %d %s, want nothing left", r.code, r.stdout)
	}
}

// A run that sent a notice and stopped before it recorded the send leaves
// the claim DONE: a later run records the record DEBITED without sending
// the notice again.
func TestRenotifyAfterARunThatSentButDidNotRecordSendsNothing(t *testing.T) {
	sink := newNoticeSink(t, 0)
	env, b, ids := missedNotices(t, sink, 1)
	rec, err := b.Store.Get(t.Context(), ids[0], time.Now())
	if err != nil {
		t.Fatal(err)
	}
	notice, _ := charge.PendingNotice(rec.Status, rec.Detail)
	g, err := idempotency.NewGuard(b.Store, idempotency.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cl, err := g.Claim(t.Context(), operate.NoticeClaimKey(notice), rec.Token)
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Complete(t.Context(), cl.Lease(), operate.SentStatus, notice.Reference); err != nil {
		t.Fatal(err)
	}
	r := runCmd(t.Context(), env, "renotify", "--all", "--reason", "INC-79")
	if r.code != 0 || !strings.Contains(r.stdout, "0 sent") || !strings.Contains(r.stdout, "recorded DEBITED now") {
		t.Fatalf("renotify: %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	if d := sink.deliveries(notice.NotificationKey); d != 0 {
		t.Fatalf("notice delivered %d times, want none (it was sent before)", d)
	}
	if rec, err := b.Store.Get(t.Context(), ids[0], time.Now()); err != nil || rec.Status != string(charge.Debited) ||
		len(rec.History) != 1 || !strings.Contains(rec.History[0], "sent earlier by another renotify") {
		t.Fatalf("record %s %q %v, want DEBITED with a line saying it was sent earlier", rec.Status, rec.History, err)
	}
}

// ATTACK (surface 4): renotify's claims live in the charges' own key space.
// The key renotify/CHARGE_ID:pre-debit is itself a valid charge id (the
// wire pattern allows '/' and ':'), and every tool that reads the store
// takes the claim for a charge:
//   - a renotify run that stopped after claiming leaves an IN_PROGRESS
//     record past its lease, which `stuck` lists as a charge stuck mid-debit
//     ("Each is reclaimed by its next delivery; if the message is gone, see
//     the DLQ") and serve's stuck-claims gauge counts (its alert fires): an
//     operator chases a charge that does not exist;
//   - a charge event whose id is renotify/CHG-RN-000:pre-debit parses as
//     valid, and once CHG-RN-000's notice was resent its claim meets the
//     notice's DONE record with another fingerprint: a Conflict, so a real
//     charge is dead-lettered as "charge id reused with another payload"
//     and never collected (and the other way round, renotify skips the
//     notice if that charge came first).
func TestReview35RenotifyClaimsAreTakenForCharges(t *testing.T) {
	sink := newNoticeSink(t, 0)
	env, b, ids := missedNotices(t, sink, 2)

	// CHG-RN-001: a renotify that stopped right after claiming its notice.
	rec, err := b.Store.Get(t.Context(), ids[1], time.Now())
	if err != nil {
		t.Fatal(err)
	}
	notice, _ := charge.PendingNotice(rec.Status, rec.Detail)
	crashed, err := idempotency.NewGuard(b.Store, idempotency.Options{Lease: 100 * time.Millisecond, SkewMargin: -1})
	if err != nil {
		t.Fatal(err)
	}
	if cl, err := crashed.Claim(t.Context(), operate.NoticeClaimKey(notice), rec.Token); err != nil || cl.Outcome != idempotency.Acquired {
		t.Fatalf("the crashed run's claim: %v %v", cl.Outcome, err)
	}
	time.Sleep(300 * time.Millisecond) // past its lease
	var problems []string
	if r := runCmd(t.Context(), env, "stuck"); strings.Contains(r.stdout, "renotify/") {
		problems = append(problems, "stuck lists a renotify claim as a charge stuck mid-debit:\n"+r.stdout)
	}

	// CHG-RN-000: its notice resent (the claim DONE SENT), then a charge
	// whose id is that claim's key.
	if r := runCmd(t.Context(), env, "renotify", ids[0], "--reason", "INC-35"); r.code != 0 || !strings.Contains(r.stdout, "1 sent") {
		t.Fatalf("renotify %s: %d\n%s\n%s", ids[0], r.code, r.stdout, r.stderr)
	}
	twin := charge.Charge{ID: "renotify/" + charge.NotificationKey(ids[0]), AccountID: "009876500077",
		Amount: charge.Money{Minor: 4200, Currency: "INR"}, Type: charge.ChequeBookFee, DueDate: time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)}
	body, err := charge.MarshalEvent(twin)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := charge.ParseEvent(body); err != nil {
		t.Fatalf("the twin charge does not parse (the collision needs a valid id): %v", err)
	}
	g, err := idempotency.NewGuard(b.Store, idempotency.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if cl, err := g.Claim(t.Context(), twin.ID, "fp-of-the-twin-charge"); err != nil || cl.Outcome != idempotency.Acquired {
		problems = append(problems, "the first delivery of charge "+twin.ID+" claims as "+cl.Outcome.String()+
			" (record "+string(cl.Record.State)+" "+cl.Record.Status+"): a real charge is refused because a notice's claim holds its id")
	}
	if len(problems) > 0 {
		t.Fatal(strings.Join(problems, "\n"))
	}
}

// sendCharges enqueues n charges (30% twice) on env's backend; it returns
// their ids, the backend and the bank (a plain simulator, unless env names
// one already: then ledger is that one's).
func sendCharges(t *testing.T, env map[string]string, prefix string, n int, ledger ...*corebanksim.Ledger) ([]string, *backend.Backend, *corebanksim.Ledger) {
	t.Helper()
	if len(ledger) == 0 {
		l := corebanksim.NewLedger(corebanksim.Faults{Latency: 5 * time.Millisecond})
		bank := httptest.NewServer(corebanksim.Handler(l))
		t.Cleanup(bank.Close)
		env["IC_COREBANK_URL"] = bank.URL
		ledger = append(ledger, l)
	}
	for k, v := range map[string]string{"IC_POLL_WAIT": "1s", "IC_VISIBILITY": "3s",
		"IC_LEASE": "3s", "IC_HTTP_ADDR": "127.0.0.1:0", "IC_LOG_LEVEL": "warn", "IC_NOTIFY_TIMEOUT": "500ms"} {
		if _, set := env[k]; !set {
			env[k] = v
		}
	}
	b, err := backend.Open(t.Context(), *backendFor(env), 3*time.Second, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	run := backend.RandomID()
	var ids []string
	var msgs []queue.Outgoing
	for i := range n {
		c := charge.Charge{ID: fmt.Sprintf("CHG-%s-%s-%03d", prefix, run, i), AccountID: fmt.Sprintf("0098765%05d", i),
			Amount: charge.Money{Minor: 1000 + int64(i), Currency: "INR"}, Type: charge.ChequeBookFee, DueDate: time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)}
		body, err := charge.MarshalEvent(c)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, c.ID)
		msgs = append(msgs, queue.Outgoing{Body: body})
		if i%10 < 3 {
			msgs = append(msgs, queue.Outgoing{Body: body})
		}
	}
	if _, err := b.Queue.SendBatch(t.Context(), msgs); err != nil {
		t.Fatal(err)
	}
	return ids, b, ledger[0]
}

// allDone: every charge has a final record.
func allDone(t *testing.T, b *backend.Backend, ids []string) func() bool {
	return func() bool {
		for _, id := range ids {
			if rec, err := b.Store.Get(t.Context(), id, time.Now()); err != nil || rec.State != driver.StateDone {
				return false
			}
		}
		return true
	}
}

// allFinished: every charge has a final record and the queue is empty.
func allFinished(t *testing.T, b *backend.Backend, ids []string) func() bool {
	done := allDone(t, b, ids)
	return func() bool {
		if !done() {
			return false
		}
		d, err := b.Queue.Depth(t.Context())
		return err == nil && d.Waiting+d.InFlight == 0
	}
}

// webhookScenario: a webhook that answers 500, times out and drops
// connections: the debits are never repeated, the charges it failed end
// DEBITED_NOTIFICATION_FAILED, the others DEBITED, each delivered notice
// carries its charge's key, and nothing reaches the DLQ. Then the webhook
// works again and `renotify --all` delivers each missed notice once (same
// key), the records end DEBITED with an audit line, and the bank is never
// called.
func webhookScenario(t *testing.T, env map[string]string) {
	const n = 60
	var mu sync.Mutex
	delivered := map[string]charge.Notice{}
	deliveries := map[string]int{}
	var calls atomic.Int64
	var healthy atomic.Bool
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if !healthy.Load() {
			switch calls.Add(1) % 4 {
			case 1:
				w.WriteHeader(http.StatusInternalServerError)
				return
			case 2:
				<-r.Context().Done() // no answer within the timeout
				return
			case 3:
				c, _, _ := w.(http.Hijacker).Hijack()
				c.Close()
				return
			}
		}
		var nt charge.Notice
		if err := json.Unmarshal(body, &nt); err != nil || r.Header.Get("Idempotency-Key") != nt.NotificationKey {
			t.Errorf("notice %s with key %q: %v", body, r.Header.Get("Idempotency-Key"), err)
		}
		if strings.Contains(string(body), "0098765") {
			t.Errorf("a notice holds a full account number: %s", body)
		}
		mu.Lock()
		delivered[nt.ChargeID] = nt
		deliveries[nt.ChargeID]++
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	defer hook.Close()
	env["IC_NOTIFY"], env["IC_NOTIFY_URL"] = "webhook", hook.URL+"/notices"
	ids, b, ledger := sendCharges(t, env, "WH", n)
	serveUntil(t, env, nil, allFinished(t, b, ids))
	posted := ledger.PostingsByKey()
	var missed []string
	mu.Lock()
	for _, id := range ids {
		rec, err := b.Store.Get(t.Context(), id, time.Now())
		if err != nil || posted[id] != 1 {
			t.Fatalf("%s: %v, posted %d times; want once", id, err, posted[id])
		}
		_, got := delivered[id]
		switch {
		case rec.Status == string(charge.DebitedNotificationFailed) && !got:
			missed = append(missed, id)
		case rec.Status == string(charge.Debited) && got && delivered[id].Reference == rec.Detail:
		default:
			t.Errorf("%s: status %s, notice delivered %v (%+v): want DEBITED with its notice, or DEBITED_NOTIFICATION_FAILED without", id, rec.Status, got, delivered[id])
		}
	}
	mu.Unlock()
	if len(missed) == 0 || len(missed) == n {
		t.Fatalf("%d of %d notifications failed: the hostile webhook was not exercised", len(missed), n)
	}
	if d := ledger.DuplicateRequests(); len(d) != 0 {
		t.Fatalf("debits repeated after a failed notification: %v", d)
	}
	if r := runCmd(t.Context(), env, "redrive", "--dry-run", "--json"); !strings.Contains(r.stdout, `"seen":0`) {
		t.Fatalf("DLQ not empty: %s", r.stdout)
	}

	// The follow-up: a dry run lists them, the real run sends each once.
	calls0 := func() int {
		n := 0
		for _, id := range ids {
			n += ledger.Calls(id)
		}
		return n
	}()
	r := runCmd(t.Context(), env, "renotify", "--all", "--dry-run", "--json")
	if r.code != 0 || strings.Count(r.stdout, `"would_send"`) != len(missed) {
		t.Fatalf("renotify --dry-run: %d %s %s; want %d to send", r.code, r.stdout, r.stderr, len(missed))
	}
	healthy.Store(true)
	r = runCmd(t.Context(), env, "renotify", "--all", "--reason", "INC-77: webhook receiver back")
	if r.code != 0 || !strings.Contains(r.stdout, fmt.Sprintf("%d sent", len(missed))) || strings.Count(r.stderr, `"audit":true`) != len(missed) {
		t.Fatalf("renotify --all: %d %s %s", r.code, r.stdout, r.stderr)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, id := range ids {
		rec, err := b.Store.Get(t.Context(), id, time.Now())
		if err != nil || rec.Status != string(charge.Debited) || deliveries[id] != 1 || rec.Detail != delivered[id].Reference {
			t.Errorf("%s: %s %q (%v), delivered %d times; want DEBITED, its reference, one notice", id, rec.Status, rec.Detail, err, deliveries[id])
		}
	}
	for _, id := range missed {
		rec, _ := b.Store.Get(t.Context(), id, time.Now())
		if len(rec.History) != 1 || !strings.Contains(rec.History[0], "renotified") || !strings.Contains(rec.History[0], id+":pre-debit") ||
			!strings.Contains(rec.History[0], "INC-77") || !strings.Contains(rec.History[0], "was DEBITED_NOTIFICATION_FAILED") {
			t.Errorf("%s: history %q, want the renotify audit line", id, rec.History)
		}
	}
	if c := func() int {
		n := 0
		for _, id := range ids {
			n += ledger.Calls(id)
		}
		return n
	}(); c != calls0 || len(ledger.PostingsByKey()) != n {
		t.Fatalf("renotify called the bank: %d debit calls, was %d", c, calls0)
	}
	if r := runCmd(t.Context(), env, "renotify", "--all"); r.code != 0 || !strings.Contains(r.stdout, "0 record(s)") {
		t.Fatalf("a second renotify --all: %d %s %s, want nothing left", r.code, r.stdout, r.stderr)
	}
	t.Logf("%d of %d notifications failed (500, timeout, dropped connection), then renotified", len(missed), n)
}

func TestWebhookFailuresThenRenotifyOnTheEmbeddedBackend(t *testing.T) {
	t.Parallel()
	webhookScenario(t, map[string]string{"IC_BACKEND": "embedded", "IC_DB": filepath.Join(t.TempDir(), "hook.db")})
}

func TestWebhookFailuresThenRenotifyOnPostgreSQL(t *testing.T) {
	t.Parallel()
	webhookScenario(t, pgEnv(t))
}

func TestWebhookFailuresThenRenotifyWithTheRedisStore(t *testing.T) {
	t.Parallel()
	webhookScenario(t, redisEnv(t, filepath.Join(t.TempDir(), "hook.db")))
}

func TestWebhookFailuresThenRenotifyOnAWS(t *testing.T) {
	emulatorInParallel(t)
	webhookScenario(t, awsSetup(t, "hook", "--visibility", "3s"))
}

// SNS on the emulator: N debited charges → N notices on a queue subscribed
// to the topic, each with its charge's id and key, none with a full
// account number.
func TestSNSNotificationsReachASubscribedQueue(t *testing.T) {
	emulatorInParallel(t)
	const n = 20
	cfg := awstest.Config(t)
	snsc, sqsc := sns.NewFromConfig(cfg), sqs.NewFromConfig(cfg)
	ctx := t.Context()
	name := awstest.Name("notices")
	// setup --notify sns creates the topic, twice without harm, and says
	// the ARN serve wants.
	env := awsSetup(t, "sns", "--visibility", "3s")
	env["IC_NOTIFY"] = "sns"
	var arn string
	for i := range 2 {
		r := runCmd(ctx, env, "setup", "--visibility", "3s", "--notify-sns-topic", name)
		m := regexp.MustCompile(`(?m)^serve with: --notify sns --notify-sns-topic (\S+)$`).FindStringSubmatch(r.stdout)
		if r.code != 0 || m == nil || (arn != "" && m[1] != arn) {
			t.Fatalf("setup %d: %d %q %s (ARN before: %q)", i+1, r.code, r.stdout, r.stderr, arn)
		}
		arn = m[1]
	}
	topic := &sns.CreateTopicOutput{TopicArn: aws.String(arn)}
	t.Cleanup(func() { _, _ = snsc.DeleteTopic(context.Background(), &sns.DeleteTopicInput{TopicArn: topic.TopicArn}) })
	same := 0
	for pg := sns.NewListTopicsPaginator(snsc, &sns.ListTopicsInput{}); pg.HasMorePages(); {
		out, err := pg.NextPage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, tp := range out.Topics {
			if awssns.TopicName(aws.ToString(tp.TopicArn)) == name {
				same++
			}
		}
	}
	if same != 1 {
		t.Fatalf("%d topics named %s after setup twice, want 1", same, name)
	}
	q, err := sqsc.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(name + "-sub")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = sqsc.DeleteQueue(context.Background(), &sqs.DeleteQueueInput{QueueUrl: q.QueueUrl}) })
	qa, err := sqsc.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: q.QueueUrl, AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameQueueArn}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := snsc.Subscribe(ctx, &sns.SubscribeInput{TopicArn: topic.TopicArn, Protocol: aws.String("sqs"),
		Endpoint: aws.String(qa.Attributes["QueueArn"]), Attributes: map[string]string{"RawMessageDelivery": "true"}}); err != nil {
		t.Fatal(err)
	}
	env["IC_NOTIFY_SNS_TOPIC"] = arn
	// What is checked is delivery; the emulator, shared with the other
	// tests of the run, has taken more than the default 5s to answer a
	// publish under load (the notice then arrived, and the record said
	// DEBITED_NOTIFICATION_FAILED, as it must after a timeout).
	env["IC_NOTIFY_TIMEOUT"] = "30s"
	ids, b, ledger := sendCharges(t, env, "SNS", n)
	serveUntil(t, env, nil, allFinished(t, b, ids))
	got := map[string]charge.Notice{}
	for deadline := time.Now().Add(30 * time.Second); len(got) < n && time.Now().Before(deadline); {
		out, err := sqsc.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: q.QueueUrl, MaxNumberOfMessages: 10, WaitTimeSeconds: 1})
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range out.Messages {
			if strings.Contains(*m.Body, "0098765") {
				t.Errorf("a notice holds a full account number: %s", *m.Body)
			}
			var nt charge.Notice
			if err := json.Unmarshal([]byte(*m.Body), &nt); err != nil {
				t.Fatalf("notice %s: %v", *m.Body, err)
			}
			if _, dup := got[nt.ChargeID]; dup {
				t.Errorf("two notices for %s", nt.ChargeID)
			}
			got[nt.ChargeID] = nt
		}
	}
	posted := ledger.PostingsByKey()
	for _, id := range ids {
		nt, ok := got[id]
		rec, err := b.Store.Get(ctx, id, time.Now())
		if !ok || err != nil || posted[id] != 1 || rec.Status != string(charge.Debited) || nt.Reference != rec.Detail ||
			nt.NotificationKey != id+":pre-debit" || !strings.HasPrefix(nt.Account, "********") {
			t.Errorf("%s: notice %+v (%v), record %+v (%v), posted %d", id, nt, ok, rec.Status, err, posted[id])
		}
	}
	if len(got) != n {
		t.Fatalf("%d notices on the subscribed queue, want %d", len(got), n)
	}
}

// reopenScenario: charges recorded FAILED by a 401 (a consumer configured
// to take the gateway's 401 as a decline, as this one did before the bank
// boundary was fixed) → fix → reopen → redrive → each debited once, DONE,
// with the audit trail in the record.
func reopenScenario(t *testing.T, env map[string]string) {
	ledger := corebanksim.NewLedger(corebanksim.Faults{OutageStatus: 401, OutageUntil: time.Now().Add(time.Hour)})
	b := withBank(t, env, ledger, nil)
	ctx := t.Context()
	run := backend.RandomID()
	ids := []string{"CHG-RO-" + run + "-1", "CHG-RO-" + run + "-2", "CHG-RO-" + run + "-3"}
	for i, id := range ids {
		if r := runCmd(ctx, env, "send", "--charge-id", id, "--account", fmt.Sprintf("0012345678%02d", i), "--amount-minor", "2500"); r.code != 0 {
			t.Fatalf("send: %s", r.stderr)
		}
	}
	all := func(state driver.State) func() bool {
		return func() bool {
			for _, id := range ids {
				rec, err := b.Store.Get(ctx, id, time.Now())
				if err != nil || rec.State != state {
					return false
				}
			}
			d, err := b.Queue.Depth(ctx)
			return err == nil && d.Waiting+d.InFlight == 0 && (state != driver.StateFailed || d.DLQ == len(ids))
		}
	}

	// 1. The misconfigured consumer records every charge FAILED on the 401.
	serveUntil(t, env, []string{"--corebank-declines", "422:DECLINED,401:UNAUTHORIZED"}, all(driver.StateFailed))
	if n := len(ledger.Entries()); n != 0 {
		t.Fatalf("%d postings during the 401 window", n)
	}

	// 2. Fix the cause (the gateway token) and reopen each charge: under
	// its key (--same-key), since the 401 was never the bank's final word
	// (a plain reopen of what the record calls a decline is refused).
	ledger.SetFaults(corebanksim.Faults{})
	for _, id := range ids {
		r := runCmd(ctx, env, "reopen", id, "--same-key", "--reason", "INC-4711: gateway token renewed")
		if r.code != 0 || !strings.Contains(r.stdout, "reopened "+id) || !strings.Contains(r.stdout, "redrive --charge-id "+id) {
			t.Fatalf("reopen %s: %d %s %s", id, r.code, r.stdout, r.stderr)
		}
		var audit map[string]any
		if err := json.Unmarshal([]byte(strings.TrimSpace(r.stderr)), &audit); err != nil || audit["audit"] != true ||
			audit["charge_id"] != id || audit["previous_status"] != "FAILED" || audit["reason"] != "INC-4711: gateway token renewed" {
			t.Fatalf("audit line %q (%v)", r.stderr, err)
		}
	}
	if r := runCmd(ctx, env, "reopen", ids[0], "--reason", "twice"); r.code != 1 || !strings.Contains(r.stderr, "not FAILED") {
		t.Fatalf("reopening a reopened charge: %d %s", r.code, r.stderr)
	}
	if r := runCmd(ctx, env, "reopen", ids[0]); r.code != 2 || !strings.Contains(r.stderr, "--reason is required") {
		t.Fatalf("reopen without a reason: %d %s", r.code, r.stderr)
	}

	// 3. Redrive the dead-lettered messages; the fixed consumer debits each once.
	r := runCmd(ctx, env, "redrive", "--reason", "debit_failed", "--json")
	var rep queue.RedriveReport
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &rep) != nil || rep.Moved != len(ids) {
		t.Fatalf("redrive: %d %s %s", r.code, r.stdout, r.stderr)
	}
	serveUntil(t, env, nil, all(driver.StateDone))
	posted := ledger.PostingsByKey()
	for _, id := range ids {
		if posted[id] != 1 {
			t.Errorf("%s posted %d times, want 1", id, posted[id])
		}
		rec, err := b.Store.Get(ctx, id, time.Now())
		if err != nil || rec.State != driver.StateDone || rec.Reopens != 1 || rec.PrevStatus != "FAILED" ||
			!strings.Contains(rec.PrevDetail, "UNAUTHORIZED") || rec.ReopenReason != "INC-4711: gateway token renewed" || rec.Attempt != 2 {
			t.Errorf("%s: record %+v (%v), want DONE with the reopening's audit trail", id, rec, err)
		}
	}
	if r := runCmd(ctx, env, "inspect", ids[0]); r.code != 0 || !strings.Contains(r.stdout, "reopened") || !strings.Contains(r.stdout, "INC-4711") {
		t.Fatalf("inspect: %s %s", r.stdout, r.stderr)
	}
	if r := runCmd(ctx, env, "reopen", ids[0], "--reason", "again"); r.code != 1 || !strings.Contains(r.stderr, "is DONE") {
		t.Fatalf("reopening a DONE charge: %d %s", r.code, r.stderr)
	}
}

// withBank points env at a bank serving ledger (a poll wait of 1 s,
// visibility and lease 3 s, an ephemeral health port, JSON logs, and
// extra on top) and opens its backend.
func withBank(t *testing.T, env map[string]string, ledger *corebanksim.Ledger, extra map[string]string) *backend.Backend {
	t.Helper()
	for k, v := range map[string]string{"IC_COREBANK_URL": simBank(t, ledger), "IC_POLL_WAIT": "1s", "IC_VISIBILITY": "3s",
		"IC_LEASE": "3s", "IC_HTTP_ADDR": "127.0.0.1:0", "IC_LOG_FORMAT": "json"} {
		env[k] = v
	}
	for k, v := range extra {
		env[k] = v
	}
	return openBackend(t, env)
}

// serveUntil runs serve (in process) with extra flags until done holds,
// then stops it; serve must exit 0.
func serveUntil(t *testing.T, env map[string]string, extra []string, done func() bool) {
	t.Helper()
	sctx, stop := context.WithCancel(t.Context())
	out := make(chan result, 1)
	go func() { out <- runCmd(sctx, env, append([]string{"serve"}, extra...)...) }()
	deadline := time.Now().Add(60 * time.Second)
	for !done() {
		if time.Now().After(deadline) {
			stop()
			t.Fatalf("serve did not get there: %s", (<-out).stderr)
		}
		time.Sleep(100 * time.Millisecond)
	}
	stop()
	if r := <-out; r.code != 0 {
		t.Fatalf("serve exited %d: %s", r.code, r.stderr)
	}
}

func TestReopenOnTheEmbeddedBackend(t *testing.T) {
	t.Parallel()
	reopenScenario(t, map[string]string{"IC_BACKEND": "embedded", "IC_DB": filepath.Join(t.TempDir(), "reopen.db")})
}

func TestReopenOnPostgreSQL(t *testing.T) {
	t.Parallel()
	reopenScenario(t, pgEnv(t))
}

func TestReopenWithTheRedisStore(t *testing.T) {
	t.Parallel()
	reopenScenario(t, redisEnv(t, filepath.Join(t.TempDir(), "reopen.db")))
}

func TestReopenOnAWS(t *testing.T) {
	emulatorInParallel(t)
	reopenScenario(t, awsSetup(t, "reopen", "--visibility", "3s"))
}

// retriedDeclineScenario: a charge declined for INSUFFICIENT_FUNDS; the
// funds arrive. A plain reopen is refused; forced under the same key
// (--same-key) the bank replays its final decline (FAILED again, never
// posted); reopened with --new-attempt it is
// posted once under <id>~2, and the record keeps both generations'
// outcomes.
func retriedDeclineScenario(t *testing.T, env map[string]string) {
	const acct = "001234567899"
	ledger := corebanksim.NewLedger(corebanksim.Faults{DeclineAccounts: map[string]string{acct: "INSUFFICIENT_FUNDS"}})
	b := withBank(t, env, ledger, map[string]string{"IC_COREBANK_ENQUIRY": "true"})
	ctx := t.Context()
	id := "CHG/2026/11/" + backend.RandomID() // an id with '/', as billing systems make them
	if r := runCmd(ctx, env, "send", "--charge-id", id, "--account", acct, "--amount-minor", "2500"); r.code != 0 {
		t.Fatalf("send: %s", r.stderr)
	}
	failedAgain := func(reopens int) func() bool {
		return func() bool {
			rec, err := b.Store.Get(ctx, id, time.Now())
			d, derr := b.Queue.Depth(ctx)
			return err == nil && rec.State == driver.StateFailed && rec.Reopens == reopens && derr == nil && d.Waiting+d.InFlight == 0 && d.DLQ == 1
		}
	}
	serve := func(done func() bool) { t.Helper(); serveUntil(t, env, nil, done) }
	redrive := func() {
		t.Helper()
		if r := runCmd(ctx, env, "redrive", "--reason", "debit_failed"); r.code != 0 {
			t.Fatalf("redrive: %s %s", r.stdout, r.stderr)
		}
	}

	// 1. Declined: FAILED, dead-lettered, nothing posted.
	serve(failedAgain(0))
	ledger.SetFaults(corebanksim.Faults{}) // the funds arrive

	// 2. A plain reopen is refused, with the command that would help: under
	// the same key the bank replays its final answer. --same-key forces it,
	// and the bank does replay it.
	r := runCmd(ctx, env, "reopen", id, "--reason", "funds arrived")
	if want := "use: chargerecovery reopen --new-attempt --reason \"funds arrived\" " + id; r.code != exitFailed ||
		!strings.Contains(r.stderr, "was declined by the bank") || !strings.Contains(r.stderr, want) {
		t.Fatalf("plain reopen of a decline: %d %s, want exit 1 saying %q", r.code, r.stderr, want)
	}
	if rec, err := b.Store.Get(ctx, id, time.Now()); err != nil || rec.State != driver.StateFailed || rec.Reopens != 0 {
		t.Fatalf("a refused reopen changed the record: %+v %v", rec, err)
	}
	if r := runCmd(ctx, env, "reopen", id, "--same-key", "--reason", "funds arrived"); r.code != 0 {
		t.Fatalf("reopen --same-key: %s", r.stderr)
	}
	redrive()
	serve(failedAgain(1))
	if n := len(ledger.Entries()); n != 0 {
		t.Fatalf("%d postings under the declined key", n)
	}

	// 3. --new-attempt: the next generation's key, posted once.
	r = runCmd(ctx, env, "reopen", id, "--new-attempt", "--reason", "INC-9: funds arrived")
	if r.code != 0 || !strings.Contains(r.stdout, "bank key "+id+"~2") {
		t.Fatalf("reopen --new-attempt: %d %s %s", r.code, r.stdout, r.stderr)
	}
	redrive()
	serve(func() bool {
		rec, err := b.Store.Get(ctx, id, time.Now())
		d, derr := b.Queue.Depth(ctx)
		return err == nil && rec.State == driver.StateDone && derr == nil && d.Waiting+d.InFlight == 0
	})
	posted := ledger.PostingsByKey()
	if len(posted) != 1 || posted[id+"~2"] != 1 {
		t.Fatalf("postings %v, want exactly one, under %s~2", posted, id)
	}
	rec, err := b.Store.Get(ctx, id, time.Now())
	if err != nil || rec.Generation != 2 || len(rec.History) != 2 || rec.Reopens != 2 ||
		!strings.Contains(rec.History[0], "generation 1: FAILED debit declined: INSUFFICIENT_FUNDS") ||
		!strings.Contains(rec.History[1], "generation 1: FAILED debit declined: INSUFFICIENT_FUNDS") ||
		!strings.Contains(rec.History[1], "new generation 2") || rec.Detail != ledger.Entries()[0].Reference {
		t.Fatalf("record %+v (%v), want DONE in generation 2 with both reopenings in its history", rec, err)
	}
	if r := runCmd(ctx, env, "inspect", id); r.code != 0 || !strings.Contains(r.stdout, "generation") || !strings.Contains(r.stdout, "INC-9") {
		t.Fatalf("inspect: %s %s", r.stdout, r.stderr)
	}
	if r := runCmd(ctx, env, "reopen", id, "--new-attempt", "--reason", "again"); r.code != 1 || !strings.Contains(r.stderr, "not FAILED") {
		t.Fatalf("--new-attempt on a DONE charge: %d %s", r.code, r.stderr)
	}
}

func TestRetriedDeclineOnTheEmbeddedBackend(t *testing.T) {
	t.Parallel()
	retriedDeclineScenario(t, map[string]string{"IC_BACKEND": "embedded", "IC_DB": filepath.Join(t.TempDir(), "decline.db")})
}

func TestRetriedDeclineOnAWS(t *testing.T) {
	emulatorInParallel(t)
	retriedDeclineScenario(t, awsSetup(t, "decline", "--visibility", "3s"))
}
