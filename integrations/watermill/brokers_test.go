package watermillguard_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	wmnats "github.com/ThreeDotsLabs/watermill-nats/v2/pkg/jetstream"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	amqp091 "github.com/rabbitmq/amqp091-go"
)

// The brokers on this machine (.ci/run starts them when they are down).
var (
	amqpURL = envOr("IC_AMQP_TEST_URL", "amqp://guest:guest@127.0.0.1:5672/")
	natsURL = envOr("IC_NATS_TEST_URL", "nats://127.0.0.1:4222")
)

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// unreachable is internal/testenv's rule (not importable from this
// module): fail in CI, skip elsewhere, saying how to start the server.
func unreachable(t testing.TB, msg string) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// broker is what a scenario needs of one broker: a publisher, a
// subscriber sharing one durable queue per topic, and the topic's removal.
type broker struct {
	name   string
	pub    func() (message.Publisher, error)
	sub    func() (message.Subscriber, error)
	create func(topic string) error
	remove func(topic string) error
}

var logger = watermill.NopLogger{}

func rabbitMQ() broker {
	cfg := amqp.NewDurableQueueConfig(amqpURL)
	return broker{
		name:   "rabbitmq",
		pub:    func() (message.Publisher, error) { return amqp.NewPublisher(cfg, logger) },
		sub:    func() (message.Subscriber, error) { return amqp.NewSubscriber(cfg, logger) },
		create: func(topic string) error { return nil }, // the subscriber declares the queue
		remove: func(topic string) error {
			conn, err := amqp091.Dial(amqpURL)
			if err != nil {
				return err
			}
			defer conn.Close()
			ch, err := conn.Channel()
			if err != nil {
				return err
			}
			_, err = ch.QueueDelete(topic, false, false, false)
			return err
		},
	}
}

// natsJetStream: one stream per topic, one durable consumer shared by
// every subscriber (the queue), AckWait 3s so that a killed consumer's
// message comes back quickly.
func natsJetStream() broker {
	withJS := func(f func(context.Context, jetstream.JetStream) error) error {
		nc, err := nats.Connect(natsURL)
		if err != nil {
			return err
		}
		defer nc.Close()
		js, err := jetstream.New(nc)
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return f(ctx, js)
	}
	durable := func(ctx context.Context, js jetstream.JetStream, topic string) (jetstream.Consumer, func(context.Context, watermill.LoggerAdapter), error) {
		c, err := js.CreateOrUpdateConsumer(ctx, topic, jetstream.ConsumerConfig{
			Durable: "guard", AckPolicy: jetstream.AckExplicitPolicy, AckWait: 3 * time.Second,
		})
		return c, nil, err
	}
	return broker{
		name: "nats",
		pub: func() (message.Publisher, error) {
			return wmnats.NewPublisher(wmnats.PublisherConfig{URL: natsURL, Logger: logger})
		},
		sub: func() (message.Subscriber, error) {
			return wmnats.NewSubscriber(wmnats.SubscriberConfig{URL: natsURL, Logger: logger, ResourceInitializer: durable, AckWaitTimeout: time.Minute})
		},
		create: func(topic string) error {
			return withJS(func(ctx context.Context, js jetstream.JetStream) error {
				_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: topic, Subjects: []string{topic}})
				return err
			})
		},
		remove: func(topic string) error {
			return withJS(func(ctx context.Context, js jetstream.JetStream) error { return js.DeleteStream(ctx, topic) })
		},
	}
}

func brokers() []broker { return []broker{rabbitMQ(), natsJetStream()} }

func brokerAddr(b broker) (addr, start string) {
	if b.name == "rabbitmq" {
		return "127.0.0.1:5672", "rabbitmq-server -detached (or set IC_AMQP_TEST_URL)"
	}
	return "127.0.0.1:4222", "start-stop-daemon --start --oknodo --background --exec /usr/sbin/nats-server -- -a 127.0.0.1 -p 4222 -js -sd /var/lib/nats-server (or set IC_NATS_TEST_URL)"
}

// topicFor makes a topic (queue, stream) of the test's own and removes it
// when the test ends.
func topicFor(t *testing.T, b broker) string {
	t.Helper()
	addr, start := brokerAddr(b)
	if b.name == "rabbitmq" && os.Getenv("IC_AMQP_TEST_URL") == "" || b.name == "nats" && os.Getenv("IC_NATS_TEST_URL") == "" {
		c, err := net.DialTimeout("tcp", addr, 2*time.Second)
		if err != nil {
			unreachable(t, fmt.Sprintf("%s at %s unreachable (%v); start it with: %s", b.name, addr, err, start))
		}
		c.Close()
	}
	topic := "wmguard_" + watermill.NewShortUUID()
	if err := b.create(topic); err != nil {
		unreachable(t, fmt.Sprintf("%s: cannot create %s (%v); start it with: %s", b.name, topic, err, start))
	}
	t.Cleanup(func() {
		if err := b.remove(topic); err != nil {
			t.Errorf("removing %s: %v", topic, err)
		}
	})
	return topic
}
