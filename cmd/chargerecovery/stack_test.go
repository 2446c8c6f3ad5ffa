package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/cloudformation"
	cftypes "github.com/aws/aws-sdk-go-v2/service/cloudformation/types"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/sns"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/finedge/idempotent-consumer/app/corebanksim"
	"github.com/finedge/idempotent-consumer/awsdynamodb"
	"github.com/finedge/idempotent-consumer/internal/awstest"
	"github.com/finedge/idempotent-consumer/internal/logbuf"
	"github.com/finedge/idempotent-consumer/internal/testenv"
)

const stackFile = "../../deploy/aws/stack.json"

// template is the part of deploy/aws/stack.json the tests read.
type template struct {
	Resources map[string]struct {
		Type       string          `json:"Type"`
		Properties json.RawMessage `json:"Properties"`
	} `json:"Resources"`
	Outputs map[string]json.RawMessage `json:"Outputs"`
}

type policyStatement struct {
	Sid    string   `json:"Sid"`
	Action []string `json:"Action"`
}

func readStack(t *testing.T) (template, []byte) {
	t.Helper()
	raw, err := os.ReadFile(stackFile)
	if err != nil {
		t.Fatal(err)
	}
	var tm template
	dec := json.NewDecoder(bytes.NewReader(raw))
	if err := dec.Decode(&tm); err != nil {
		t.Fatalf("%s: %v", stackFile, err)
	}
	return tm, raw
}

// consumerPolicy is the stack's ConsumerPolicy statements.
func consumerPolicy(t *testing.T, tm template) []policyStatement {
	t.Helper()
	var p struct {
		PolicyDocument struct {
			Statement []policyStatement `json:"Statement"`
		} `json:"PolicyDocument"`
	}
	if err := json.Unmarshal(tm.Resources["ConsumerPolicy"].Properties, &p); err != nil || len(p.PolicyDocument.Statement) == 0 {
		t.Fatalf("ConsumerPolicy: %v", err)
	}
	return p.PolicyDocument.Statement
}

// What the stack promises that the emulator does not apply from a template
// (moto creates no CloudWatch alarms and ignores TTL and point-in-time
// recovery in CloudFormation): checked in the template itself.
func TestTheAWSStackDeclaresWhatProductionNeeds(t *testing.T) {
	tm, _ := readStack(t)
	var table struct {
		BillingMode             string
		KeySchema               []struct{ AttributeName, KeyType string }
		TimeToLiveSpecification struct {
			AttributeName string
			Enabled       bool
		}
		PointInTimeRecoverySpecification struct{ PointInTimeRecoveryEnabled bool }
	}
	if err := json.Unmarshal(tm.Resources["Table"].Properties, &table); err != nil {
		t.Fatal(err)
	}
	if table.BillingMode != "PAY_PER_REQUEST" || len(table.KeySchema) != 1 || table.KeySchema[0].AttributeName != "pk" ||
		table.TimeToLiveSpecification.AttributeName != awsdynamodb.AttrTTL || !table.TimeToLiveSpecification.Enabled ||
		!table.PointInTimeRecoverySpecification.PointInTimeRecoveryEnabled {
		t.Errorf("table: %+v, want on-demand, key pk, TTL on %q, point-in-time recovery", table, awsdynamodb.AttrTTL)
	}
	alarms := map[string]bool{}
	for name, r := range tm.Resources {
		if r.Type != "AWS::CloudWatch::Alarm" {
			continue
		}
		var a struct{ MetricName, Namespace string }
		if err := json.Unmarshal(r.Properties, &a); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		alarms[a.Namespace+"/"+a.MetricName] = true
	}
	for _, want := range []string{"AWS/SQS/ApproximateNumberOfMessagesVisible", "AWS/SQS/ApproximateAgeOfOldestMessage"} {
		if !alarms[want] {
			t.Errorf("no alarm on %s (alarms: %v)", want, alarms)
		}
	}
}

