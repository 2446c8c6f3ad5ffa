package watermillguard_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"

	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
	watermillguard "github.com/finedge/idempotent-consumer/integrations/watermill"
	"github.com/finedge/idempotent-consumer/sqlite"
)

// The lease of the tests: short, with no skew margin, so that a killed
// consumer's key is reclaimable 2s after its last heartbeat.
const testLease = 2 * time.Second

func openGuard(tb testing.TB, path string) (*idempotency.Guard, *sqlite.DB) {
	db, err := sqlite.Open(context.Background(), path, sqlite.OpenOptions{})
	if err != nil {
		tb.Fatal(err)
	}
	g, err := idempotency.NewGuard(sqlite.NewStore(db), idempotency.Options{Lease: testLease, SkewMargin: -1})
	if err != nil {
		tb.Fatal(err)
	}
	return g, db
}

// appendEffect is the side effect: one line per effect, appended to a
// file that several processes share.
func appendEffect(path, key string) error {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(key + "\n"); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func effects(t testing.TB, path string) map[string]int {
	t.Helper()
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return map[string]int{}
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	n := map[string]int{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		n[sc.Text()]++
	}
	return n
}

// effectHandler appends the effect once; a reclaimed key first asks the
// effect (here: the file) whether the killed delivery did it.
func effectHandler(path string, block func(key string)) message.NoPublishHandlerFunc {
	return func(msg *message.Message) error {
		key := msg.Metadata.Get(watermillguard.KeyMetadata)
		if run, ok := watermillguard.RunFrom(msg.Context()); ok && run.Reclaimed {
			if effects(nopTB{}, path)[key] > 0 {
				return nil // the earlier delivery did it before dying
			}
		}
		if block != nil {
			block(key)
		}
		return appendEffect(path, key)
	}
}

// nopTB lets effects run outside a test (in the child process).
type nopTB struct{ testing.TB }

func (nopTB) Helper()           {}
func (nopTB) Fatal(args ...any) { panic(fmt.Sprint(args...)) }

// recorder is a publisher that keeps what it is given (the poison topic).
type recorder struct {
	mu   sync.Mutex
	msgs []*message.Message
}

func (r *recorder) Publish(topic string, msgs ...*message.Message) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.msgs = append(r.msgs, msgs...)
	return nil
}
func (r *recorder) Close() error { return nil }
func (r *recorder) len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.msgs)
}

func newMessage(key, payload string) *message.Message {
	m := message.NewMessage(watermill.NewUUID(), []byte(payload))
	if key != "" {
		m.Metadata.Set(watermillguard.KeyMetadata, key)
	}
	return m
}

