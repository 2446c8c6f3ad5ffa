package lambdasqs_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
	"github.com/finedge/idempotent-consumer/internal/lambdatest"
	"github.com/finedge/idempotent-consumer/lambdasqs"
	"github.com/finedge/idempotent-consumer/sqlite"
)

// fnBinary builds testdata/fn once per run.
func fnBinary(t *testing.T) string { return lambdatest.Build(t, "./testdata/fn") }

// world is one test's function: its store file, its effects and DLQ files,
// and a Runtime API server its processes ask.
type world struct {
	t                *testing.T
	rt               *lambdatest.Runtime
	db, effects, dlq string
	lease, minWork   time.Duration
	sleep            time.Duration
	redrive          bool
	guard            *idempotency.Guard
	store            driver.Store
}

func newWorld(t *testing.T, lease, minWork, sleep time.Duration) *world {
	t.Helper()
	dir := t.TempDir()
	w := &world{t: t, rt: lambdatest.Start(t), db: filepath.Join(dir, "fn.db"), effects: filepath.Join(dir, "effects"),
		dlq: filepath.Join(dir, "dlq"), lease: lease, minWork: minWork, sleep: sleep}
	db, err := sqlite.Open(t.Context(), w.db, sqlite.OpenOptions{}) // created and migrated before the processes start
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	w.store = sqlite.NewStore(db)
	if w.guard, err = idempotency.NewGuard(w.store, idempotency.Options{Lease: lease, SkewMargin: -1}); err != nil {
		t.Fatal(err)
	}
	return w
}

// start runs one function process (an execution environment).
func (w *world) start() {
	w.t.Helper()
	env := append(os.Environ(), "AWS_LAMBDA_RUNTIME_API="+w.rt.Addr, "AWS_LAMBDA_FUNCTION_NAME=test-function",
		"FN_DB="+w.db, "FN_EFFECTS="+w.effects, "FN_DLQ="+w.dlq, "FN_LEASE="+w.lease.String(),
		"FN_MIN_WORK="+w.minWork.String(), "FN_SLEEP="+w.sleep.String())
	if w.redrive {
		env = append(env, "FN_REDRIVE=1")
	}
	lambdatest.Run(w.t, fnBinary(w.t), env)
}

type rec struct{ id, body string }

func event(recs ...rec) []byte {
	var ev events.SQSEvent
	for _, r := range recs {
		ev.Records = append(ev.Records, events.SQSMessage{MessageId: r.id, ReceiptHandle: "rh-" + r.id, Body: r.body,
			EventSource: "aws:sqs", EventSourceARN: "arn:aws:sqs:us-east-1:123456789012:charges",
			Attributes: map[string]string{"ApproximateReceiveCount": "1"}})
	}
	b, err := json.Marshal(ev)
	if err != nil {
		panic(err)
	}
	return b
}

func body(id, kind string) string { return fmt.Sprintf(`{"id":%q,"kind":%q}`, id, kind) }

// invoke sends one batch with the given time left and returns the
// records named in batchItemFailures (sorted).
func (w *world) invoke(left time.Duration, recs ...rec) []string {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(w.t.Context(), left+30*time.Second)
	defer cancel()
	res, err := w.rt.Invoke(ctx, event(recs...), time.Now().Add(left))
	if err != nil {
		w.t.Fatal(err)
	}
	if !res.OK {
		w.t.Fatalf("invocation %s failed: %s", res.RequestID, res.Body)
	}
	var resp events.SQSEventResponse
	if err := json.Unmarshal(res.Body, &resp); err != nil {
		w.t.Fatalf("response %q: %v", res.Body, err)
	}
	if resp.BatchItemFailures == nil {
		w.t.Fatalf("response %s has no batchItemFailures list", res.Body)
	}
	var ids []string
	for _, f := range resp.BatchItemFailures {
		ids = append(ids, f.ItemIdentifier)
	}
	slices.Sort(ids)
	return ids
}

func lines(t *testing.T, file string) []string {
	t.Helper()
	b, err := os.ReadFile(file)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	l := strings.Fields(strings.TrimSpace(string(b)))
	slices.Sort(l)
	return l
}

func wantList(t *testing.T, what string, got, want []string) {
	t.Helper()
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("%s = %q, want %q", what, got, want)
	}
}

// Copies of one message inside one batch and across batches: each key's
// work runs once, and every copy is deleted (none named for retry).
func TestProcessDuplicatesInsideAndAcrossBatches(t *testing.T) {
	w := newWorld(t, 10*time.Second, time.Second, 0)
	w.start()
	wantList(t, "failures of batch 1", w.invoke(30*time.Second,
		rec{"m1", body("k1", "")}, rec{"m2", body("k1", "")}, rec{"m3", body("k2", "")}, rec{"m4", body("k1", "")}), nil)
	w.start() // a second execution environment: the next batch may go to either
	for i := range 3 {
		wantList(t, "failures of a later batch", w.invoke(30*time.Second,
			rec{fmt.Sprint("n1-", i), body("k1", "")}, rec{fmt.Sprint("n2-", i), body("k2", "")}, rec{fmt.Sprint("n3-", i), body("k3", "")}), nil)
	}
	wantList(t, "effects", lines(t, w.effects), []string{"k1", "k2", "k3"})
}