// docs/operations/aws.md shows the consumer's IAM policy; it must be the stack's,
// statement by statement (the stack is the one source).
func TestOperationsShowsTheStacksIAMPolicy(t *testing.T) {
	tm, _ := readStack(t)
	want := consumerPolicy(t, tm)
	doc, err := os.ReadFile("../../docs/operations/aws.md")
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(doc), "Least-privilege IAM policy for `serve`")
	if !ok {
		t.Fatal("docs/operations/aws.md has no least-privilege policy for serve")
	}
	_, block, _ := strings.Cut(after, "```json\n")
	block, _, _ = strings.Cut(block, "```")
	var shown struct{ Statement []policyStatement }
	if err := json.Unmarshal([]byte(block), &shown); err != nil {
		t.Fatalf("docs/operations/aws.md's policy is not JSON: %v", err)
	}
	if len(shown.Statement) != len(want) {
		t.Fatalf("docs/operations/aws.md shows %d statements, the stack has %d", len(shown.Statement), len(want))
	}
	for i := range want {
		a, b := slices.Sorted(slices.Values(shown.Statement[i].Action)), slices.Sorted(slices.Values(want[i].Action))
		if !slices.Equal(a, b) {
			t.Errorf("statement %d (%s): docs/operations/aws.md allows %v, the stack %v", i, want[i].Sid, a, b)
		}
	}
}

// actionRecorder is a reverse proxy in front of the emulator that records
// the IAM action of every request (service from the signature's scope,
// operation from X-Amz-Target or the form's Action), while on.
type actionRecorder struct {
	*httptest.Server
	mu      sync.Mutex
	on      bool
	actions map[string]int
}

var batchAction = map[string]string{
	"sqs:DeleteMessageBatch": "sqs:DeleteMessage", "sqs:ChangeMessageVisibilityBatch": "sqs:ChangeMessageVisibility",
	"sqs:SendMessageBatch": "sqs:SendMessage",
}

func newActionRecorder(t *testing.T, target string) *actionRecorder {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	r := &actionRecorder{actions: map[string]int{}}
	proxy := httputil.NewSingleHostReverseProxy(u)
	proxy.ErrorLog = log.New(io.Discard, "", 0) // a request cut by serve's shutdown
	scope := regexp.MustCompile(`Credential=[^/]+/[^/]+/[^/]+/([a-z0-9-]+)/aws4_request`)
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		req.Body = io.NopCloser(bytes.NewReader(body))
		service, op := "", ""
		if m := scope.FindStringSubmatch(req.Header.Get("Authorization")); m != nil {
			service = m[1]
		}
		if target := req.Header.Get("X-Amz-Target"); target != "" {
			_, op, _ = strings.Cut(target, ".")
		} else if form, err := url.ParseQuery(string(body)); err == nil {
			op = form.Get("Action")
		}
		if service != "" && op != "" {
			action := service + ":" + op
			if a, ok := batchAction[action]; ok {
				action = a
			}
			r.mu.Lock()
			if r.on {
				r.actions[action]++
			}
			r.mu.Unlock()
		}
		proxy.ServeHTTP(w, req)
	}))
	t.Cleanup(r.Close)
	return r
}

func (r *actionRecorder) record(on bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.on = on
}

