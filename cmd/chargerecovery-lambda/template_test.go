package main

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

// tmpl is deploy/aws/lambda.yaml, read as plain YAML (the template uses
// the long form of the intrinsic functions).
func tmpl(t *testing.T) map[string]any {
	t.Helper()
	b, err := os.ReadFile("../../deploy/aws/lambda.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	return doc
}

// at walks a path of map keys and list indexes.
func at(t *testing.T, v any, path ...any) any {
	t.Helper()
	for i, p := range path {
		switch k := p.(type) {
		case string:
			m, ok := v.(map[string]any)
			if !ok {
				t.Fatalf("%v: not a map at %v", path, path[:i])
			}
			if v, ok = m[k]; !ok {
				t.Fatalf("the template has no %v", path[:i+1])
			}
		case int:
			l, ok := v.([]any)
			if !ok || k >= len(l) {
				t.Fatalf("%v: no item %d at %v", path, k, path[:i])
			}
			v = l[k]
		}
	}
	return v
}

func num(t *testing.T, v any) int {
	t.Helper()
	n, err := strconv.Atoi(fmt.Sprint(v))
	if err != nil {
		t.Fatalf("%v is not a number", v)
	}
	return n
}

// The template wires what the function's exactly-once rests on: the
// mapping reports batch item failures (else Lambda deletes the records
// named for retry), the queue's visibility timeout is at least six times
// the function's timeout for every timeout the template allows, the lease
// is at least the work, and the work plus its margin fits the timeout.
func TestTheLambdaTemplate(t *testing.T) {
	doc := tmpl(t)
	res := at(t, doc, "Resources")
	fn := at(t, res, "Function", "Properties")
	if at(t, fn, "Runtime") != "provided.al2023" || at(t, fn, "Handler") != "bootstrap" {
		t.Errorf("function runtime %v handler %v, want provided.al2023 and bootstrap", at(t, fn, "Runtime"), at(t, fn, "Handler"))
	}
	if at(t, fn, "Timeout", "Ref") != "FunctionTimeout" {
		t.Fatalf("the function's Timeout is not the FunctionTimeout parameter")
	}
	esm := at(t, res, "EventSourceMapping")
	if at(t, esm, "Type") != "AWS::Lambda::EventSourceMapping" {
		t.Fatalf("EventSourceMapping is a %v", at(t, esm, "Type"))
	}
	types, _ := at(t, esm, "Properties", "FunctionResponseTypes").([]any)
	if !slices.Contains(types, any("ReportBatchItemFailures")) {
		t.Errorf("the event source mapping's FunctionResponseTypes %v lack ReportBatchItemFailures", types)
	}
	if at(t, esm, "Properties", "EventSourceArn", "Fn::GetAtt", 0) != "Queue" || at(t, esm, "Properties", "FunctionName", "Ref") != "Function" {
		t.Errorf("the mapping does not join Queue to Function")
	}
	for _, p := range []string{"BatchSize", "MaximumBatchingWindowInSeconds"} {
		at(t, esm, "Properties", p)
	}

	// Visibility ≥ 6 × timeout, for every timeout allowed.
	vis := at(t, res, "Queue", "Properties", "VisibilityTimeout", "Fn::FindInMap")
	if at(t, vis, 0) != "TimeoutToVisibility" || at(t, vis, 1, "Ref") != "FunctionTimeout" {
		t.Fatalf("the queue's VisibilityTimeout is not TimeoutToVisibility[FunctionTimeout]: %v", vis)
	}
	allowed, _ := at(t, doc, "Parameters", "FunctionTimeout", "AllowedValues").([]any)
	if len(allowed) == 0 {
		t.Fatal("FunctionTimeout has no AllowedValues: the visibility table cannot cover every timeout")
	}
	table := at(t, doc, "Mappings", "TimeoutToVisibility").(map[string]any)
	for _, a := range allowed {
		timeout := num(t, a)
		row, ok := table[strconv.Itoa(timeout)]
		if !ok {
			t.Errorf("FunctionTimeout %d has no TimeoutToVisibility row", timeout)
			continue
		}
		if v := num(t, at(t, row, "Visibility")); v < 6*timeout {
			t.Errorf("FunctionTimeout %ds: visibility %ds is under six times it", timeout, v)
		}
		if timeout > 900 {
			t.Errorf("FunctionTimeout %d is over Lambda's 900s", timeout)
		}
	}

	// The defaults: lease ≥ MinWork, MinWork + margin < the timeout.
	dur := func(v any) time.Duration {
		d, err := time.ParseDuration(fmt.Sprint(v))
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	minWork, lease := dur(at(t, doc, "Parameters", "MinWork", "Default")), dur(at(t, doc, "Parameters", "Lease", "Default"))
	envs := at(t, fn, "Environment", "Variables")
	margin := dur(at(t, envs, "IC_LAMBDA_MARGIN"))
	timeout := time.Duration(num(t, at(t, doc, "Parameters", "FunctionTimeout", "Default"))) * time.Second
	if lease < minWork {
		t.Errorf("default lease %s is shorter than MinWork %s", lease, minWork)
	}
	if minWork+margin >= timeout || minWork+margin >= time.Duration(num(t, allowed[0]))*time.Second {
		t.Errorf("MinWork %s + margin %s does not fit the shortest timeout allowed (%vs) or the default (%s): no record would ever start", minWork, margin, allowed[0], timeout)
	}
	// The default batch is what one invocation is sure to start (records
	// run one at a time, each needing MinWork + margin left): a record not
	// started is named deadline_near and spends a receive of
	// MaxReceiveCount without running.
	started := 0
	for left := timeout; left >= minWork+margin; left -= minWork {
		started++
	}
	if batch := num(t, at(t, doc, "Parameters", "BatchSize", "Default")); batch > started {
		t.Errorf("default BatchSize %d, but a %s invocation is sure to start only %d records of MinWork %s (+ margin %s)", batch, timeout, started, minWork, margin)
	}
	for _, k := range []string{"IC_BACKEND", "IC_QUEUE", "IC_DLQ", "IC_TABLE", "IC_COREBANK_URL", "IC_FINGERPRINT_KEY_FILE", "IC_NOTIFY", "IC_LEASE", "IC_LAMBDA_MIN_WORK", "IC_LAMBDA_CHECK_MAPPING"} {
		at(t, envs, k)
	}
	if at(t, envs, "IC_BACKEND") != "aws" {
		t.Errorf("IC_BACKEND is %v, want aws", at(t, envs, "IC_BACKEND"))
	}
	// The role may read the mappings, so that the start-up check can tell.
	stmts, _ := at(t, res, "FunctionRole", "Properties", "Policies", 0, "PolicyDocument", "Statement").([]any)
	found := false
	for _, s := range stmts {
		acts, _ := at(t, s, "Action").([]any)
		found = found || slices.Contains(acts, any("lambda:ListEventSourceMappings"))
	}
	if !found {
		t.Error("the function's role cannot call lambda:ListEventSourceMappings: the start-up check could not tell")
	}
	// The role may send to the source queue: a waiting charge's message
	// is started over as a copy there (Requeue).
	found = false
	for _, s := range stmts {
		acts, _ := at(t, s, "Action").([]any)
		if !slices.Contains(acts, any("sqs:SendMessage")) {
			continue
		}
		if r, ok := at(t, s, "Resource").(map[string]any); ok && fmt.Sprint(r["Fn::GetAtt"]) == "[Queue Arn]" {
			found = true
		}
	}
	if !found {
		t.Error("the function's role cannot send to its own queue: a waiting charge could not be started over")
	}
}
