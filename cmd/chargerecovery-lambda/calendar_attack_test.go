package main

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The function reads pipeline.Config, so IC_POSTING_WINDOWS (and
// IC_HOLIDAYS) pass its checks; but nothing in it gates a debit by the
// calendar: a function configured with Monday-to-Friday windows debits on
// Sunday at 03:00. It must refuse the setting, saying so, rather than
// accept it and ignore it.
func TestAttackLambdaRefusesPostingWindowsItCannotKeep(t *testing.T) {
	for name, setting := range map[string]map[string]string{
		"IC_POSTING_WINDOWS": {"IC_POSTING_WINDOWS": "Mon-Fri 06:00-20:00 Asia/Kolkata"},
	} {
		if err := setupWith(t, setting); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("the function with %v: %v; want it refused, naming %s", setting, err, name)
		}
	}
}

// setupWith runs the function's setup with extra settings, against no AWS.
func setupWith(t *testing.T, extra map[string]string) error {
	t.Helper()
	key := filepath.Join(t.TempDir(), "fingerprint.key")
	if err := os.WriteFile(key, []byte("0123456789abcdef0123456789abcdef-lambda-test-key"), 0o600); err != nil {
		t.Fatal(err)
	}
	// Nothing answers on AWS's behalf: a function that got past its checks
	// fails on its first call, for another reason.
	t.Setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:1")
	t.Setenv("AWS_REGION", "us-east-1")
	t.Setenv("AWS_ACCESS_KEY_ID", "test")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "test")
	t.Setenv("AWS_MAX_ATTEMPTS", "1")
	env := map[string]string{
		"IC_BACKEND": "aws", "IC_COREBANK_URL": "http://127.0.0.1:1", "IC_FINGERPRINT_KEY_FILE": key, "IC_NOTIFY": "log",
		"IC_LAMBDA_CHECK_MAPPING": "false",
	}
	for k, v := range extra {
		env[k] = v
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	_, err := setup(ctx, func(k string) string { return env[k] }, io.Discard)
	return err
}