// Scenario 1: N keys, K of them published again (copies with new UUIDs),
// a conflict and a keyless message, and the broker's own redeliveries: a
// few messages nacked before the guard on their first delivery, a few
// nacked after it (the effect done and DONE recorded, the ack "lost").
// Every key's effect happens once; the two bad messages go to poison.
func TestRedeliveriesAndDuplicates(t *testing.T) {
	for _, b := range brokers() {
		t.Run(b.name, func(t *testing.T) {
			topic := topicFor(t, b)
			dir := t.TempDir()
			guard, db := openGuard(t, filepath.Join(dir, "guard.db"))
			defer db.Close()
			effectsFile := filepath.Join(dir, "effects")

			router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 10 * time.Second}, logger)
			if err != nil {
				t.Fatal(err)
			}
			var mu sync.Mutex
			acked, deliveries := map[string]bool{}, map[string]int{}
			var nackBefore, nackAfter map[string]bool
			count := func(h message.HandlerFunc) message.HandlerFunc {
				return func(msg *message.Message) ([]*message.Message, error) {
					mu.Lock()
					deliveries[msg.UUID]++
					first := deliveries[msg.UUID] == 1
					mu.Unlock()
					if first && nackBefore[msg.UUID] {
						return nil, errors.New("test: nacked before the guard")
					}
					out, err := h(msg)
					if err == nil && first && nackAfter[msg.UUID] {
						return nil, errors.New("test: nacked after the guard (ack lost)")
					}
					if err == nil {
						mu.Lock()
						acked[msg.UUID] = true
						mu.Unlock()
					}
					return out, err
				}
			}
			poisonPub := &recorder{}
			poison, err := middleware.PoisonQueueWithFilter(poisonPub, "poison", watermillguard.IsPermanent)
			if err != nil {
				t.Fatal(err)
			}
			router.AddMiddleware(count, poison, watermillguard.Middleware(guard, watermillguard.Options{RetryDelay: 100 * time.Millisecond}))
			sub, err := b.sub()
			if err != nil {
				t.Fatal(err)
			}
			router.AddConsumerHandler("effect", topic, sub, effectHandler(effectsFile, nil))
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			go func() { _ = router.Run(ctx) }()
			<-router.Running()
			defer router.Close()

			const n, k = 12, 8
			var msgs []*message.Message
			for i := range n {
				msgs = append(msgs, newMessage(fmt.Sprintf("key-%d", i), fmt.Sprintf("payload-%d", i)))
			}
			for i := range k {
				msgs = append(msgs, newMessage(fmt.Sprintf("key-%d", i%4), fmt.Sprintf("payload-%d", i%4)))
			}
			msgs = append(msgs, newMessage("key-0", "another payload"), newMessage("", "no key"))
			nackBefore, nackAfter = map[string]bool{}, map[string]bool{}
			for i, m := range msgs {
				switch i % 5 {
				case 1:
					nackBefore[m.UUID] = true
				case 2:
					nackAfter[m.UUID] = true
				}
			}
			pub, err := b.pub()
			if err != nil {
				t.Fatal(err)
			}
			defer pub.Close()
			if err := pub.Publish(topic, msgs...); err != nil {
				t.Fatal(err)
			}

			deadline := time.Now().Add(90 * time.Second)
			for {
				mu.Lock()
				done := len(acked)
				mu.Unlock()
				if done == len(msgs) {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("%d of %d messages acked after 90s", done, len(msgs))
				}
				time.Sleep(50 * time.Millisecond)
			}
			time.Sleep(500 * time.Millisecond) // anything redelivered late would show now
			got := effects(t, effectsFile)
			for i := range n {
				if c := got[fmt.Sprintf("key-%d", i)]; c != 1 {
					t.Errorf("key-%d: effect %d times, want once", i, c)
				}
			}
			if len(got) != n {
				t.Errorf("effects for %d keys, want %d: %v", len(got), n, got)
			}
			if p := poisonPub.len(); p != 2 {
				t.Errorf("%d poisoned messages, want 2 (the conflict and the keyless one)", p)
			}
			redelivered := 0
			mu.Lock()
			for _, d := range deliveries {
				if d > 1 {
					redelivered++
				}
			}
			mu.Unlock()
			if redelivered < len(nackBefore)+len(nackAfter) {
				t.Errorf("%d messages redelivered, want at least %d", redelivered, len(nackBefore)+len(nackAfter))
			}
			rec, err := guard.Get(context.Background(), "key-0")
			if err != nil || rec.State != driver.StateDone {
				t.Errorf("key-0: %v %v, want DONE", rec.State, err)
			}
		})
	}
}

// The child consumer: a real process, re-executed from the test binary.
const childEnv = "WMGUARD_CHILD"

func TestMain(m *testing.M) {
	if b := os.Getenv(childEnv); b != "" {
		os.Exit(child(b))
	}
	os.Exit(m.Run())
}