// batchItemFailures name exactly the records to retry: one whose key
// another invocation holds, one whose work failed without a final result;
// a decline and a record without a key are dead-lettered by the function
// and not named; done records are not named.
func TestProcessFailuresAreExactlyTheRecordsToRetry(t *testing.T) {
	w := newWorld(t, 30*time.Second, time.Second, 0)
	held, err := w.guard.Claim(t.Context(), "held", lambdasqs.BodyFingerprint(events.SQSMessage{Body: body("held", "")})) // another invocation's live claim
	if err != nil || !held.Outcome.Owned() {
		t.Fatalf("plant a claim: %v %v", held.Outcome, err)
	}
	w.start()
	batch := []rec{{"m-held", body("held", "")}, {"m-flaky", body("flaky", "flaky")}, {"m-decline", body("dec", "decline")},
		{"m-nokey", `{"kind":"x"}`}, {"m-null", `null`}, {"m-ok", body("ok", "")}}
	wantList(t, "failures", w.invoke(30*time.Second, batch...), []string{"m-held", "m-flaky"})
	wantList(t, "effects", lines(t, w.effects), []string{"ok"})
	wantList(t, "dead-lettered", lines(t, w.dlq), []string{"m-decline", "failed", "m-nokey", "no_key", "m-null", "no_key"})

	// Delivered again: the decline is now a FAILED record (dead-lettered
	// again, not run); the flaky key's claim is kept after work that may
	// have had an effect, so it is in progress until its lease passes.
	wantList(t, "failures of the redelivery", w.invoke(30*time.Second, batch...), []string{"m-held", "m-flaky"})
	wantList(t, "effects after the redelivery", lines(t, w.effects), []string{"ok"})
}

// With the queue's redrive policy instead of the function's DLQ, the
// permanent failures are named too.
func TestProcessPermanentFailuresLeftToRedrive(t *testing.T) {
	w := newWorld(t, 30*time.Second, time.Second, 0)
	w.redrive = true
	w.start()
	wantList(t, "failures", w.invoke(30*time.Second, rec{"m-decline", body("dec", "decline")}, rec{"m-nokey", `{}`}, rec{"m-ok", body("ok", "")}),
		[]string{"m-decline", "m-nokey"})
	wantList(t, "dead-lettered by the function", lines(t, w.dlq), nil)
	wantList(t, "effects", lines(t, w.effects), []string{"ok"})
}

// An invocation with less than MinWork left starts nothing: no claim is
// written (the next invocation is not kept waiting for a lease) and every
// record is named for retry.
func TestProcessNearDeadlineStartsNothing(t *testing.T) {
	w := newWorld(t, 10*time.Second, 3*time.Second, 0)
	w.start()
	wantList(t, "failures", w.invoke(2*time.Second, rec{"m1", body("k1", "")}, rec{"m2", body("k2", "")}), []string{"m1", "m2"})
	wantList(t, "effects", lines(t, w.effects), nil)
	if _, err := w.store.Get(t.Context(), "k1", time.Now()); err == nil {
		t.Fatal("a record was claimed by an invocation that had no time to run it")
	}
	wantList(t, "failures with time", w.invoke(30*time.Second, rec{"m1", body("k1", "")}, rec{"m2", body("k2", "")}), nil)
	wantList(t, "effects", lines(t, w.effects), []string{"k1", "k2"})
}

// Work that runs past its invocation's deadline (a call already sent goes
// on) keeps its key: the lease is not tied to the deadline and the
// heartbeat extends it, so a second invocation meanwhile — here after the
// first lease alone would have run out — is told the key is in progress,
// and the work runs once.
func TestProcessWorkPastTheDeadlineRunsOnce(t *testing.T) {
	w := newWorld(t, time.Second, time.Second, 4*time.Second)
	w.start()
	w.start()
	first := make(chan []string, 1)
	go func() {
		// Enough time to start (MinWork + margin), not to finish.
		res, err := w.rt.Invoke(t.Context(), event(rec{"m1", body("k1", "stubborn")}), time.Now().Add(1900*time.Millisecond))
		if err != nil || !res.OK {
			first <- []string{fmt.Sprint("error ", err, string(res.Body))}
			return
		}
		var resp events.SQSEventResponse
		_ = json.Unmarshal(res.Body, &resp)
		var ids []string
		for _, f := range resp.BatchItemFailures {
			ids = append(ids, f.ItemIdentifier)
		}
		first <- ids
	}()
	time.Sleep(2100 * time.Millisecond) // past the first invocation's deadline and its first lease
	for range 2 {
		wantList(t, "failures of a copy while the work runs", w.invoke(30*time.Second, rec{"m1-copy", body("k1", "stubborn")}), []string{"m1-copy"})
		time.Sleep(700 * time.Millisecond)
	}
	wantList(t, "failures of the first invocation", <-first, nil)
	wantList(t, "failures after", w.invoke(30*time.Second, rec{"m1-late", body("k1", "stubborn")}), nil)
	wantList(t, "effects", lines(t, w.effects), []string{"k1"})
}

// A slow record's work under a short lease: the heartbeat keeps the key
// while it runs, so a copy in another invocation meanwhile is named for
// retry and the work runs once.
func TestProcessHeartbeatKeepsTheKey(t *testing.T) {
	w := newWorld(t, time.Second, time.Second, 3*time.Second)
	w.start()
	w.start()
	first := make(chan error, 1)
	go func() {
		_, err := w.rt.Invoke(t.Context(), event(rec{"m1", body("k1", "slow")}), time.Now().Add(30*time.Second))
		first <- err
	}()
	time.Sleep(1500 * time.Millisecond)
	wantList(t, "failures of the copy", w.invoke(30*time.Second, rec{"m2", body("k1", "slow")}), []string{"m2"})
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	wantList(t, "failures after", w.invoke(30*time.Second, rec{"m3", body("k1", "slow")}), nil)
	wantList(t, "effects", lines(t, w.effects), []string{"k1"})
}
