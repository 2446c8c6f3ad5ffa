package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/finedge/idempotent-consumer/app/corebanksim"
	"github.com/finedge/idempotent-consumer/awssqs"
	"github.com/finedge/idempotent-consumer/internal/awstest"
	"github.com/finedge/idempotent-consumer/internal/dbtest"
	"github.com/finedge/idempotent-consumer/postgres"
	"github.com/finedge/idempotent-consumer/postgres/pgtest"
	"github.com/finedge/idempotent-consumer/queue"
)

// sqsDLQ is the DLQ of an awsSetup environment, filled by the test.
type sqsDLQ struct {
	c   *sqs.Client
	url string
}

// fillSQSDLQ dead-letters n declined charges CHG-SQSDLQ-00… onto env's
// DLQ, as the consumer does (body plus the dead-letter attributes).
func fillSQSDLQ(t *testing.T, env map[string]string, n int) sqsDLQ {
	t.Helper()
	c := sqs.NewFromConfig(awstest.Config(t))
	url, err := awssqs.QueueURL(t.Context(), c, env["IC_DLQ"])
	if err != nil {
		t.Fatal(err)
	}
	for start := 0; start < n; start += 10 {
		var entries []types.SendMessageBatchRequestEntry
		for i := start; i < min(start+10, n); i++ {
			attrs := map[string]types.MessageAttributeValue{}
			for k, v := range queue.DeadLetterAttributes(queue.Message{ID: fmt.Sprintf("src-%d", i), ReceiveCount: 1},
				queue.Reason{Code: "debit_failed", Detail: "debit declined: INSUFFICIENT_FUNDS"}, 10) {
				attrs[k] = types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(v)}
			}
			body := fmt.Sprintf(`{"schemaVersion":1,"chargeId":"CHG-SQSDLQ-%02d","accountId":"001234567890","amount":{"minor":2500,"currency":"INR"},"chargeType":"SMS_ALERT_FEE","dueDate":"2026-12-01"}`, i)
			entries = append(entries, types.SendMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), MessageBody: aws.String(body), MessageAttributes: attrs})
		}
		if _, err := c.SendMessageBatch(t.Context(), &sqs.SendMessageBatchInput{QueueUrl: aws.String(url), Entries: entries}); err != nil {
			t.Fatal(err)
		}
	}
	d := sqsDLQ{c: c, url: url}
	d.wantAllVisible(t, "filled", n)
	return d
}

// wantAllVisible: the DLQ holds n messages, every one visible (the
// emulator's counts are exact).
func (d sqsDLQ) wantAllVisible(t *testing.T, after string, n int) {
	t.Helper()
	out, err := d.c.GetQueueAttributes(t.Context(), &sqs.GetQueueAttributesInput{QueueUrl: aws.String(d.url),
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameApproximateNumberOfMessages, types.QueueAttributeNameApproximateNumberOfMessagesNotVisible}})
	if err != nil {
		t.Fatal(err)
	}
	v, inv := out.Attributes[string(types.QueueAttributeNameApproximateNumberOfMessages)], out.Attributes[string(types.QueueAttributeNameApproximateNumberOfMessagesNotVisible)]
	if v != strconv.Itoa(n) || inv != "0" {
		t.Fatalf("after %s: the DLQ shows %s visible, %s not visible; want %d visible, 0 not visible", after, v, inv, n)
	}
}

// dlqTotal is the total of a dlq list --json, or the test ends.
func dlqTotal(t *testing.T, r result) int {
	t.Helper()
	var out struct {
		Total  int `json:"total"`
		Unseen int `json:"unseen"`
	}
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &out) != nil || out.Unseen != 0 {
		t.Fatalf("dlq list: exit %d, %q %s", r.code, r.stdout, r.stderr)
	}
	return out.Total
}

