package redact_test

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/finedge/idempotent-consumer/internal/redact"
)

func TestURLLeavesNoSecret(t *testing.T) {
	for _, tc := range []struct{ raw, want string }{
		{"https://svc_user:s3cr3t-pw@bank.example:8443/api", "https://bank.example:8443/api"},
		{"redis://:Zm9v/YmFy@cache:6379/0", "redis://cache:6379/0"},
		{"rediss://default:p#ss@cache:6380", "rediss://cache:6380"},
		{"https://u:1234#5@host/x", "https://host/x"},
		{"https://hooks.example/notify?token=abcdef&x=1#frag", "https://hooks.example/notify"},
		{"postgres://app:pw@db:5432/bank?sslmode=verify-full&password=other", "postgres://db:5432/bank"},
		{"host=db user=app password='p w' dbname=bank", "host=db user=app password=[redacted] dbname=bank"},
		{"http://127.0.0.1:8081", "http://127.0.0.1:8081"},
		{"", ""},
	} {
		if got := redact.URL(tc.raw); got != tc.want {
			t.Errorf("URL(%q) = %q, want %q", tc.raw, got, tc.want)
		}
	}
}

func TestErrorShowsNeitherTheURLNorAPieceOfItsPassword(t *testing.T) {
	const pw = "Zm9v/YmFy"
	raw := "redis://:" + pw + "@cache:6379/0"
	_, perr := redis.ParseURL(raw)
	if perr == nil {
		t.Fatal("the URL parsed: the test needs one that does not")
	}
	for _, err := range []error{
		perr,
		fmt.Errorf("dial %s: connection refused", raw),
		&url.Error{Op: "Post", URL: "https://user:" + pw + "@bank/v1", Err: errors.New("EOF")},
	} {
		got := redact.Error(err, raw).Error() + redact.Error(err, "https://user:"+pw+"@bank/v1").Error()
		for _, bad := range []string{pw, "Zm9v", "YmFy"} {
			if strings.Contains(got, bad) {
				t.Errorf("redact.Error(%q) = %q holds %q", err, got, bad)
			}
		}
		if !errors.Is(redact.Error(err, raw), err) {
			t.Errorf("redact.Error hides the original from errors.Is")
		}
	}
}
