package watermillguard_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/finedge/idempotent-consumer/idempotency"
	watermillguard "github.com/finedge/idempotent-consumer/integrations/watermill"
	"github.com/finedge/idempotent-consumer/memstore"
)

// Attack 54 (issue 54 item 5): PoisonQueue sets the poison topic up with
// SubscribeInitialize before it acks into it. These try the broker
// configurations the first test did not.

// needBroker skips (fails in CI) when the broker at addr is down.
func needBroker(t *testing.T, name, addr string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		unreachable(t, name+" at "+addr+" unreachable: "+err.Error())
	}
	c.Close()
}

// amqpDelete removes the queues and exchanges a test declared.
func amqpDelete(t *testing.T, queues, exchanges []string) {
	t.Helper()
	t.Cleanup(func() {
		conn, err := amqp091.Dial(amqpURL)
		if err != nil {
			return
		}
		defer conn.Close()
		ch, err := conn.Channel()
		if err != nil {
			return
		}
		for _, q := range queues {
			_, _ = ch.QueueDelete(q, false, false, false)
		}
		for _, e := range exchanges {
			_ = ch.ExchangeDelete(e, false, false)
		}
	})
}

// poisonOne sends one keyless message through PoisonQueue(pub, init,
// topic) and the guard's permanent error: it must be published and acked
// (the middleware returns no error).
func poisonOne(t *testing.T, pub message.Publisher, init message.SubscribeInitializer, topic string) {
	t.Helper()
	poison, err := watermillguard.PoisonQueue(pub, init, topic)
	if err != nil {
		t.Fatalf("PoisonQueue: %v", err)
	}
	h := poison(func(*message.Message) ([]*message.Message, error) {
		return nil, &watermillguard.PermanentError{Err: watermillguard.ErrMissingKey}
	})
	if _, err := h(newMessage("", "no key")); err != nil {
		t.Fatalf("the poisoned message was not acked: %v", err)
	}
}

// readOne reads one message from topic through sub, or nil after 3 s.
func readOne(t *testing.T, sub message.Subscriber, topic string) *message.Message {
	t.Helper()
	return readWithin(t, sub, topic, 3*time.Second)
}

// readWithin reads and acks one message from topic through sub, or nil
// when none came within d.
func readWithin(t *testing.T, sub message.Subscriber, topic string, d time.Duration) *message.Message {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	msgs, err := sub.Subscribe(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-msgs:
		m.Ack()
		return m
	case <-ctx.Done():
		return nil
	}
}

// RabbitMQ with watermill-amqp's pub/sub configuration (an exchange per
// topic, a queue per consumer group): SubscribeInitialize declares the
// exchange and the init subscriber's group queue, bound to it. The
// poisoned message is in that group's queue: the group that set the topic
// up reads it (held). Another group, subscribing later, gets a queue of its
// own that was not bound when the message was published — the docs' "read
// the poison topic with the same broker configuration you set it up with"
// (the group is part of the configuration).
func TestAttack54PoisonQueueOnRabbitMQPubSub(t *testing.T) {
	needBroker(t, "rabbitmq", "127.0.0.1:5672")
	topic := "wmguard_a54_" + watermill.NewShortUUID()
	amqpDelete(t, []string{topic + "_consumer", topic + "_ops"}, []string{topic})
	cfg := amqp.NewDurablePubSubConfig(amqpURL, amqp.GenerateQueueNameTopicNameWithSuffix("consumer"))
	pub, err := amqp.NewPublisher(cfg, logger)
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	sub, err := amqp.NewSubscriber(cfg, logger)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	poisonOne(t, pub, sub, topic)

	ops, err := amqp.NewSubscriber(amqp.NewDurablePubSubConfig(amqpURL, amqp.GenerateQueueNameTopicNameWithSuffix("ops")), logger)
	if err != nil {
		t.Fatal(err)
	}
	defer ops.Close()
	if m := readOne(t, ops, topic); m != nil {
		t.Errorf("another group read %q: its queue was bound before the publish?", m.Payload)
	}
	reader, err := amqp.NewSubscriber(cfg, logger)
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	m := readOne(t, reader, topic)
	if m == nil {
		t.Fatal("the group that set the poison topic up cannot read the poisoned message: acked into nothing")
	}
	if string(m.Payload) != "no key" || m.Metadata.Get(middleware.ReasonForPoisonedKey) == "" {
		t.Fatalf("read %q (reason %q), want the keyless message with its reason", m.Payload, m.Metadata.Get(middleware.ReasonForPoisonedKey))
	}
}

// down is a SubscribeInitializer whose broker is down.
type down struct{}

func (down) SubscribeInitialize(string) error { return errors.New("not connected to AMQP") }