// The stack deploys on the emulator, serve runs on its outputs alone
// (queue and DLQ URLs, table, topic) and debits every charge once, every
// AWS call serve made is allowed by the stack's ConsumerPolicy, the demo
// passes on the same resources, and deleting the stack removes the queues,
// the table and the topic.
func TestTheAWSStackDeploysServesAndDeletes(t *testing.T) {
	useEmulator(t)
	cfg := awstest.Config(t)
	ctx := t.Context()
	tm, raw := readStack(t)
	cf := cloudformation.NewFromConfig(cfg)
	name := awstest.Name("stack")
	param := func(k, v string) cftypes.Parameter {
		return cftypes.Parameter{ParameterKey: aws.String(k), ParameterValue: aws.String(v)}
	}
	if _, err := cf.CreateStack(ctx, &cloudformation.CreateStackInput{
		StackName: aws.String(name), TemplateBody: aws.String(string(raw)),
		Capabilities: []cftypes.Capability{cftypes.CapabilityCapabilityNamedIam},
		Parameters: []cftypes.Parameter{param("QueueName", name), param("TableName", name), param("TopicName", name),
			param("VisibilityTimeout", "5"), param("MaxReceiveCount", "4"), param("DeletionProtection", "false")},
	}); err != nil {
		t.Fatalf("create stack: %v", err)
	}
	deleted := false
	t.Cleanup(func() {
		if !deleted {
			_, _ = cf.DeleteStack(t.Context(), &cloudformation.DeleteStackInput{StackName: aws.String(name)})
		}
	})
	stack := waitStack(t, cf, name, cftypes.StackStatusCreateComplete)
	out := map[string]string{}
	for _, o := range stack.Outputs {
		out[aws.ToString(o.OutputKey)] = aws.ToString(o.OutputValue)
	}
	for k := range tm.Outputs {
		if out[k] == "" {
			t.Fatalf("stack output %s is empty (outputs %v)", k, out)
		}
	}

	// The queue pair as serve expects it.
	sq := sqs.NewFromConfig(cfg)
	attrs, err := sq.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(out["QueueUrl"]),
		AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameAll}})
	if err != nil {
		t.Fatal(err)
	}
	dlqAttrs, err := sq.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(out["DeadLetterQueueUrl"]),
		AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameAll}})
	if err != nil {
		t.Fatal(err)
	}
	var redrive struct {
		DeadLetterTargetArn string `json:"deadLetterTargetArn"`
		MaxReceiveCount     any    `json:"maxReceiveCount"`
	}
	_ = json.Unmarshal([]byte(attrs.Attributes["RedrivePolicy"]), &redrive)
	if redrive.DeadLetterTargetArn != dlqAttrs.Attributes["QueueArn"] || attrs.Attributes["VisibilityTimeout"] != "5" ||
		dlqAttrs.Attributes["MessageRetentionPeriod"] != "1209600" {
		t.Errorf("queue %v, DLQ %v: want a redrive policy to the DLQ, visibility 5 s, DLQ retention 14 days", attrs.Attributes, dlqAttrs.Attributes)
	}
	ddb := dynamodb.NewFromConfig(cfg)
	desc, err := ddb.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(out["TableName"])})
	if err != nil {
		t.Fatal(err)
	}
	if ks := desc.Table.KeySchema; len(ks) != 1 || aws.ToString(ks[0].AttributeName) != "pk" || ks[0].KeyType != ddbtypes.KeyTypeHash {
		t.Errorf("table key schema %+v, want pk HASH", ks)
	}
	// The sparse index the console's listings and counts query (awsdynamodb.IndexName).
	gsi := desc.Table.GlobalSecondaryIndexes
	if len(gsi) != 1 || aws.ToString(gsi[0].IndexName) != awsdynamodb.IndexName || len(gsi[0].KeySchema) != 2 ||
		aws.ToString(gsi[0].KeySchema[0].AttributeName) != "listState" || gsi[0].KeySchema[0].KeyType != ddbtypes.KeyTypeHash ||
		aws.ToString(gsi[0].KeySchema[1].AttributeName) != "pk" || gsi[0].KeySchema[1].KeyType != ddbtypes.KeyTypeRange ||
		gsi[0].Projection == nil || gsi[0].Projection.ProjectionType != ddbtypes.ProjectionTypeAll {
		t.Errorf("table indexes %+v, want %s: listState HASH, pk RANGE, all attributes", gsi, awsdynamodb.IndexName)
	}

	// serve on the outputs, every call recorded.
	rec := newActionRecorder(t, os.Getenv(awstest.EndpointEnv))
	t.Setenv("AWS_ENDPOINT_URL", rec.URL)
	ledger := corebanksim.NewLedger(corebanksim.Faults{})
	bank := httptest.NewServer(corebanksim.Handler(ledger))
	defer bank.Close()
	env := map[string]string{
		"IC_BACKEND": "aws", "IC_QUEUE": out["QueueUrl"], "IC_DLQ": out["DeadLetterQueueUrl"], "IC_TABLE": out["TableName"],
		"IC_NOTIFY": "sns", "IC_NOTIFY_SNS_TOPIC": out["TopicArn"],
		"IC_COREBANK_URL": bank.URL, "IC_POLL_WAIT": "1s", "IC_LOG_FORMAT": "text", "IC_HTTP_ADDR": "127.0.0.1:0",
	}
	const charges = 4
	for i := range charges {
		id := "CHG-STACK-" + string(rune('A'+i))
		if r := runCmd(ctx, env, "send", "--charge-id", id, "--account", "001234567890", "--amount-minor", "2500", "--copies", "2"); r.code != 0 {
			t.Fatalf("send: %d %s", r.code, r.stderr)
		}
	}
	bad := filepath.Join(t.TempDir(), "bad.json")
	if err := os.WriteFile(bad, []byte(`{"chargeId":"CHG-STACK-BAD","amount":"a lot"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if r := runCmd(ctx, env, "send", "--body-file", bad); r.code != 0 {
		t.Fatalf("send --body-file: %d %s", r.code, r.stderr)
	}
	rec.record(true)
	sctx, stop := context.WithCancel(ctx)
	done := make(chan result, 1)
	go func() {
		done <- runCmd(sctx, env, "serve", "--visibility", "5s", "--lease", "5s", "--concurrency", "4", "--depth-interval", "1s")
	}()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		d, err := sq.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(out["DeadLetterQueueUrl"]),
			AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameApproximateNumberOfMessages}})
		if err == nil && len(ledger.PostingsByKey()) == charges && d.Attributes["ApproximateNumberOfMessages"] == "1" {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	// The copies come back (one received while its original held the claim
	// waits out the lease) and are dropped as duplicates: the queue drains.
	for time.Now().Before(deadline) {
		q, err := sq.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(out["QueueUrl"]),
			AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameApproximateNumberOfMessages,
				sqstypes.QueueAttributeNameApproximateNumberOfMessagesNotVisible}})
		if err == nil && q.Attributes["ApproximateNumberOfMessages"] == "0" && q.Attributes["ApproximateNumberOfMessagesNotVisible"] == "0" {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	stop()
	r := <-done
	rec.record(false)
	if r.code != 0 {
		t.Fatalf("serve exited %d: %s", r.code, r.stderr)
	}
	got := ledger.PostingsByKey()
	for i := range charges {
		if id := "CHG-STACK-" + string(rune('A'+i)); got[id] != 1 {
			t.Errorf("%s posted %d times, want once (ledger %v)", id, got[id], got)
		}
	}
	if len(got) != charges {
		t.Errorf("ledger %v, want exactly the %d charges (the malformed one never debited)", got, charges)
	}

	// Every call serve made is allowed; every allowed action is one serve
	// makes (here, or only in the situation named).
	allowed := map[string]bool{}
	for _, s := range consumerPolicy(t, tm) {
		for _, a := range s.Action {
			allowed[a] = true
		}
	}
	calledOnlyWhen := map[string]string{
		"sqs:GetQueueUrl":              "--queue / --dlq are names, not URLs",
		"dynamodb:UpdateItem":          "a lease is extended (work longer than a third of the visibility) or an expired one reclaimed",
		"dynamodb:GetItem":             "a fenced write failed without the item coming back (a DynamoDB implementation that ignores ALL_OLD)",
		"dynamodb:DescribeGlobalTable": "at start, for a table with a stream and no replicas in its description (a legacy global table lists its Regions only there)",
	}
	rec.mu.Lock()
	recorded := maps.Clone(rec.actions)
	rec.mu.Unlock()
	for a := range recorded {
		if !allowed[a] {
			t.Errorf("serve called %s, which the stack's ConsumerPolicy does not allow (recorded: %v)", a, recorded)
		}
	}
	for a := range allowed {
		if recorded[a] == 0 && calledOnlyWhen[a] == "" {
			t.Errorf("the ConsumerPolicy allows %s, which serve never called (recorded: %v): drop it or say when it is called", a, recorded)
		}
	}
	for _, a := range []string{"sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:SendMessage", "dynamodb:PutItem", "sns:Publish"} {
		if recorded[a] == 0 {
			t.Errorf("serve made no %s call: the recorder is not seeing its traffic (recorded: %v)", a, recorded)
		}
	}
	t.Logf("serve's calls: %v", recorded)

	// The demo on the stack's resources as they are (created by nobody but
	// the stack, deleted by nobody but its deletion).
	if r := runCmd(ctx, map[string]string{"IC_BACKEND": "aws"}, "demo", "--existing-queue", out["QueueUrl"],
		"--existing-dlq", out["DeadLetterQueueUrl"], "--existing-table", out["TableName"]); r.code != 0 ||
		!strings.Contains(r.stdout, "OK: every charge was debited exactly once") {
		t.Fatalf("demo on the stack's outputs: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}

	// Deleting the stack removes everything it made.
	if _, err := cf.DeleteStack(ctx, &cloudformation.DeleteStackInput{StackName: aws.String(name)}); err != nil {
		t.Fatalf("delete stack: %v", err)
	}
	deleted = true
	waitStack(t, cf, name, cftypes.StackStatusDeleteComplete)
	if _, err := sq.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String(name)}); err == nil {
		t.Error("the queue is still there after the stack was deleted")
	}
	if _, err := sq.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String(name + "-dlq")}); err == nil {
		t.Error("the DLQ is still there after the stack was deleted")
	}
	var notFound *ddbtypes.ResourceNotFoundException
	if _, err := ddb.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(out["TableName"])}); !errors.As(err, &notFound) {
		t.Errorf("the table after the stack was deleted: %v, want not found", err)
	}
	if _, err := sns.NewFromConfig(cfg).GetTopicAttributes(ctx, &sns.GetTopicAttributesInput{TopicArn: aws.String(out["TopicArn"])}); err == nil {
		t.Error("the topic is still there after the stack was deleted")
	}
}

// waitStack waits for the stack to reach want and returns it.
func waitStack(t *testing.T, cf *cloudformation.Client, name string, want cftypes.StackStatus) cftypes.Stack {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	var last cftypes.Stack
	for time.Now().Before(deadline) {
		out, err := cf.DescribeStacks(t.Context(), &cloudformation.DescribeStacksInput{StackName: aws.String(name)})
		if err == nil && len(out.Stacks) == 1 {
			last = out.Stacks[0]
			if last.StackStatus == want {
				return last
			}
			if s := string(last.StackStatus); strings.HasSuffix(s, "_FAILED") || strings.Contains(s, "ROLLBACK") {
				events, _ := cf.DescribeStackEvents(t.Context(), &cloudformation.DescribeStackEventsInput{StackName: aws.String(name)})
				var why []string
				if events != nil {
					for _, e := range events.StackEvents {
						if r := aws.ToString(e.ResourceStatusReason); r != "" {
							why = append(why, aws.ToString(e.LogicalResourceId)+": "+r)
						}
					}
				}
				sort.Strings(why)
				t.Fatalf("stack %s: %s (%v)", name, last.StackStatus, why)
			}
		} else if want == cftypes.StackStatusDeleteComplete && err != nil {
			return last // a deleted stack may no longer be described
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("stack %s: still %s after 2 minutes, want %s", name, last.StackStatus, want)
	return last
}

// localProd builds chargerecovery and returns the script's path and the
// binary's, or ends the test (fails in CI) when moto is not installed.
func localProd(t *testing.T) (script, bin string) {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if err := exec.Command("bash", filepath.Join(root, "scripts/moto.sh"), "check").Run(); err != nil {
		testenv.Unreachable(t, "moto's server mode is not installed (pip install \"moto[server]\"): scripts/local-prod.sh needs it")
	}
	bin = filepath.Join(t.TempDir(), "chargerecovery")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return filepath.Join(root, "scripts/local-prod.sh"), bin
}

var pidRE = regexp.MustCompile(`\bpid (\d+)`)

// alive says whether pid is a live process (a zombie is not).
func alive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return !errors.Is(err, os.ErrNotExist)
	}
	s := string(b)
	rest := s[strings.LastIndexByte(s, ')')+1:]
	return !strings.HasPrefix(strings.TrimSpace(rest), "Z")
}

func gone(t *testing.T, what string, pids []int) {
	t.Helper()
	if len(pids) != 4 {
		t.Fatalf("%s: the script named %d processes (%v), want 4: moto, corebank, serve, console", what, len(pids), pids)
	}
	waitUntil(t, what+": every process gone", 20*time.Second, func() bool {
		for _, p := range pids {
			if alive(p) {
				return false
			}
		}
		return true
	})
}

// startLocalProd runs the script until it says what is running; it
// returns the process, the pids it named, and its output so far.
func startLocalProd(t *testing.T, script, bin, dir string, args ...string) (*exec.Cmd, []int, *logbuf.Buffer) {
	t.Helper()
	cmd := exec.Command("bash", append([]string{script, "--bin", bin, "--dir", dir}, args...)...)
	cmd.Env = append(os.Environ(), "IC_AWS_TEST_ENDPOINT=", "AWS_ENDPOINT_URL=")
	var out logbuf.Buffer
	cmd.Stderr = &out
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_, _ = cmd.Process.Wait()
		}
		_ = exec.Command("bash", script, "--stop", "--dir", dir).Run()
	})
	var pids []int
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		line := sc.Text()
		out.Write([]byte(line + "\n"))
		if m := pidRE.FindStringSubmatch(line); m != nil {
			n, _ := strconv.Atoi(m[1])
			pids = append(pids, n)
		}
		if strings.HasPrefix(line, "logs: ") {
			break
		}
	}
	go func() {
		var rest bytes.Buffer
		_, _ = rest.ReadFrom(stdout)
		out.Write(rest.Bytes())
	}()
	return cmd, pids, &out
}

// The whole local production in one command: --smoke starts moto, the
// bank over mutual TLS + OAuth2, serve and the console, sends a charge 3
// times, sees one debit in corebank ledger, and stops them all; SIGTERM
// stops them all; after a SIGKILL (no trap runs) --stop does, and a second
// copy on the same directory is refused meanwhile.
func TestLocalProdStartsEverythingDebitsOnceAndLeavesNothing(t *testing.T) {
	script, bin := localProd(t)
	dir := t.TempDir()

	cmd, pids, out := startLocalProd(t, script, bin, filepath.Join(dir, "smoke"), "--smoke")
	err := cmd.Wait()
	if err != nil || !strings.Contains(out.String(), "sent 3 times, debited once") || !strings.Contains(out.String(), "1 postings;") {
		t.Fatalf("local-prod.sh --smoke: %v\n%s", err, out.String())
	}
	gone(t, "after --smoke", pids)

	cmd, pids, out = startLocalProd(t, script, bin, filepath.Join(dir, "term"))
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	var ee *exec.ExitError
	if err := cmd.Wait(); !errors.As(err, &ee) || ee.ExitCode() != 143 {
		t.Fatalf("after SIGTERM: %v, want exit 143\n%s", err, out.String())
	}
	gone(t, "after SIGTERM", pids)

	kdir := filepath.Join(dir, "kill")
	cmd, pids, out = startLocalProd(t, script, bin, kdir)
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	second, err := exec.CommandContext(ctx, "bash", script, "--bin", bin, "--dir", kdir, "--smoke").CombinedOutput()
	if err == nil || !strings.Contains(string(second), "is in use") {
		t.Fatalf("a second copy on a directory in use: %v\n%s", err, second)
	}
	if o, err := exec.Command("bash", script, "--stop", "--dir", kdir).CombinedOutput(); err != nil {
		t.Fatalf("--stop: %v %s", err, o)
	}
	gone(t, "after SIGKILL and --stop", pids)
	_ = out
}
