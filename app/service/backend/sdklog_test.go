package backend

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"

	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/smithy-go/logging"

	"github.com/finedge/idempotent-consumer/internal/awstest"
)

type recorder struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (r *recorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *recorder) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.recs = append(r.recs, rec)
	return nil
}
func (r *recorder) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *recorder) WithGroup(string) slog.Handler      { return r }

// TestTheAWSSDKLogsThroughSlogAtDebug: the SDK's "WARN failed to discard
// remaining HTTP response body" lines landed raw in logs and command
// output; the aws.Config LoadAWS returns logs through slog at debug, so
// at the default level nothing of it is printed.
func TestTheAWSSDKLogsThroughSlogAtDebug(t *testing.T) {
	awstest.Offline(t)
	rec := &recorder{}
	cfg, err := LoadAWS(t.Context(), slog.New(rec))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Logger.Logf(logging.Warn, "failed to discard remaining HTTP response body, %v", "unexpected EOF")
	if len(rec.recs) != 1 || rec.recs[0].Level != slog.LevelDebug || !strings.Contains(rec.recs[0].Message, "failed to discard remaining HTTP response body, unexpected EOF") {
		t.Fatalf("recorded %+v, want the SDK's line at debug", rec.recs)
	}
	var out bytes.Buffer
	info := slog.New(slog.NewJSONHandler(&out, &slog.HandlerOptions{Level: slog.LevelInfo}))
	cfg, err = LoadAWS(t.Context(), info)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Logger.Logf(logging.Warn, "failed to discard remaining HTTP response body, %v", "unexpected EOF")
	if out.Len() != 0 {
		t.Errorf("at the default level the SDK's line is printed: %s", out.String())
	}
}

// TestTheAWSClientKeepsAConnectionPerHandler: the SDK's default transport
// keeps 10 idle connections per host, so serve's 64 handlers opened (and,
// against AWS, TLS-handshook) new connections in every burst; LoadAWS's
// keeps IdleConnsPerAWSHost, over the handlers' count.
func TestTheAWSClientKeepsAConnectionPerHandler(t *testing.T) {
	awstest.Offline(t)
	cfg, err := LoadAWS(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	c, ok := cfg.HTTPClient.(*awshttp.BuildableClient)
	if !ok {
		t.Fatalf("the HTTP client is a %T, not the SDK's buildable client", cfg.HTTPClient)
	}
	tr := c.GetTransport()
	if tr.MaxIdleConnsPerHost < 64 {
		t.Fatalf("idle connections per host = %d, fewer than serve's 64 handlers", tr.MaxIdleConnsPerHost)
	}
}