// The broker down at start: PoisonQueue refuses (the deployment does not
// start with a topic it could not set up); watermill-amqp's subscriber
// itself cannot be made without its broker.
func TestAttack54PoisonQueueBrokerDownAtStart(t *testing.T) {
	if _, err := watermillguard.PoisonQueue(&recorder{}, down{}, "poison"); err == nil {
		t.Fatal("PoisonQueue with the broker down: no error")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	cfg := amqp.NewDurableQueueConfig("amqp://guest:guest@" + addr + "/")
	if sub, err := amqp.NewSubscriber(cfg, logger); err == nil {
		defer sub.Close()
		if _, err := watermillguard.PoisonQueue(&recorder{}, sub, "poison"); err == nil {
			t.Fatal("PoisonQueue on a subscriber whose broker is down: no error")
		}
	}
}

// A restart on NATS JetStream: the stream PoisonQueue made at the first
// start exists; the second start's CreateStream of the same configuration
// must not refuse it (held: JetStream takes an identical create).
func TestAttack54PoisonQueueNATSRestart(t *testing.T) {
	needBroker(t, "nats", "127.0.0.1:4222")
	b := natsJetStream()
	topic := "wmguard_a54r_" + watermill.NewShortUUID()
	t.Cleanup(func() { _ = b.remove(topic) })
	for start := 1; start <= 2; start++ {
		pub, err := b.pub()
		if err != nil {
			t.Fatal(err)
		}
		sub, err := b.sub()
		if err != nil {
			t.Fatal(err)
		}
		poisonOne(t, pub, sub.(message.SubscribeInitializer), topic)
		_ = sub.Close()
		_ = pub.Close()
	}
}

// Issue 54 item 3 through the middleware: Guard.Do's *NotRunError for a
// key in progress, a conflict, a key failed before and a key waiting from
// an earlier run is read by its outcome — retryable ErrInProgress, or a
// *PermanentError for the poison queue — never as the store's error, and
// the handler does not run.
func TestAttack54MiddlewareReadsNotRunByItsOutcome(t *testing.T) {
	g, err := idempotency.NewGuard(memstore.New(), idempotency.Options{Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	fp := func(payload string) string { return idempotency.Fingerprint(payload) }
	if c, err := g.Claim(ctx, "held", fp("p")); err != nil || !c.Outcome.Owned() {
		t.Fatal(c.Outcome, err)
	}
	for key, work := range map[string]func(context.Context, idempotency.Run) (idempotency.Done, error){
		"failed": func(context.Context, idempotency.Run) (idempotency.Done, error) {
			return idempotency.Done{}, fmt.Errorf("%w: no", idempotency.ErrPermanent)
		},
		"later": func(context.Context, idempotency.Run) (idempotency.Done, error) {
			return idempotency.Done{}, &idempotency.Wait{Until: time.Now().Add(time.Hour), Status: "LATER"}
		},
		"done": func(context.Context, idempotency.Run) (idempotency.Done, error) {
			return idempotency.Done{Status: watermillguard.Status}, nil
		},
	} {
		if _, err := g.Do(ctx, key, fp("p"), work, idempotency.DoOptions{}); err != nil {
			t.Fatal(key, err)
		}
	}
	ran := 0
	h := watermillguard.Middleware(g, watermillguard.Options{RetryDelay: -1})(func(*message.Message) ([]*message.Message, error) {
		ran++
		return nil, nil
	})
	for _, tt := range []struct {
		key, payload string
		permanent    bool
		is           error
	}{
		{"held", "p", false, watermillguard.ErrInProgress},
		{"later", "p", false, watermillguard.ErrInProgress},
		{"failed", "p", true, watermillguard.ErrFailedBefore},
		{"done", "another payload", true, watermillguard.ErrConflict},
	} {
		_, err := h(newMessage(tt.key, tt.payload))
		if !errors.Is(err, tt.is) || watermillguard.IsPermanent(err) != tt.permanent || errors.Is(err, idempotency.ErrUnavailable) {
			t.Errorf("%s: %v (permanent %v); want %v, permanent %v", tt.key, err, watermillguard.IsPermanent(err), tt.is, tt.permanent)
		}
	}
	if ran != 0 {
		t.Errorf("the handler ran %d times, want never", ran)
	}
}

// NATS JetStream names the stream after the topic, and a stream name
// cannot hold '.': a poison topic such as "payments.poison" (the docs'
// example before attack 54) is refused at start — held (refused, not
// lost); the docs now name it payments_poison.
func TestAttack54PoisonQueueNATSDottedTopicRefused(t *testing.T) {
	needBroker(t, "nats", "127.0.0.1:4222")
	b := natsJetStream()
	pub, err := b.pub()
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	sub, err := b.sub()
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if _, err := watermillguard.PoisonQueue(pub, sub.(message.SubscribeInitializer), "wmguard_a54."+watermill.NewShortUUID()); err == nil {
		t.Fatal("PoisonQueue on NATS with a dotted poison topic started: where do its messages go?")
	}
}

// Attack 54 (fixed: the Waiting outcome waits its RetryAfter): a key
// WAITING from an earlier delivery (a handler's *idempotency.Wait: a retry
// scheduled in an hour) was nacked after DefaultRetryDelay (1 s), although
// Do's NotRunError now says how long (RetryAfter, until its time): every
// second a delivery is spent, and a broker's delivery limit (RabbitMQ
// quorum queues' 20, JetStream MaxDeliver) drops or dead-letters the
// message within seconds — the scheduled run never happens. A key in
// progress waits its RetryAfter for this very reason (watermill.md, "The
// delivery limit"); a waiting key does not. Shown with a 3 s wait: the
// middleware returns after 1 s.
func TestAttack54WaitingKeySpendsADeliveryASecond(t *testing.T) {
	g, err := idempotency.NewGuard(memstore.New(), idempotency.Options{SkewMargin: -1})
	if err != nil {
		t.Fatal(err)
	}
	h := watermillguard.Middleware(g, watermillguard.Options{})(func(*message.Message) ([]*message.Message, error) {
		return nil, &idempotency.Wait{Until: time.Now().Add(3 * time.Second), Status: "RETRY_SCHEDULED"}
	})
	if _, err := h(newMessage("K", "p")); !errors.Is(err, watermillguard.ErrInProgress) {
		t.Fatalf("the first delivery: %v", err)
	}
	start := time.Now()
	_, err = h(newMessage("K", "p"))
	if took := time.Since(start); took < 2*time.Second {
		t.Fatalf("a redelivery of a key waiting 3 s more returned after %v (%v): a delivery spent a second", took.Round(10*time.Millisecond), err)
	}
}
