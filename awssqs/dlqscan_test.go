package awssqs_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/finedge/idempotent-consumer/awssqs"
	"github.com/finedge/idempotent-consumer/queue"
)

// dlqEntries is how many entries the DLQ tests dead-letter: more than one
// receive brings (10), so a scan needs several.
const dlqEntries = 25

// hookedAPI is the SQS client with a hook around each receive (a test
// making two readers overlap, or cancelling one mid-receive).
type hookedAPI struct {
	awssqs.API
	mu      sync.Mutex
	n       int // receives so far
	before  func(n int)
	after   func(n int, out *sqs.ReceiveMessageOutput)
	failCtx bool // after the receive, fail it if its ctx has ended (a receive cut short)
}

func (h *hookedAPI) ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, opts ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error) {
	h.mu.Lock()
	h.n++
	n := h.n
	h.mu.Unlock()
	if h.before != nil {
		h.before(n)
	}
	out, err := h.API.ReceiveMessage(ctx, in, opts...)
	if err == nil && h.after != nil {
		h.after(n, out)
	}
	if err == nil && h.failCtx && ctx.Err() != nil {
		// What the caller sees when its ctx ends while the answer is on
		// the way: the server hid the messages, the receipts are lost.
		return nil, ctx.Err()
	}
	return out, err
}

// dlqFixture is a queue pair with dlqEntries entries on the DLQ.
type dlqFixture struct {
	c  *sqs.Client
	qs awssqs.Queues
}

func newDLQFixture(t *testing.T) dlqFixture {
	t.Helper()
	c, qs := newQueues(t, awssqs.QueueSpec{VisibilityTimeout: 30 * time.Second, MaxReceiveCount: 1000})
	f := dlqFixture{c: c, qs: qs}
	q := f.queue(t, c)
	var out []queue.Outgoing
	for i := range dlqEntries {
		out = append(out, queue.Outgoing{Body: []byte(fmt.Sprintf(`{"chargeId":"CHG-DLQ-%02d"}`, i))})
	}
	if _, err := q.SendBatch(t.Context(), out); err != nil {
		t.Fatal(err)
	}
	for moved := 0; moved < dlqEntries; {
		msgs, err := q.Receive(t.Context(), 10)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range msgs {
			if err := q.DeadLetter(t.Context(), m, queue.Reason{Code: "debit_failed", Detail: "declined"}); err != nil {
				t.Fatal(err)
			}
			moved++
		}
	}
	f.wantAllVisible(t, dlqEntries)
	return f
}

