//go:build knowndefects

package watermillguard_test

import (
	"context"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	wmnats "github.com/ThreeDotsLabs/watermill-nats/v2/pkg/jetstream"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	watermillguard "github.com/finedge/idempotent-consumer/integrations/watermill"
)

// Known defect (attack 54): PoisonQueue trusts that init is configured as
// pub is. A publisher of watermill-amqp's queue configuration (the default
// exchange, routing key = topic) with a subscriber of its pub/sub
// configuration (an exchange per topic, a queue per group): the initializer
// declares exchange "topic" and queue "topic_consumer", the publisher
// routes to a queue named "topic" that does not exist, RabbitMQ drops the
// message (no mandatory flag, no confirms), and PoisonQueue acks it —
// the loss the change was made to prevent, with no error at start.
func TestAttack54PoisonQueueMismatchedConfigsSwallow(t *testing.T) {
	needBroker(t, "rabbitmq", "127.0.0.1:5672")
	topic := "wmguard_a54m_" + watermill.NewShortUUID()
	amqpDelete(t, []string{topic, topic + "_consumer"}, []string{topic})
	pub, err := amqp.NewPublisher(amqp.NewDurableQueueConfig(amqpURL), logger)
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	subCfg := amqp.NewDurablePubSubConfig(amqpURL, amqp.GenerateQueueNameTopicNameWithSuffix("consumer"))
	sub, err := amqp.NewSubscriber(subCfg, logger)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	poisonOne(t, pub, sub, topic) // PoisonQueue said nothing; the message was acked
	for _, cfg := range []amqp.Config{subCfg, amqp.NewDurableQueueConfig(amqpURL)} {
		r, err := amqp.NewSubscriber(cfg, logger)
		if err != nil {
			t.Fatal(err)
		}
		m := readOne(t, r, topic)
		r.Close()
		if m != nil {
			return // readable somewhere: held
		}
	}
	t.Fatal("the poisoned message is on no queue (publisher and subscriber of different configurations) and PoisonQueue started without an error: acked into nothing")
}

// Known defect (attack 54): on NATS JetStream PoisonQueue refuses to start
// when the poison subject is already captured by a stream it did not make
// itself — a stream of the topic's name with more subjects (or other
// limits: an operator's MaxAge), or another stream (a DLQ stream over
// "*.poison"): watermill-nats's SubscribeInitialize is a CreateStream of
// {Name: topic, Subjects: [topic]}, which fails on both, although a
// poisoned message published there would be kept. (NATS refuses a publish
// to a subject no stream captures, so a missing stream never loses a
// message there: this is a start refused, not a loss.)
func TestAttack54PoisonQueueNATSExistingStream(t *testing.T) {
	needBroker(t, "nats", "127.0.0.1:4222")
	nc, err := nats.Connect(natsURL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	pub, err := wmnats.NewPublisher(wmnats.PublisherConfig{URL: natsURL, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	sub, err := wmnats.NewSubscriber(wmnats.SubscriberConfig{URL: natsURL, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()

	t.Run("same name, more subjects and a MaxAge", func(t *testing.T) {
		topic := "wmguard_a54n_" + watermill.NewShortUUID()
		if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: topic, Subjects: []string{topic, topic + ".>"}, MaxAge: 24 * time.Hour}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = js.DeleteStream(context.Background(), topic) })
		if _, err := watermillguard.PoisonQueue(pub, sub, topic); err != nil {
			t.Errorf("PoisonQueue over a stream that captures the topic: %v", err)
		}
	})
	t.Run("another stream captures the subject", func(t *testing.T) {
		topic := "wmguard_a54n_" + watermill.NewShortUUID()
		dlq := "DLQ_" + watermill.NewShortUUID()
		if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: dlq, Subjects: []string{topic}}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = js.DeleteStream(context.Background(), dlq) })
		if _, err := watermillguard.PoisonQueue(pub, sub, topic); err != nil {
			t.Errorf("PoisonQueue over a subject another stream captures: %v", err)
		}
	})
}