// Reading the SQS DLQ never hides it (issue 35 item 3): two dlq list at
// once both see every entry (25: more than one receive brings); dlq show
// right after a list, and during one, finds its entry; every DLQ message
// is visible the moment a list returns; a redrive right after a list moves
// them all.
func TestSQSDLQReadersNeverHideItFromEachOther(t *testing.T) {
	emulatorInParallel(t)
	env := awsSetup(t, "dlqread")
	const n = 25
	dlq := fillSQSDLQ(t, env, n)

	lists := make(chan result, 2)
	for range 2 {
		go func() { lists <- runCmd(t.Context(), env, "dlq", "list", "--json") }()
	}
	for range 2 {
		if got := dlqTotal(t, <-lists); got != n {
			t.Errorf("one of two concurrent dlq list saw %d entries, want %d", got, n)
		}
	}
	dlq.wantAllVisible(t, "two dlq list", n)

	if r := runCmd(t.Context(), env, "dlq", "list"); r.code != 0 || !strings.HasPrefix(r.stdout, fmt.Sprintf("%d DLQ entries", n)) {
		t.Fatalf("dlq list: exit %d, %q %s", r.code, r.stdout, r.stderr)
	}
	for _, id := range []string{"CHG-SQSDLQ-00", "CHG-SQSDLQ-24"} {
		if r := runCmd(t.Context(), env, "dlq", "show", id); r.code != 0 || !strings.Contains(r.stdout, id) {
			t.Errorf("dlq show %s right after a list: exit %d, %q %s", id, r.code, r.stdout, r.stderr)
		}
	}
	dlq.wantAllVisible(t, "dlq show", n)

	// A show while another operator lists.
	list := make(chan result, 1)
	go func() { list <- runCmd(t.Context(), env, "dlq", "list", "--json") }()
	if r := runCmd(t.Context(), env, "dlq", "show", "--json", "CHG-SQSDLQ-03"); r.code != 0 || !strings.Contains(r.stdout, `"chargeId":"CHG-SQSDLQ-03"`) {
		t.Errorf("dlq show during a list: exit %d, %q %s", r.code, r.stdout, r.stderr)
	}
	if got := dlqTotal(t, <-list); got != n {
		t.Errorf("dlq list during a show saw %d entries, want %d", got, n)
	}
	if r := runCmd(t.Context(), env, "status", "--metrics-url", ""); r.code != 0 || !strings.Contains(r.stdout, fmt.Sprintf("dlq       %d (debit_failed %d) (approximate)", n, n)) {
		t.Errorf("status: exit %d, %q %s", r.code, r.stdout, r.stderr)
	}
	dlq.wantAllVisible(t, "a list, a show and status", n)

	r := runCmd(t.Context(), env, "redrive", "--reason", "debit_failed", "--operator", "tester")
	if r.code != 0 || !strings.Contains(r.stdout, fmt.Sprintf("DLQ entries seen: %d; moved back to the queue: %d;", n, n)) {
		t.Fatalf("redrive right after a list: exit %d, %q %s", r.code, r.stdout, r.stderr)
	}
	dlq.wantAllVisible(t, "the redrive", 0)
}

// A list or redrive that cannot see every DLQ message (another reader
// holds some for longer than it waits) says so and exits 1, never a quiet
// short count. The holder here is a raw receive with a 10-minute
// visibility; the scan waits its full minute, so this test takes one.
func TestSQSDLQReadShortOfTheDLQExitsOneSayingHowManyItMissed(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out a scan's minute")
	}
	emulatorInParallel(t)
	env := awsSetup(t, "dlqshort")
	dlq := fillSQSDLQ(t, env, 12)
	if out, err := dlq.c.ReceiveMessage(t.Context(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(dlq.url), MaxNumberOfMessages: 2, VisibilityTimeout: 600}); err != nil || len(out.Messages) != 2 {
		t.Fatalf("hold 2: %v", err)
	}
	for _, args := range [][]string{
		{"dlq", "list"},
		{"redrive", "--operator", "tester"},
	} {
		r := runCmd(t.Context(), env, args...)
		if r.code != exitFailed || !strings.Contains(r.stderr, "about 2 DLQ message(s) could not be seen") || !strings.Contains(r.stderr, "approximate") {
			t.Errorf("%v with 2 held elsewhere: exit %d, %q %s", args, r.code, r.stdout, r.stderr)
		}
		if args[0] == "redrive" && !strings.Contains(r.stdout, "DLQ entries seen: 10; moved back to the queue: 10;") {
			t.Errorf("redrive with 2 held elsewhere: %q, want the 10 it saw moved", r.stdout)
		}
	}
}