// queue is a Queue on the fixture's queues through api (one reader).
func (f dlqFixture) queue(t *testing.T, api awssqs.API) *awssqs.Queue {
	t.Helper()
	q, err := awssqs.New(api, awssqs.Options{QueueURL: f.qs.URL, DLQURL: f.qs.DLQURL, WaitTime: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return q
}

// counts are the DLQ's visible and invisible messages (exact on the
// emulator).
func (f dlqFixture) counts(t *testing.T) (visible, invisible int) {
	t.Helper()
	out, err := f.c.GetQueueAttributes(t.Context(), &sqs.GetQueueAttributesInput{QueueUrl: aws.String(f.qs.DLQURL),
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameApproximateNumberOfMessages, types.QueueAttributeNameApproximateNumberOfMessagesNotVisible}})
	if err != nil {
		t.Fatal(err)
	}
	visible, _ = strconv.Atoi(out.Attributes[string(types.QueueAttributeNameApproximateNumberOfMessages)])
	invisible, _ = strconv.Atoi(out.Attributes[string(types.QueueAttributeNameApproximateNumberOfMessagesNotVisible)])
	return visible, invisible
}

// wantAllVisible: the DLQ holds n messages and every one is visible now.
func (f dlqFixture) wantAllVisible(t *testing.T, n int) {
	t.Helper()
	if v, inv := f.counts(t); v != n || inv != 0 {
		t.Fatalf("DLQ: %d visible, %d not visible; want %d visible, 0 not visible", v, inv, n)
	}
}

// list is a dry run that returns the ids it saw.
func list(ctx context.Context, q *awssqs.Queue) ([]string, queue.RedriveReport, error) {
	var ids []string
	rep, err := q.Redrive(ctx, queue.RedriveOptions{DryRun: true, Visit: func(e queue.DLQEntry, _ queue.RedriveDecision) { ids = append(ids, e.ID) }})
	slices.Sort(ids)
	return ids, rep, err
}

// A read of the DLQ (a listing, a show, status) leaves every message
// visible the moment it returns, and the next read sees them all: no
// reader waits out a hold another left behind.
func TestReadingTheDLQLeavesEveryMessageVisible(t *testing.T) {
	t.Parallel()
	f := newDLQFixture(t)
	q := f.queue(t, f.c)
	first, rep, err := list(t.Context(), q)
	if err != nil || len(first) != dlqEntries || rep.Seen != dlqEntries || rep.Unseen != 0 {
		t.Fatalf("list: %d ids, %+v, %v; want %d", len(first), rep, err, dlqEntries)
	}
	f.wantAllVisible(t, dlqEntries)
	// A show of one right after the list finds it.
	show, err := q.Redrive(t.Context(), queue.RedriveOptions{DryRun: true, Match: func(e queue.DLQEntry) bool { return e.ID == first[0] }})
	if err != nil || show.Moved != 1 {
		t.Fatalf("show %s right after a list: %+v, %v; want it found", first[0], show, err)
	}
	f.wantAllVisible(t, dlqEntries)
	// A redrive right after moves them all.
	moved, err := q.Redrive(t.Context(), queue.RedriveOptions{})
	if err != nil || moved.Moved != dlqEntries || moved.Unseen != 0 {
		t.Fatalf("redrive right after a list: %+v, %v; want %d moved", moved, err, dlqEntries)
	}
	f.wantAllVisible(t, 0)
}

// Two readers at once (two operators' dlq list, or a list and the
// console) both see every entry. The hooks make them overlap for sure:
// each holds its first page while the other receives.
func TestTwoConcurrentDLQReadsBothSeeEveryEntry(t *testing.T) {
	t.Parallel()
	f := newDLQFixture(t)
	var firstPages sync.WaitGroup
	firstPages.Add(2)
	reader := func() *awssqs.Queue {
		return f.queue(t, &hookedAPI{API: f.c,
			before: func(n int) {
				if n == 2 {
					firstPages.Wait() // the other holds its first page
				}
			},
			after: func(n int, _ *sqs.ReceiveMessageOutput) {
				if n == 1 {
					firstPages.Done()
				}
			}})
	}
	a, b := reader(), reader()
	type got struct {
		ids []string
		rep queue.RedriveReport
		err error
	}
	results := make(chan got, 2)
	for _, q := range []*awssqs.Queue{a, b} {
		go func() {
			ids, rep, err := list(t.Context(), q)
			results <- got{ids, rep, err}
		}()
	}
	var seen [][]string
	for range 2 {
		r := <-results
		if r.err != nil || len(r.ids) != dlqEntries || r.rep.Unseen != 0 {
			t.Errorf("a reader saw %d of %d (%+v, %v)", len(r.ids), dlqEntries, r.rep, r.err)
		}
		seen = append(seen, r.ids)
	}
	if !slices.Equal(seen[0], seen[1]) {
		t.Errorf("the readers saw different entries")
	}
	f.wantAllVisible(t, dlqEntries)
}

// dlq show of an entry another reader holds at that moment finds it: the
// show waits for the list to give it back.
func TestShowFindsAnEntryAnotherReaderHolds(t *testing.T) {
	t.Parallel()
	f := newDLQFixture(t)
	var held string // an entry the list holds
	listHolds, showReceived := make(chan struct{}), make(chan struct{})
	var once sync.Once
	lister := f.queue(t, &hookedAPI{API: f.c,
		after: func(n int, out *sqs.ReceiveMessageOutput) {
			if n == 1 {
				held = aws.ToString(out.Messages[0].MessageId)
				close(listHolds)
			}
		},
		before: func(n int) {
			if n == 2 {
				<-showReceived // hold the first page until the show has received
			}
		}})
	shower := f.queue(t, &hookedAPI{API: f.c, after: func(int, *sqs.ReceiveMessageOutput) { once.Do(func() { close(showReceived) }) }})
	listed := make(chan []string, 1)
	go func() {
		ids, _, err := list(t.Context(), lister)
		if err != nil {
			t.Error(err)
		}
		listed <- ids
	}()
	<-listHolds
	show, err := shower.Redrive(t.Context(), queue.RedriveOptions{DryRun: true, Match: func(e queue.DLQEntry) bool { return e.ID == held }})
	if err != nil || show.Moved != 1 || show.Unseen != 0 {
		t.Errorf("show %s while a list holds it: %+v, %v; want it found", held, show, err)
	}
	if ids := <-listed; len(ids) != dlqEntries {
		t.Errorf("the list saw %d of %d", len(ids), dlqEntries)
	}
	f.wantAllVisible(t, dlqEntries)
}

// A read cancelled mid-way (a shutdown, a closed console page) gives back
// what it held, also a page whose receive was on its way when ctx ended.
func TestACancelledDLQReadGivesBackWhatItHeld(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		cancelAt string // "visit": between pages; "receive": while the second receive is on its way
	}{
		{"between pages", "visit"},
		{"during a receive", "receive"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newDLQFixture(t)
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			api := &hookedAPI{API: f.c, failCtx: true}
			if tc.cancelAt == "receive" {
				api.after = func(n int, out *sqs.ReceiveMessageOutput) {
					if n == 2 {
						cancel()
					}
				}
			}
			visits := 0
			_, err := f.queue(t, api).Redrive(ctx, queue.RedriveOptions{DryRun: true, Visit: func(queue.DLQEntry, queue.RedriveDecision) {
				if visits++; visits == 1 && tc.cancelAt == "visit" {
					cancel()
				}
			}})
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("cancelled read: %v, want context.Canceled", err)
			}
			f.wantAllVisible(t, dlqEntries)
		})
	}
}

