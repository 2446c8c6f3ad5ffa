package postgres_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/internal/dbtest"
	"github.com/finedge/idempotent-consumer/postgres"
	"github.com/finedge/idempotent-consumer/postgres/pgtest"
)

// A connection string without sslmode verifies the server: the test
// server offers TLS with a certificate no trusted CA signed, which
// sslmode=prefer (the driver's default) would have accepted silently — or
// fallen back to plaintext. A weaker mode works only when written out, and
// says so (SSLMode).
func TestWithoutSSLModeTheServerIsVerified(t *testing.T) {
	pgtest.Open(t) // fails in CI, skips elsewhere, when the server is unreachable
	t.Setenv("PGSSLMODE", "")
	explicit := dbtest.PostgresURL()
	if !strings.Contains(explicit, "sslmode=disable") {
		t.Skip("the test database URL is not the local one with sslmode=disable")
	}
	bare := strings.Replace(strings.Replace(explicit, "?sslmode=disable", "", 1), "&sslmode=disable", "", 1)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for _, conn := range []string{bare, "host=127.0.0.1 port=5432 user=postgres dbname=test"} {
		db, err := postgres.Open(ctx, conn, postgres.Options{Schema: dbtest.Schema(t)})
		if err == nil {
			db.Close()
			t.Fatalf("%q connected to a server whose certificate nobody verified", conn)
		}
		if !strings.Contains(err.Error(), "verify-full") {
			t.Errorf("%q: %v, want the error to say the default is verify-full", conn, err)
		}
	}
	db, err := postgres.Open(ctx, explicit, postgres.Options{Schema: dbtest.Schema(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if db.SSLMode() != "disable" {
		t.Errorf("SSLMode() = %q, want disable", db.SSLMode())
	}
	t.Setenv("PGSSLMODE", "require")
	db2, err := postgres.Open(ctx, bare, postgres.Options{Schema: dbtest.Schema(t)})
	if err != nil {
		t.Fatalf("PGSSLMODE=require: %v", err)
	}
	defer db2.Close()
	if db2.SSLMode() != "require" {
		t.Errorf("SSLMode() = %q under PGSSLMODE=require", db2.SSLMode())
	}
}
