package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/finedge/idempotent-consumer/app/awssns"
	"github.com/finedge/idempotent-consumer/app/service/backend"
	"github.com/finedge/idempotent-consumer/app/service/cli"
	"github.com/finedge/idempotent-consumer/app/service/pipeline"
)

func runSetup(ctx context.Context, env *cli.Env, args []string) error {
	f := cli.NewFlagSet(env, "setup", "setup [flags]")
	var (
		bc         backend.Config
		visibility time.Duration
		channel    string
		topic      string
	)
	bc.Bind(f)
	f.Duration(&visibility, "visibility", "IC_VISIBILITY", 30*time.Second, "visibility timeout of the queue created")
	// The same flags and variables as serve's, so one environment file does
	// for both: setup creates the topic serve then publishes to.
	f.String(&channel, "notify", "IC_NOTIFY", "", "sns: also create the pre-debit notification topic (any other channel: nothing to create)")
	f.String(&topic, "notify-sns-topic", "IC_NOTIFY_SNS_TOPIC", defaultTopic, "--notify sns: the topic to create, a name or serve's ARN (a name ending in .fifo makes a FIFO topic); it prints the ARN serve's --notify-sns-topic wants")
	if err := f.Parse(args, false); err != nil {
		return err
	}
	var p cli.Problems
	bc.Check(&p)
	if visibility < time.Second || visibility > 12*time.Hour {
		p.Add("--visibility %s is outside 1s-12h", visibility)
	}
	channel = strings.TrimSpace(channel)
	name := awssns.TopicName(strings.TrimSpace(topic))
	if channel == pipeline.NotifySNS && !validTopicName(name) {
		p.Add("--notify-sns-topic %q: a topic name is 1-256 letters, digits, - and _ (.fifo at the end for a FIFO topic)", topic)
	}
	if err := p.Err(); err != nil {
		return err
	}
	b, err := backend.Open(ctx, bc, visibility, true)
	if err != nil {
		return err
	}
	defer b.Close()
	if err := b.Ready(ctx); err != nil {
		return err
	}
	fmt.Fprintf(env.Stdout, "ready: %s\n", b.Desc)
	for _, n := range b.Notes {
		fmt.Fprintf(env.Stdout, "note: %s\n", n)
	}
	if channel != pipeline.NotifySNS {
		return nil
	}
	cfg, err := backend.LoadAWS(ctx, bc.Log)
	if err != nil {
		return err
	}
	arn, err := awssns.CreateTopicFromConfig(ctx, cfg, name)
	if err != nil {
		return err
	}
	fmt.Fprintf(env.Stdout, "ready: sns topic %s\n", arn)
	fmt.Fprintf(env.Stdout, "serve with: --notify sns --notify-sns-topic %s\n", arn)
	return nil
}

// defaultTopic is the topic setup --notify sns creates unless told.
const defaultTopic = "charge-pre-debit-notices"

// validTopicName is SNS's rule for a topic name.
func validTopicName(name string) bool {
	base := strings.TrimSuffix(name, ".fifo")
	if base == "" || len(name) > 256 {
		return false
	}
	for _, r := range base {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
			return false
		}
	}
	return true
}
