package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/finedge/idempotent-consumer/queue"
)

// dlq purge deletes DLQ entries for good (with --force, charges that
// could still be collected). It opened no session: where the backend
// keeps four-eyes settings anyone deleted entries under any --operator
// NAME, and the deletion was not a line of the one audit trail (only a
// log line on stderr) — four-eyes.md lists dlq purge among the commands
// whose every action is in it, signed by its writer. It is now done as
// every other action: the operator named by her key, the lines in the
// trail.
func TestAttack53MovedDLQPurgeIsInTheTrailSignedByItsOperator(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	tokens, own := writeTokens(t, dir, "olga:operator", "ivan:operator")
	auditFile := filepath.Join(dir, "audit.jsonl")
	env := map[string]string{"IC_BACKEND": "embedded", "IC_DB": filepath.Join(dir, "purge.db"), "IC_AUDIT_FILE": auditFile, "IC_CONSOLE_TOKEN_FILE": tokens}
	ctx := t.Context()
	mustSetup(t, env)
	keepFourEyes(t, env, own["console"], tokens, "bulk>5")
	b := openBackend(t, env)
	deadLetter(t, b.Queue, []byte(`{"chargeId":"CHG-P53-1"}`), queue.Reason{Code: "debit_failed", Detail: "bank down"})
	r := runCmd(ctx, env, "dlq", "list", "--json")
	var list struct{ Entries []dlqEntry }
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &list) != nil || len(list.Entries) != 1 {
		t.Fatalf("dlq list: %d %s %s", r.code, r.stdout, r.stderr)
	}
	id := list.Entries[0].ID

	// A name is not an identity where the trail is signed.
	anyone := map[string]string{}
	for k, v := range env {
		anyone[k] = v
	}
	anyone["IC_OPERATOR"] = "ivan"
	if r := runCmd(ctx, anyone, "dlq", "purge", "--force", id); r.code != 2 || !strings.Contains(r.stderr, "--operator-key-file") {
		t.Fatalf("dlq purge by a name alone: %d %s %s", r.code, r.stdout, r.stderr)
	}
	if d, err := b.Queue.Depth(ctx); err != nil || d.DLQ != 1 {
		t.Fatalf("the entry was purged by a name alone: %+v %v", d, err)
	}
	if r := runCmd(ctx, as(env, own["olga"]), "dlq", "purge", "--force", id); r.code != 0 {
		t.Fatalf("dlq purge with her key: %d %s %s", r.code, r.stdout, r.stderr)
	}
	r = runCmd(ctx, env, "audit", "list", "--action", "dlq purge", "--json")
	if r.code != 0 || !strings.Contains(r.stdout, `"operator":"olga"`) || !strings.Contains(r.stdout, "CHG-P53-1") || !strings.Contains(r.stdout, `"result":"purged"`) {
		t.Fatalf("the purge is not in the trail: %d %s %s", r.code, r.stdout, r.stderr)
	}
	if r := runCmd(ctx, env, "audit", "verify"); r.code != 0 || !strings.Contains(r.stdout, "each vouched for by its writer's key") {
		t.Fatalf("verify: %d %s %s", r.code, r.stdout, r.stderr)
	}
}