// A reader that holds some entries for longer than a scan waits (here: a
// raw receive with a 10-minute visibility) leaves the scan incomplete, and
// it says how many it could not see rather than a short count; a redrive
// moves what it saw and no more.
func TestAScanShortOfTheDLQSaysHowManyItCouldNotSee(t *testing.T) {
	t.Parallel()
	f := newDLQFixture(t)
	out, err := f.c.ReceiveMessage(t.Context(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(f.qs.DLQURL), MaxNumberOfMessages: 5, VisibilityTimeout: 600})
	if err != nil || len(out.Messages) != 5 {
		t.Fatalf("hold 5: %d, %v", len(out.Messages), err)
	}
	q := f.queue(t, f.c)
	rep, err := q.RedriveHolding(t.Context(), 5*time.Second, 2*time.Second, queue.RedriveOptions{DryRun: true})
	if err != nil || rep.Seen != dlqEntries-5 || rep.Unseen != 5 || !rep.Approximate {
		t.Fatalf("list with 5 held elsewhere: %+v, %v; want %d seen, 5 unseen (approximate)", rep, err, dlqEntries-5)
	}
	rep, err = q.RedriveHolding(t.Context(), 5*time.Second, 2*time.Second, queue.RedriveOptions{})
	if err != nil || rep.Moved != dlqEntries-5 || rep.Unseen != 5 {
		t.Fatalf("redrive with 5 held elsewhere: %+v, %v; want %d moved, 5 unseen", rep, err, dlqEntries-5)
	}
	if v, inv := f.counts(t); v != 0 || inv != 5 {
		t.Fatalf("after the redrive: %d visible, %d not visible; want 0 and the 5 held elsewhere", v, inv)
	}
}

