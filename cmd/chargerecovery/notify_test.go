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
	"github.com/finedge/idempotent-consumer/idempotency/driver"
	"github.com/finedge/idempotent-consumer/internal/awstest"
	"github.com/finedge/idempotent-consumer/queue"
)

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
