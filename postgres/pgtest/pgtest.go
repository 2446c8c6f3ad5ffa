// Package pgtest opens the test PostgreSQL database (internal/dbtest's
// server and schema rules) as a *postgres.DB in a schema of the test's own,
// dropped when the test ends. A test that cannot reach the server fails in
// CI (CI=true) and skips elsewhere, saying how to start it.
package pgtest

import (
	"context"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/internal/dbtest"
	"github.com/finedge/idempotent-consumer/internal/testenv"
	"github.com/finedge/idempotent-consumer/postgres"
)

// Open opens the test database in a schema of the test's own.
func Open(t testing.TB) *postgres.DB {
	t.Helper()
	return With(t, postgres.Options{})
}

// With is Open with o (its Schema is the test's own).
func With(t testing.TB, o postgres.Options) *postgres.DB {
	t.Helper()
	o.Schema = dbtest.Schema(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	db, err := postgres.Open(ctx, dbtest.PostgresURL(), o)
	if err != nil {
		testenv.Unreachable(t, "PostgreSQL at "+dbtest.PostgresURL()+" unreachable ("+err.Error()+"); start it with: pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start (or set "+dbtest.PostgresEnv+")")
	}
	t.Cleanup(db.Close)
	return db
}
