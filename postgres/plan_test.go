package postgres_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/postgres"
	"github.com/finedge/idempotent-consumer/postgres/pgtest"
)

// Every statement that reads many records can be served by its index in
// the plan PostgreSQL keeps for a prepared statement (the generic one,
// which knows no argument), whatever the arguments: a statement that fell
// back to reading the whole table would be unnoticeable on a test's few
// records and minutes long on ten million. Most records are DONE with
// DEBITED and in no index but the primary key and expires_at's, so the
// partial index must be provably usable by the statements about the
// others. Each statement is planned with its index the only one (the
// others dropped in a transaction rolled back afterwards) and sequential
// scans disabled: a plan that still reads the table cannot use the index.
// (Which plan wins on ten million records is measured, not tested:
// docs/operations/postgres.md.)
func TestRecordQueriesCanBeServedByTheirIndexes(t *testing.T) {
	db := pgtest.Open(t)
	ctx := t.Context()
	if _, err := db.Pool().Exec(ctx, `insert into idempotency_records (key, state, token, fingerprint, attempt, lease_until, created_at, updated_at, expires_at, status)
		select 'B' || lpad(i::text, 6, '0'),
		  case i % 100 when 1 then 'IN_PROGRESS' when 2 then 'FAILED' when 3 then 'WAITING' else 'DONE' end,
		  't', 'f', 1, now(), now(), now(), now() + interval '30 days',
		  case i % 100 when 2 then 'FAILED' when 4 then 'DEBITED_NOTIFICATION_FAILED' when 1 then '' when 3 then '' else 'DEBITED' end
		from generate_series(1, 2000) i; analyze idempotency_records`); err != nil {
		t.Fatal(err)
	}
	indexes := []string{"idempotency_records_pkey", "idempotency_records_open_idx", "idempotency_records_expires_idx"}
	for i, q := range postgres.RecordQueries(time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)) {
		t.Run(q.Name, func(t *testing.T) {
			tx, err := db.Pool().Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(ctx) //nolint:errcheck // the rollback is the point
			for _, ix := range indexes {
				drop := "drop index " + ix
				if ix == "idempotency_records_pkey" {
					drop = "alter table idempotency_records drop constraint " + ix
				}
				if slices.Contains(q.Indexes, ix) {
					continue
				}
				if _, err := tx.Exec(ctx, drop); err != nil {
					t.Fatal(err)
				}
			}
			name := fmt.Sprintf("plan_q%d", i)
			if _, err := tx.Exec(ctx, `set local plan_cache_mode = force_generic_plan; set local enable_seqscan = off; prepare `+name+` as `+q.SQL); err != nil {
				t.Fatalf("prepare: %v", err)
			}
			defer tx.Exec(context.WithoutCancel(ctx), "deallocate "+name) //nolint:errcheck // the session ends with the test
			lits := make([]string, len(q.Args))
			for j, a := range q.Args {
				lits[j] = literal(a)
			}
			rows, err := tx.Query(ctx, "explain execute "+name+"("+strings.Join(lits, ", ")+")")
			if err != nil {
				t.Fatalf("explain: %v", err)
			}
			var plan []string
			for rows.Next() {
				var line string
				if err := rows.Scan(&line); err != nil {
					t.Fatal(err)
				}
				plan = append(plan, line)
			}
			if err := rows.Err(); err != nil {
				t.Fatalf("explain: %v", err)
			}
			text := strings.Join(plan, "\n")
			if strings.Contains(text, "Seq Scan") {
				t.Errorf("the generic plan is not served by %s:\n%s", strings.Join(q.Indexes, " and "), text)
			}
		})
	}
}

// literal writes a as an SQL literal of its kind.
func literal(a any) string {
	switch v := a.(type) {
	case string:
		return "'" + strings.ReplaceAll(v, "'", "''") + "'"
	case time.Time:
		return "'" + v.Format(time.RFC3339Nano) + "'"
	default:
		return fmt.Sprint(v)
	}
}
