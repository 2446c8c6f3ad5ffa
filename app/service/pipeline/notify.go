package pipeline

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/finedge/idempotent-consumer/internal/redact"

	"github.com/aws/aws-sdk-go-v2/service/sns"

	"github.com/finedge/idempotent-consumer/app/awssns"
	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/app/notify"
	"github.com/finedge/idempotent-consumer/app/notifysim"
	"github.com/finedge/idempotent-consumer/app/service/backend"
	"github.com/finedge/idempotent-consumer/app/service/cli"
	"github.com/finedge/idempotent-consumer/app/tracing"
	"github.com/finedge/idempotent-consumer/app/webhook"
)

// The notification channels.
const (
	NotifySNS     = "sns"
	NotifyWebhook = "webhook"
	NotifyLog     = "log"
	NotifySim     = "sim"
)

// NotifyConfig chooses the pre-debit notification channel. There is no
// default: a consumer that silently sent notices to the simulator would
// notify no customer.
type NotifyConfig struct {
	Channel  string
	URL      string // webhook
	TopicARN string // sns
	// Auth: how the webhook authenticates (the same options as the bank's).
	Auth AuthFlags
}

// Bind registers the channel flags. The channel's timeout is
// --notify-timeout (Config), the simulator's failure rate
// --notify-fail-rate.
func (n *NotifyConfig) Bind(f *cli.FlagSet) {
	f.String(&n.Channel, "notify", "IC_NOTIFY", "", "pre-debit notification channel (required): sns (--notify-sns-topic), webhook (--notify-url), log (one structured line per notice), or sim (the in-memory simulator: demos and tests only)")
	f.String(&n.URL, "notify-url", "IC_NOTIFY_URL", "", "webhook: where each notice is POSTed (https://…), with Idempotency-Key <chargeId>:pre-debit")
	f.String(&n.TopicARN, "notify-sns-topic", "IC_NOTIFY_SNS_TOPIC", "", "sns: the topic ARN each notice is published to")
	n.Auth.Bind(f, "notify", "IC_NOTIFY", "webhook")
}

// Check reports what is wrong with n.
func (n *NotifyConfig) Check(p *cli.Problems) {
	switch n.Channel {
	case "":
		p.Add("--notify (IC_NOTIFY) is required: sns, webhook, log or sim (sim notifies nobody: demos and tests only)")
	case NotifySNS:
		if n.TopicARN == "" {
			p.Add("--notify sns needs --notify-sns-topic (IC_NOTIFY_SNS_TOPIC), the topic ARN")
		} else if err := awssns.CheckTopicARN(n.TopicARN); err != nil {
			p.Add("--notify-sns-topic: %v", err)
		}
	case NotifyWebhook:
		if n.URL == "" {
			p.Add("--notify webhook needs --notify-url (IC_NOTIFY_URL)")
		} else if _, err := webhook.New(webhook.Options{URL: n.URL}); err != nil {
			p.Add("--notify-url: %v", err)
		}
	case NotifyLog, NotifySim:
	default:
		p.Add("--notify %q is not sns, webhook, log or sim", n.Channel)
	}
	if n.Auth != (AuthFlags{}) {
		if n.Channel != NotifyWebhook {
			p.Add("--notify-ca, --notify-client-cert, --notify-oauth-* and --notify-header-file are for --notify webhook")
		} else if auth, err := n.Auth.Auth(); err != nil {
			p.Add("webhook authentication: %v", err)
		} else if err := auth.CheckURL("--notify-url", n.URL); err != nil && n.URL != "" {
			p.Add("%v", err)
		}
	}
}

// Notifier builds the channel. c gives the timeout and the simulator's
// failure rate.
func (n *NotifyConfig) Notifier(ctx context.Context, c Config, log *slog.Logger) (charge.Notifier, string, error) {
	switch n.Channel {
	case NotifySNS:
		cfg, err := backend.LoadAWS(ctx, log)
		if err != nil {
			return nil, "", err
		}
		s, err := awssns.New(sns.NewFromConfig(cfg), awssns.Options{TopicARN: n.TopicARN})
		if err != nil {
			return nil, "", cli.Usagef("--notify-sns-topic: %v", err)
		}
		return s, "sns " + n.TopicARN, nil
	case NotifyWebhook:
		auth, err := n.Auth.Auth()
		if err != nil {
			return nil, "", cli.Usagef("webhook authentication: %v", err)
		}
		if err := auth.CheckURL("--notify-url", n.URL); err != nil {
			return nil, "", cli.Usagef("%v", err)
		}
		o := webhook.Options{URL: n.URL, Timeout: c.NotifyTimeout, Headers: tracing.Headers}
		desc := "webhook " + redact.URL(n.URL)
		if auth != nil {
			o.HTTPClient = auth.Client()
			desc += " (" + auth.Describe() + ")"
		}
		w, err := webhook.New(o)
		if err != nil {
			return nil, "", cli.Usagef("--notify-url: %v", err)
		}
		return w, desc, nil
	case NotifyLog:
		return notify.NewLog(log), "log", nil
	case NotifySim:
		log.Warn("pre-debit notifications go to the in-memory simulator (--notify sim): no customer is notified; for demos and tests only")
		return notifysim.NewRecorder(c.NotifyFailRate, log), "sim (no customer is notified)", nil
	}
	return nil, "", cli.Usagef("--notify %q is not sns, webhook, log or sim", strings.TrimSpace(n.Channel))
}

// KeptNoticeSender is the channel of n as a sender of kept notices (the
// ones DEBITED_NOTIFICATION_FAILED records keep), each send taking at most
// timeout: renotify's.
func (n NotifyConfig) KeptNoticeSender(ctx context.Context, timeout time.Duration, log *slog.Logger) (charge.NoticeSender, error) {
	nt, _, err := n.Notifier(ctx, Config{NotifyTimeout: timeout}, log)
	if err != nil {
		return nil, err
	}
	s, ok := nt.(charge.NoticeSender)
	if !ok {
		return nil, fmt.Errorf("--notify %s cannot send a kept notice", n.Channel)
	}
	return s, nil
}