// Twenty messages over the size limit, dead-lettered as they should be,
// leave every operator command working: status counts them (it used to
// say the backend was unreachable), dlq list and show name their size and
// the way out, a forced redrive moves the good entry and names the ones it
// cannot, and dlq purge removes them (and refuses an entry that can be
// redriven, unless forced).
func TestOperatorCommandsWorkWithTooLargeEntriesOnThePostgresDLQ(t *testing.T) {
	t.Parallel()
	pgtest.Open(t) // fails in CI, skips elsewhere, when the server is not there
	schema := dbtest.Schema(t)
	env := map[string]string{"IC_BACKEND": "postgres", "IC_POSTGRES_URL": dbtest.PostgresURL(), "IC_POSTGRES_SCHEMA": schema,
		"IC_QUEUE": "charges", "IC_OPERATOR": "asha"}
	mustSetup(t, env)
	pdb, err := postgres.Open(t.Context(), dbtest.PostgresURL(), postgres.Options{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	defer pdb.Close()
	q, err := postgres.NewQueue(pdb, postgres.QueueOptions{Name: "charges", WaitTime: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	const poison = 20
	if _, err := pdb.Pool().Exec(t.Context(), `insert into queue_messages (queue, body) select 'charges', convert_to(repeat('x', $1), 'UTF8') from generate_series(1, $2)`,
		queue.MaxMessageBytes+10, poison); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Send(t.Context(), []byte(`{"not":"a charge"}`), nil); err != nil {
		t.Fatal(err)
	}
	var msgs []queue.Message
	for len(msgs) == 0 { // the receives move all 20 over the limit, and hand out the small one
		if msgs, err = q.Receive(t.Context(), 10); err != nil {
			t.Fatal(err)
		}
	}
	if err := q.DeadLetter(t.Context(), msgs[0], queue.Reason{Code: "invalid", Detail: "not a ChargeDueEvent"}); err != nil {
		t.Fatal(err)
	}

	r := runCmd(t.Context(), env, "status", "--json")
	if r.code != 0 {
		t.Fatalf("status with entries over the limit on the DLQ: exit %d, %s", r.code, r.stderr)
	}
	var st struct {
		Queue     struct{ DLQ int }
		DLQByCode map[string]int `json:"dlqByCode"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil {
		t.Fatalf("status --json: %v\n%s", err, r.stdout)
	}
	if st.DLQByCode[string(queue.CodeTooLarge)] != poison || st.DLQByCode["invalid"] != 1 {
		t.Errorf("status: DLQ by code %v, want %d too_large and 1 invalid\n%s", st.DLQByCode, poison, r.stdout)
	}

	r = runCmd(t.Context(), env, "dlq", "list", "--json")
	var list struct {
		Total   int
		Entries []dlqEntry
	}
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &list) != nil || list.Total != poison+1 {
		t.Fatalf("dlq list: exit %d, %d entries, %s", r.code, list.Total, r.stderr)
	}
	var big []string
	good := ""
	for _, e := range list.Entries {
		if e.Code == string(queue.CodeTooLarge) {
			if e.Size != queue.MaxMessageBytes+10 || !strings.Contains(e.Unreadable, "purge") {
				t.Errorf("too-large entry %s: size %d, %q; want its size and purge as the way out", e.ID, e.Size, e.Unreadable)
			}
			big = append(big, e.ID)
		} else {
			good = e.ID
		}
	}
	r = runCmd(t.Context(), env, "dlq", "show", big[0])
	if r.code != 0 || !strings.Contains(r.stdout, "bytes") || !strings.Contains(r.stdout, "dlq purge") {
		t.Errorf("dlq show of a too-large entry: exit %d, %s%s", r.code, r.stdout, r.stderr)
	}

	r = runCmd(t.Context(), env, "dlq", "purge", good)
	if r.code != exitUsage || !strings.Contains(r.stderr, "can be redriven") {
		t.Errorf("dlq purge of an entry that can be redriven: exit %d, %s", r.code, r.stderr)
	}
	r = runCmd(t.Context(), env, "redrive", "--force")
	if r.code != exitFailed || !strings.Contains(r.stderr, "20 DLQ entries were not moved") || !strings.Contains(r.stderr, big[0]) || !strings.Contains(r.stderr, "purged") {
		t.Errorf("forced redrive: exit %d, %s; want 1 naming the entries it cannot move", r.code, r.stderr)
	}
	if d, err := q.Depth(t.Context()); err != nil || d.Waiting != 1 || d.DLQ != poison {
		t.Errorf("after the forced redrive: %+v (%v): want the good entry moved and the %d others left", d, err, poison)
	}

	r = runCmd(t.Context(), env, append([]string{"dlq", "purge"}, big...)...)
	if r.code != 0 || !strings.Contains(r.stdout, "purged 20 DLQ entries") || !strings.Contains(r.stderr, `"operator":"asha"`) {
		t.Errorf("dlq purge: exit %d, %s%s", r.code, r.stdout, r.stderr)
	}
	if d, err := q.Depth(t.Context()); err != nil || d.DLQ != 0 {
		t.Errorf("after the purge: %+v (%v): want an empty DLQ", d, err)
	}
	r = runCmd(t.Context(), env, "dlq", "purge", big[0])
	if r.code != exitFailed || !strings.Contains(r.stderr, "no DLQ entry with id "+big[0]) {
		t.Errorf("purge of an entry already gone: exit %d, %s", r.code, r.stderr)
	}
}

// serve on a DynamoDB table that DescribeTable reports with replicas in two
// Regions (awstest.GlobalTable: moto 5.2 keeps no replicas), the process in
// us-east-1: refused (exit 2, before any claim) unless told the mode the
// table runs in, and started when the mode fits.
func TestServeRefusesAMultiRegionTableUnlessToldItsMode(t *testing.T) {
	useEmulator(t)
	bank := httptest.NewServer(corebanksim.Handler(corebanksim.NewLedger(corebanksim.Faults{})))
	defer bank.Close()
	name := awstest.Name("cmd-mr")
	env := map[string]string{
		"IC_BACKEND": "aws", "IC_QUEUE": name, "IC_DLQ": name + "-dlq", "IC_TABLE": name,
		"IC_COREBANK_URL": bank.URL, "IC_POLL_WAIT": "1s", "IC_LOG_FORMAT": "text", "IC_HTTP_ADDR": "127.0.0.1:0",
	}
	mustSetup(t, env)

	global := []string{"us-east-1", "us-west-2"}
	tests := []struct {
		name        string
		consistency string
		replicas    []string // nil: moto's own answer (single-Region)
		args        []string
		says        []string // nil: serve starts
	}{
		{"single-Region table, no flag", "", nil, nil, nil},
		{"global table, no flag", "EVENTUAL", global, nil,
			[]string{"replicas in us-east-1, us-west-2", "MultiRegionConsistency EVENTUAL", "set --dynamodb-multi-region strong"}},
		{"strong on a strong table", "STRONG", global, []string{"--dynamodb-multi-region", "strong"}, nil},
		{"strong on an EVENTUAL table", "EVENTUAL", global, []string{"--dynamodb-multi-region", "strong"},
			[]string{"strong consistency was named", "MultiRegionConsistency EVENTUAL", "convert the table"}},
		{"single-writer in the writer Region", "EVENTUAL", global,
			[]string{"--dynamodb-multi-region", "single-writer", "--dynamodb-writer-region", "us-east-1"}, nil},
		{"single-writer in another Region", "EVENTUAL", global,
			[]string{"--dynamodb-multi-region", "single-writer", "--dynamodb-writer-region", "us-west-2"},
			[]string{"written from Region us-west-2 only", "this process is in us-east-1", "run serve only in us-west-2", "--dynamodb-writer-region"}},
		{"an unknown mode", "", nil, []string{"--dynamodb-multi-region", "eventual"},
			[]string{`--dynamodb-multi-region (IC_DYNAMODB_MULTI_REGION) "eventual" is not strong or single-writer`}},
		{"single-writer without its Region", "", nil, []string{"--dynamodb-multi-region", "single-writer"},
			[]string{"--dynamodb-writer-region (IC_DYNAMODB_WRITER_REGION) must name"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.replicas != nil {
				t.Setenv("AWS_ENDPOINT_URL", awstest.GlobalTable(t, tt.consistency, tt.replicas...))
			}
			ctx, stop := context.WithTimeout(t.Context(), 30*time.Second)
			defer stop()
			if tt.says != nil {
				r := runCmd(ctx, env, append([]string{"serve"}, tt.args...)...)
				t.Logf("serve said: %s", r.stderr)
				if r.code != exitUsage {
					t.Fatalf("serve exited %d, want %d: %s", r.code, exitUsage, r.stderr)
				}
				for _, s := range tt.says {
					if !strings.Contains(r.stderr, s) {
						t.Errorf("stderr does not say %q: %s", s, r.stderr)
					}
				}
				if strings.Contains(r.stderr, "consumer starting") {
					t.Errorf("serve started: %s", r.stderr)
				}
				return
			}
			errb, done := startCmd(ctx, env, append([]string{"serve"}, tt.args...)...)
			for !strings.Contains(errb.String(), "consumer starting") {
				select {
				case code := <-done:
					t.Fatalf("serve exited %d before starting: %s", code, errb)
				case <-time.After(50 * time.Millisecond):
				}
			}
			stop() // what SIGTERM does
			if code := <-done; code != exitOK {
				t.Fatalf("serve exited %d: %s", code, errb)
			}
		})
	}
}