// child consumes WMGUARD_TOPIC until SIGTERM. With WMGUARD_BLOCK=before
// (after) its handler writes WMGUARD_MARKER and blocks for ever before
// (after) doing the effect: the test SIGKILLs it there.
func child(name string) int {
	var b broker
	for _, c := range brokers() {
		if c.name == name {
			b = c
		}
	}
	guard, db := openGuard(nopTB{}, os.Getenv("WMGUARD_DB"))
	defer db.Close()
	effectsFile, marker, mode := os.Getenv("WMGUARD_EFFECTS"), os.Getenv("WMGUARD_MARKER"), os.Getenv("WMGUARD_BLOCK")
	handler := effectHandler(effectsFile, func(key string) {
		if mode == "before" {
			_ = os.WriteFile(marker, []byte(key), 0o600)
			select {}
		}
	})
	if mode == "after" {
		inner := handler
		handler = func(msg *message.Message) error {
			if err := inner(msg); err != nil {
				return err
			}
			_ = os.WriteFile(marker, []byte("done"), 0o600)
			select {} // killed after the effect, before DONE
		}
	}
	router, err := message.NewRouter(message.RouterConfig{}, logger)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	router.AddMiddleware(watermillguard.Middleware(guard, watermillguard.Options{RetryDelay: 200 * time.Millisecond}))
	sub, err := b.sub()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	router.AddConsumerHandler("effect", os.Getenv("WMGUARD_TOPIC"), sub, handler)
	ctx, stop := signalContext()
	defer stop()
	if err := router.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

func signalContext() (context.Context, func()) {
	ctx, cancel := context.WithCancel(context.Background())
	ch := make(chan os.Signal, 1)
	signalNotify(ch)
	go func() {
		select {
		case <-ch:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

func startChild(t *testing.T, b broker, env ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), append([]string{childEnv + "=" + b.name}, env...)...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	return cmd
}

func waitFor(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after %s", what, d)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Scenario 2: a consumer process SIGKILLed while its handler is inside
// the side effect's window (before the effect, or after it and before
// DONE); another consumer gets the broker's redelivery, waits out the dead
// one's lease (DuplicateInProgress, nacked) and reclaims it: the effect
// happens once.
func TestConsumerKilledMidMessage(t *testing.T) {
	for _, b := range brokers() {
		for _, mode := range []string{"before", "after"} {
			t.Run(b.name+"/killed_"+mode+"_the_effect", func(t *testing.T) {
				topic := topicFor(t, b)
				dir := t.TempDir()
				guardDB, effectsFile, marker := filepath.Join(dir, "guard.db"), filepath.Join(dir, "effects"), filepath.Join(dir, "marker")
				guard, db := openGuard(t, guardDB)
				defer db.Close()
				env := []string{"WMGUARD_TOPIC=" + topic, "WMGUARD_DB=" + guardDB, "WMGUARD_EFFECTS=" + effectsFile, "WMGUARD_MARKER=" + marker}

				// The first consumer declares the queue (AMQP) before anything is published.
				first := startChild(t, b, append(env, "WMGUARD_BLOCK="+mode)...)
				time.Sleep(time.Second)
				pub, err := b.pub()
				if err != nil {
					t.Fatal(err)
				}
				defer pub.Close()
				if err := pub.Publish(topic, newMessage("kill-me", "payload")); err != nil {
					t.Fatal(err)
				}
				waitFor(t, "the handler in its window", 30*time.Second, func() bool { _, err := os.Stat(marker); return err == nil })
				// Longer than the lease: the heartbeat keeps it.
				time.Sleep(testLease + time.Second)
				rec, err := guard.Get(context.Background(), "kill-me")
				if err != nil || rec.State != driver.StateInProgress || !rec.LeaseUntil.After(time.Now()) {
					t.Fatalf("while the handler runs: %s until %s (%v), want IN_PROGRESS with a live lease", rec.State, rec.LeaseUntil, err)
				}
				if err := first.Process.Signal(syscall.SIGKILL); err != nil {
					t.Fatal(err)
				}
				_ = first.Wait()
				killedAt := time.Now()

				second := startChild(t, b, env...)
				waitFor(t, "the redelivered message DONE", 60*time.Second, func() bool {
					rec, err := guard.Get(context.Background(), "kill-me")
					return err == nil && rec.State == driver.StateDone
				})
				rec, _ = guard.Get(context.Background(), "kill-me")
				if rec.Attempt < 2 {
					t.Errorf("attempt %d, want the key reclaimed (2 or more)", rec.Attempt)
				}
				if since := rec.UpdatedAt.Sub(killedAt); since < 0 {
					t.Errorf("DONE %s before the kill", -since)
				}
				time.Sleep(time.Second)
				_ = second.Process.Signal(syscall.SIGTERM)
				_ = second.Wait()
				if got := effects(t, effectsFile); got["kill-me"] != 1 || len(got) != 1 {
					t.Errorf("effects %v, want kill-me once", got)
				}
			})
		}
	}
}
