package watermillguard_test

import (
	"context"
	"fmt"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"

	"github.com/finedge/idempotent-consumer/idempotency"
	watermillguard "github.com/finedge/idempotent-consumer/integrations/watermill"
	"github.com/finedge/idempotent-consumer/memstore"
)

// A payment event published three times (an at-least-once upstream) debits
// once; a copy with another amount under the same key and a message without
// a key go to the poison topic instead of being redelivered for ever.
func ExampleMiddleware() {
	guard, err := idempotency.NewGuard(memstore.New(), idempotency.Options{}) // sqlite, postgres, … in production
	if err != nil {
		panic(err)
	}
	logger := watermill.NopLogger{}
	pubSub := gochannel.NewGoChannel(gochannel.Config{BlockPublishUntilSubscriberAck: true}, logger)
	router, err := message.NewRouter(message.RouterConfig{}, logger)
	if err != nil {
		panic(err)
	}
	poison, err := middleware.PoisonQueueWithFilter(pubSub, "payments.poison", watermillguard.IsPermanent)
	if err != nil {
		panic(err)
	}
	// The poison queue goes outside the guard: it takes the permanent errors.
	router.AddMiddleware(poison, watermillguard.Middleware(guard, watermillguard.Options{}))
	debits := 0
	router.AddConsumerHandler("debit", "payments", pubSub, func(msg *message.Message) error {
		debits++ // the side effect: call the bank here
		fmt.Printf("debit %s %s\n", msg.Metadata.Get(watermillguard.KeyMetadata), msg.Payload)
		return nil
	})
	poisoned, err := pubSub.Subscribe(context.Background(), "payments.poison")
	if err != nil {
		panic(err)
	}
	reasons := make(chan string, 10)
	go func() {
		for p := range poisoned {
			reasons <- p.Metadata.Get(middleware.ReasonForPoisonedKey)
			p.Ack()
		}
	}()
	go func() { _ = router.Run(context.Background()) }()
	<-router.Running()

	publish := func(key, payload string) {
		msg := message.NewMessage(watermill.NewUUID(), []byte(payload))
		if key != "" {
			msg.Metadata.Set(watermillguard.KeyMetadata, key)
		}
		if err := pubSub.Publish("payments", msg); err != nil {
			panic(err)
		}
	}
	for range 3 {
		publish("pay-1", "EUR 10.00")
	}
	publish("pay-1", "EUR 99.00") // the same key, another payload
	publish("", "EUR 5.00")       // no key
	for range 2 {
		fmt.Println("poisoned:", <-reasons)
	}
	_ = router.Close()
	fmt.Println("debits:", debits)
	// Output:
	// debit pay-1 EUR 10.00
	// poisoned: permanent: key "pay-1": conflict: watermillguard: key used with another payload
	// poisoned: permanent: watermillguard: message has no idempotency key
	// debits: 1
}