// A read with a deadline shorter than its wait (the console's sample has
// 10s) ends before the deadline saying what it could not see, not with
// the deadline's error.
func TestAShortScanWithADeadlineEndsIncompleteBeforeIt(t *testing.T) {
	t.Parallel()
	f := newDLQFixture(t)
	if out, err := f.c.ReceiveMessage(t.Context(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(f.qs.DLQURL), MaxNumberOfMessages: 5, VisibilityTimeout: 600}); err != nil || len(out.Messages) != 5 {
		t.Fatalf("hold 5: %v", err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 6*time.Second)
	defer cancel()
	rep, err := f.queue(t, f.c).Redrive(ctx, queue.RedriveOptions{DryRun: true})
	if err != nil || rep.Seen != dlqEntries-5 || rep.Unseen != 5 {
		t.Fatalf("read with a 6s deadline, 5 held elsewhere: %+v, %v; want %d seen, 5 unseen, no error", rep, err, dlqEntries-5)
	}
	if v, inv := f.counts(t); v != dlqEntries-5 || inv != 5 {
		t.Fatalf("after the read: %d visible, %d not visible; want %d and the 5 held elsewhere", v, inv, dlqEntries-5)
	}
}

// A scan whose caller is slow between pages (here 2.5s, over half the
// 4s hold) renews its hold, so the entries of its first page do not come
// back (to be handed to another reader) while it still runs; at its end
// they are all given back.
func TestASlowScanRenewsItsHold(t *testing.T) {
	t.Parallel()
	f := newDLQFixture(t)
	visited, invisible := 0, -1
	_, err := f.queue(t, f.c).RedriveHolding(t.Context(), 4*time.Second, 4*time.Second, queue.RedriveOptions{DryRun: true,
		Visit: func(queue.DLQEntry, queue.RedriveDecision) {
			// Pages of 10 (the emulator gives a single reader its
			// messages in order): entry 1 opens the first, 11 the second.
			switch visited++; visited {
			case 1:
				time.Sleep(2500 * time.Millisecond)
			case 11:
				time.Sleep(2500 * time.Millisecond)
				// 5s after the first page was received: held without
				// renewal, it would have been visible again since 4s.
				_, invisible = f.counts(t)
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	if invisible != 20 {
		t.Errorf("with two pages read, %d DLQ messages were invisible, want the 20 held", invisible)
	}
	f.wantAllVisible(t, dlqEntries)
}

// ATTACK (surface 3): a redrive moves what it once received without
// checking that it still holds it. The hold is renewed only in Next, before
// a receive; the moves of a page (a SendMessage and a DeleteMessage each,
// with the SDK's retries and backoff) and the caller's Match/Visit run with
// no renewal. A page whose moves outlast the hold (30 s in production; 2 s
// here) is visible again meanwhile: another operator's redrive receives and
// moves those entries, and this one then sends each of them to the queue a
// second time — one DLQ entry becomes two queue messages, and the two runs
// report more moved than the DLQ ever held. (The second delivery is caught
// by the claim while the record lasts; past retention it is a second debit,
// which is why MaxAge exists.)
func TestReview35ARedriveWhoseHoldLapsedMidPageMovesEntriesTwice(t *testing.T) {
	t.Parallel()
	f := newDLQFixture(t)
	var other queue.RedriveReport
	first := true
	rep, err := f.queue(t, f.c).RedriveHolding(t.Context(), 2*time.Second, 2*time.Second, queue.RedriveOptions{
		Match: func(queue.DLQEntry) bool {
			if first {
				first = false
				// This page's moves are slow (throttled sends): the hold
				// lapses, and another operator's redrive runs meanwhile.
				time.Sleep(3 * time.Second)
				var oerr error
				other, oerr = f.queue(t, f.c).Redrive(t.Context(), queue.RedriveOptions{})
				if oerr != nil {
					t.Errorf("the other redrive: %v", oerr)
				}
			}
			return true
		}})
	out, aerr := f.c.GetQueueAttributes(t.Context(), &sqs.GetQueueAttributesInput{QueueUrl: aws.String(f.qs.URL),
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameApproximateNumberOfMessages}})
	if aerr != nil {
		t.Fatal(aerr)
	}
	onQueue, _ := strconv.Atoi(out.Attributes[string(types.QueueAttributeNameApproximateNumberOfMessages)])
	if onQueue != dlqEntries || rep.Moved+other.Moved != dlqEntries {
		t.Fatalf("%d DLQ entries redriven by two runs: the queue holds %d messages; the runs report %d + %d moved (this one's error: %v)",
			dlqEntries, onQueue, rep.Moved, other.Moved, err)
	}
}

// failDeleteAPI is the SQS client whose DeleteMessage fails (throttled, a
// lost connection): what MoveBack reports as "sent, but delete from the
// DLQ failed".
type failDeleteAPI struct{ *sqs.Client }

func (failDeleteAPI) DeleteMessage(context.Context, *sqs.DeleteMessageInput, ...func(*sqs.Options)) (*sqs.DeleteMessageOutput, error) {
	return nil, errors.New("review35b: throttled")
}

// REVIEW 35b: the redrive's audit line now names only what Moved saw, and
// Redrive calls Moved only after a MoveBack that returned nil. An SQS
// MoveBack whose send went through and whose delete failed returns an
// error: the charge is back on the queue (it will be debited if its record
// says so), yet Moved never sees it, rep.Moved does not count it, and
// runRedrive writes no audit line at all when it was the only one (before
// 03343fd, Visit named every entry about to be moved).
func TestReview35bASentButNotDeletedEntryIsNamedByNoAuditLine(t *testing.T) {
	t.Parallel()
	f := newDLQFixture(t)
	q := f.queue(t, failDeleteAPI{f.c})
	var named []string
	rep, err := q.Redrive(t.Context(), queue.RedriveOptions{Max: 1, Moved: func(e queue.DLQEntry) { named = append(named, e.ID) }})
	if err == nil {
		t.Fatal("redrive with a failing delete: no error")
	}
	out, rerr := f.c.ReceiveMessage(t.Context(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(f.qs.URL), MaxNumberOfMessages: 10, WaitTimeSeconds: 1})
	if rerr != nil {
		t.Fatal(rerr)
	}
	if len(out.Messages) != 1 {
		t.Fatalf("main queue holds %d messages after the redrive, want the 1 sent", len(out.Messages))
	}
	if len(named) != 1 || rep.Moved != 1 {
		t.Fatalf("an entry is back on the queue (%s), but Moved named %d entries and the report says moved %d (err: %v): the audit line names no charge",
			aws.ToString(out.Messages[0].Body), len(named), rep.Moved, err)
	}
}
