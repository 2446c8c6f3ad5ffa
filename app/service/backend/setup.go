package backend

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/finedge/idempotent-consumer/app/awssns"
	"github.com/finedge/idempotent-consumer/app/service/cli"
)

// DefaultTopic is the topic setup --notify sns creates unless told.
const DefaultTopic = "charge-pre-debit-notices"

// SetupOptions are chargerecovery setup's flags: the backend's, the
// visibility timeout of the queue created (default 30s), and, with
// Channel "sns", the notification topic to create (default DefaultTopic).
type SetupOptions struct {
	Backend        Config
	Visibility     time.Duration
	Channel, Topic string
}

// Bind defines the flags on f.
func (o *SetupOptions) Bind(f *cli.FlagSet) {
	o.Backend.Bind(f)
	f.Duration(&o.Visibility, "visibility", "IC_VISIBILITY", 30*time.Second, "visibility timeout of the queue created")
	// The same flags and variables as serve's, so one environment file does
	// for both: setup creates the topic serve then publishes to.
	f.String(&o.Channel, "notify", "IC_NOTIFY", "", "sns: also create the pre-debit notification topic (any other channel: nothing to create)")
	f.String(&o.Topic, "notify-sns-topic", "IC_NOTIFY_SNS_TOPIC", DefaultTopic, "--notify sns: the topic to create, a name or serve's ARN (a name ending in .fifo makes a FIFO topic); it prints the ARN serve's --notify-sns-topic wants")
}

// Setup creates (and migrates) the backend's queues and store, checks
// they answer, and with --notify sns creates the topic; it says what is
// ready on out.
func Setup(ctx context.Context, o SetupOptions, out io.Writer) error {
	var p cli.Problems
	o.Backend.Check(&p)
	if o.Visibility < time.Second || o.Visibility > 12*time.Hour {
		p.Add("--visibility %s is outside 1s-12h", o.Visibility)
	}
	sns := strings.TrimSpace(o.Channel) == "sns" // pipeline.NotifySNS
	name := awssns.TopicName(strings.TrimSpace(o.Topic))
	if sns && !awssns.ValidTopicName(name) {
		p.Add("--notify-sns-topic %q: a topic name is 1-256 letters, digits, - and _ (.fifo at the end for a FIFO topic)", o.Topic)
	}
	if err := p.Err(); err != nil {
		return err
	}
	b, err := Open(ctx, o.Backend, o.Visibility, true)
	if err != nil {
		return err
	}
	defer b.Close()
	if err := b.Ready(ctx); err != nil {
		return err
	}
	fmt.Fprintf(out, "ready: %s\n", b.Desc)
	for _, n := range b.Notes {
		fmt.Fprintf(out, "note: %s\n", n)
	}
	if !sns {
		return nil
	}
	cfg, err := LoadAWS(ctx, o.Backend.Log)
	if err != nil {
		return err
	}
	arn, err := awssns.CreateTopicFromConfig(ctx, cfg, name)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "ready: sns topic %s\n", arn)
	fmt.Fprintf(out, "serve with: --notify sns --notify-sns-topic %s\n", arn)
	return nil
}
