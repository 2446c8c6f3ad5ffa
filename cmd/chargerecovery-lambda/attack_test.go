package main

import (
	"testing"
	"time"
)

// ATTACK C1. A record not started for lack of time (deadline_near) is
// still a receive: it counts toward the queue's maxReceiveCount, and SQS
// moves it to the DLQ after MaxReceiveCount such receives without its
// work ever having run (and without a reason code). With the template's
// defaults (BatchSize 10, MinWork 25s, margin 5s, FunctionTimeout 60s),
// when the charges take their MinWork (a slow bank) an invocation can only
// be sure to start 2 of its 10 records; the other 8 are named for retry on
// every receive, so a record can be dead-lettered by the redrive policy
// untouched.
func TestAttackTemplateBatchLargerThanTheTimeoutCanStart(t *testing.T) {
	doc := tmpl(t)
	param := func(name string) any { return at(t, doc, "Parameters", name, "Default") }
	timeout := time.Duration(num(t, param("FunctionTimeout"))) * time.Second
	minWork, err := time.ParseDuration(param("MinWork").(string))
	if err != nil {
		t.Fatal(err)
	}
	margin, err := time.ParseDuration(at(t, doc, "Resources", "Function", "Properties", "Environment", "Variables", "IC_LAMBDA_MARGIN").(string))
	if err != nil {
		t.Fatal(err)
	}
	batch := num(t, param("BatchSize"))
	started := 0
	for left := timeout; left >= minWork+margin; left -= minWork {
		started++
	}
	if batch > started {
		t.Errorf("BatchSize %d, but a %s invocation is sure to start only %d records of MinWork %s (+ margin %s): the other %d are named deadline_near and burn a receive each time (MaxReceiveCount %v), reaching the DLQ without having run",
			batch, timeout, started, minWork, margin, batch-started, param("MaxReceiveCount"))
	}
}
