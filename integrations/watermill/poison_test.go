package watermillguard_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"

	watermillguard "github.com/finedge/idempotent-consumer/integrations/watermill"
)

// A poisoned message is readable afterwards on the broker, although no one
// had subscribed to the poison topic before: PoisonQueue sets the topic up
// before the router runs. On RabbitMQ, watermill's PoisonQueueWithFilter
// alone publishes to a queue no one declared and acks into nothing (the
// control below shows it).
func TestAPoisonedMessageIsReadableAfterwards(t *testing.T) {
	for _, b := range brokers() {
		for _, guarded := range []bool{true, false} {
			if !guarded && b.name != "rabbitmq" {
				continue // NATS refuses a publish to a subject without a stream: nacked, not lost
			}
			name := b.name + "/PoisonQueue"
			if !guarded {
				name = b.name + "/PoisonQueueWithFilter alone loses it"
			}
			t.Run(name, func(t *testing.T) {
				topic := topicFor(t, b)
				poisonTopic := "wmguard_poison_" + watermill.NewShortUUID()
				t.Cleanup(func() { _ = b.remove(poisonTopic) })
				guard, db := openGuard(t, filepath.Join(t.TempDir(), "guard.db"))
				defer db.Close()
				pub, err := b.pub()
				if err != nil {
					t.Fatal(err)
				}
				defer pub.Close()
				sub, err := b.sub()
				if err != nil {
					t.Fatal(err)
				}
				published := &signalling{Publisher: pub, topic: poisonTopic, done: make(chan struct{}, 1)}
				var poison message.HandlerMiddleware
				if guarded {
					poison, err = watermillguard.PoisonQueue(published, sub.(message.SubscribeInitializer), poisonTopic)
				} else {
					poison, err = middleware.PoisonQueueWithFilter(published, poisonTopic, watermillguard.IsPermanent)
				}
				if err != nil {
					t.Fatal(err)
				}
				router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 10 * time.Second}, logger)
				if err != nil {
					t.Fatal(err)
				}
				router.AddMiddleware(poison, watermillguard.Middleware(guard, watermillguard.Options{}))
				router.AddConsumerHandler("effect", topic, sub, func(*message.Message) error { return nil })
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				go func() { _ = router.Run(ctx) }()
				<-router.Running()
				// A keyless message: permanent (ErrMissingKey), to the poison topic.
				if err := pub.Publish(topic, newMessage("", "no key")); err != nil {
					t.Fatal(err)
				}
				select {
				case <-published.done: // the broker took the publish; the router acks the message next
				case <-time.After(30 * time.Second):
					t.Fatal("the keyless message was not published to the poison topic")
				}
				if err := router.Close(); err != nil {
					t.Fatal(err)
				}
				// Now someone reads the poison topic.
				reader, err := b.sub()
				if err != nil {
					t.Fatal(err)
				}
				defer reader.Close()
				switch m := readWithin(t, reader, poisonTopic, 5*time.Second); {
				case m != nil:
					if !guarded {
						t.Fatalf("the control read %q: the broker kept it, so the control shows nothing", m.Payload)
					}
					if string(m.Payload) != "no key" || m.Metadata.Get(middleware.ReasonForPoisonedKey) == "" {
						t.Fatalf("the poison topic holds %q (reason %q), want the keyless message with its reason", m.Payload, m.Metadata.Get(middleware.ReasonForPoisonedKey))
					}
				case guarded:
					t.Fatal("the poisoned message is not on the poison topic: acked into nothing")
				}
			})
		}
	}
}

// PoisonQueue refuses to start without the subscriber that sets the topic up.
func TestPoisonQueueNeedsTheSubscriber(t *testing.T) {
	if _, err := watermillguard.PoisonQueue(&recorder{}, nil, "poison"); err == nil {
		t.Fatal("PoisonQueue without a subscriber: no error")
	}
}

// signalling tells when a publish to topic has returned without error.
type signalling struct {
	message.Publisher
	topic string
	done  chan struct{}
}

func (s *signalling) Publish(topic string, msgs ...*message.Message) error {
	err := s.Publisher.Publish(topic, msgs...)
	if err == nil && topic == s.topic {
		select {
		case s.done <- struct{}{}:
		default:
		}
	}
	return err
}
