package sqlite

import (
	"path/filepath"
	"strings"
	"testing"
)

// Every listing that is not of the bulk is served by the partial index of
// the records not DONE-DEBITED (migration 8), and the bulk's pages walk
// the primary key: none reads the whole table. SQLite uses a partial
// index only for a query that names its predicate, so a statement that
// dropped it would scan; this reads each statement's plan.
func TestTheListingsAreServedByTheirIndexes(t *testing.T) {
	db, err := Open(t.Context(), filepath.Join(t.TempDir(), "plan.db"), OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, tc := range []struct {
		name, sql, index string
		args             int
	}{
		{"stuck count", stuckCountSQL, "idempotency_records_open_idx", 3},
		{"stuck", stuckSQL, "idempotency_records_open_idx", 4},
		{"by result", listByResultSQL[false], "idempotency_records_open_idx", 4},
		{"a state's page", listStateSQL[false], "idempotency_records_open_idx", 8},
		{"the bulk's page", listStateSQL[true], "sqlite_autoindex_idempotency_records_1", 8},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := make([]any, tc.args)
			for i := range args {
				args[i] = 0
			}
			rows, err := db.sql.QueryContext(t.Context(), "explain query plan "+tc.sql, args...)
			if err != nil {
				t.Fatal(err)
			}
			defer rows.Close()
			var plan []string
			for rows.Next() {
				var id, parent, unused int
				var detail string
				if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
					t.Fatal(err)
				}
				plan = append(plan, detail)
			}
			got := strings.Join(plan, "; ")
			if !strings.Contains(got, "SEARCH idempotency_records USING INDEX "+tc.index) {
				t.Errorf("plan %q, want a search of %s", got, tc.index)
			}
		})
	}
}
