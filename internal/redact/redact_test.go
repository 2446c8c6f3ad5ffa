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

// TestServerNamesTheServerAndNoCredential: an error says which server
// failed (host:port/db), never a password.
func TestServerNamesTheServerAndNoCredential(t *testing.T) {
	for _, tc := range []struct{ raw, want string }{
		{"postgres://app:s3cretpw@db.internal:5432/bank?sslmode=verify-full&password=other", "db.internal:5432/bank"},
		{"postgres://postgres@127.0.0.1:5432/test?sslmode=disable", "127.0.0.1:5432/test"},
		{"postgresql://u:p@ss/w0rd@db:5432/x", "db:5432/x"},
		{"host=db.internal port=5432 user=app password=s3cretpw dbname=bank sslmode=verify-full", "db.internal:5432/bank"},
		{"host='db' password='s3cret pw' dbname='bank'", "db/bank"},
		{"redis://:s3cretpw@cache:6379/0", "cache:6379/0"},
		{"rediss://default:s3cretpw@cache:6380", "cache:6380"},
		{"", ""},
	} {
		got := redact.Server(tc.raw)
		if got != tc.want {
			t.Errorf("Server(%q) = %q, want %q", tc.raw, got, tc.want)
		}
		if strings.Contains(got, "s3cret") || strings.Contains(got, "w0rd") {
			t.Errorf("Server(%q) = %q holds the password", tc.raw, got)
		}
	}
}

// TestErrorKeepsADatabaseUserName: a PostgreSQL error for a URL with a
// user and no password used to read "[redacted]: connect: … user=[redacted]"
// (the user name, "postgres", replaced everywhere); a database user name
// is shown, its password never, and an https user name (maybe a token)
// still is not.
func TestErrorKeepsADatabaseUserName(t *testing.T) {
	raw := "postgres://postgres@127.0.0.1:5999/test?sslmode=disable"
	err := errors.New("postgres: connect: failed to connect to `user=postgres database=test`: 127.0.0.1:5999: connection refused")
	if got := redact.Error(err, raw).Error(); got != err.Error() {
		t.Errorf("got %q, want it unchanged", got)
	}
	raw = "postgres://postgres:hunter22x@127.0.0.1:5999/test"
	err = errors.New("postgres: connect " + raw + ": password hunter22x refused for user=postgres")
	got := redact.Error(err, raw).Error()
	if strings.Contains(got, "hunter22x") || !strings.Contains(got, "user=postgres") || !strings.HasPrefix(got, "postgres: connect") {
		t.Errorf("got %q", got)
	}
	raw = "https://ghp_tokenvalue123@hooks.example/x"
	if got := redact.Error(errors.New("POST for ghp_tokenvalue123 failed"), raw).Error(); strings.Contains(got, "ghp_tokenvalue123") {
		t.Errorf("an https user name (a token) printed: %q", got)
	}
}
