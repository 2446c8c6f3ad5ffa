package main

import (
	"bytes"
	"database/sql"
	"encoding/json"
	"fmt"
	mrand "math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/app/service/demo"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
	"github.com/finedge/idempotent-consumer/sqlite"
)

// No full account number leaves the processes: the demo runs as a real
// process with declines (whose messages, like real banks', name the
// account) and faults, logging every decision; then every byte it wrote,
// every record detail and every DLQ reason it left are searched for the
// workload's account numbers. The simulator's own command is searched too.
func TestNoAccountNumberInAnyOutputRecordOrDLQReason(t *testing.T) {
	const seed, charges = 42, 40
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	var out bytes.Buffer
	cmd := exec.Command(exe, "demo", "--seed", fmt.Sprint(seed), "--charges", fmt.Sprint(charges), "--decline-rate", "0.25",
		"--transient-rate", "0.1", "--lost-response-rate", "0.1", "--in-progress-409", "--bad-gateway-rate", "0.1",
		"--verbose", "--json", "--keep")
	cmd.Env = append(os.Environ(), "IC_TEST_RUN_MAIN=1", "TMPDIR="+dir)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("demo: %v\n%s", err, out.String())
	}
	workload := demo.Workload(mrand.New(mrand.NewPCG(seed, 0x1dc0)), "x", charges)
	leaks := func(where string, b []byte) {
		t.Helper()
		for _, c := range workload {
			if bytes.Contains(b, []byte(c.AccountID)) {
				t.Errorf("%s holds the full account number %s", where, c.AccountID)
			}
		}
	}
	leaks("the demo's output", out.Bytes())

	kept := regexp.MustCompile(`kept (\S+\.db)`).FindSubmatch(out.Bytes())
	queue := regexp.MustCompile(`queue (demo-r[0-9a-f]+)`).FindSubmatch(out.Bytes())
	if kept == nil || queue == nil {
		t.Fatalf("no kept database in the demo's output:\n%s", out.String())
	}
	db, err := sqlite.Open(t.Context(), string(kept[1]), sqlite.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	q, err := sqlite.NewQueue(db, sqlite.QueueOptions{Name: string(queue[1])})
	if err != nil {
		t.Fatal(err)
	}
	// Every record, read straight from the file.
	raw, err := sql.Open("sqlite", "file:"+string(kept[1])+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	rows, err := raw.QueryContext(t.Context(), `select key, state, status, detail, prev_detail from idempotency_records`)
	if err != nil {
		t.Fatal(err)
	}
	failed, records := 0, 0
	for rows.Next() {
		var key, state, status, detail, prev string
		if err := rows.Scan(&key, &state, &status, &detail, &prev); err != nil {
			t.Fatal(err)
		}
		records++
		leaks("record "+key, []byte(status+detail+prev))
		if state == string(driver.StateFailed) {
			failed++
			if !strings.Contains(detail, "account ********") {
				t.Errorf("FAILED record %s: detail %q, want the bank's message with the account masked", key, detail)
			}
		}
	}
	rows.Close()
	if records != charges {
		t.Fatalf("%d records in the file, want %d", records, charges)
	}
	if failed == 0 {
		t.Fatal("no charge was declined: the test proves nothing")
	}
	entries, _, err := q.DLQEntries(t.Context(), 1000)
	if err != nil || len(entries) == 0 {
		t.Fatalf("DLQ: %d entries, %v", len(entries), err)
	}
	for id, e := range entries {
		leaks("DLQ reason of "+id, []byte(e.Detail))
	}

	// The simulator's command, with a decline list and a declined debit.
	var bankOut bytes.Buffer
	acct := workload[0].AccountID
	bank := exec.Command(exe, "corebank", "--addr", "127.0.0.1:0", "--decline", acct+"=ACCOUNT_CLOSED", "--log-level", "debug")
	bank.Env = append(os.Environ(), "IC_TEST_RUN_MAIN=1")
	pr, pw, _ := os.Pipe()
	bank.Stdout, bank.Stderr = pw, &bankOut
	if err := bank.Start(); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	line := make([]byte, 64)
	n, _ := pr.Read(line)
	url := strings.TrimSpace(string(line[:n]))
	req, _ := http.NewRequest(http.MethodPost, url+"/v1/debits",
		strings.NewReader(fmt.Sprintf(`{"accountId":%q,"amount":{"minor":100,"currency":"INR"},"chargeType":"SMS_ALERT_FEE"}`, acct)))
	req.Header.Set("Idempotency-Key", "CHG-MASK-1")
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 422 {
		t.Fatalf("declined debit: %v %v", resp, err)
	}
	_ = bank.Process.Signal(syscall.SIGTERM)
	_ = bank.Wait()
	leaks("the corebank command's log", bankOut.Bytes())
}

// serve keys the fingerprints it writes: with a known branch prefix the
// account number cannot be recovered from a stored fingerprint, and
// inspect shows only which key wrote it and a few digits. serve without a
// key file exits 2 saying how to make one.
func TestServeWritesKeyedFingerprintsAndInspectShowsAPrefix(t *testing.T) {
	t.Parallel()
	env := map[string]string{"IC_BACKEND": "embedded", "IC_DB": filepath.Join(t.TempDir(), "keys.db")}
	ids, b, _ := sendCharges(t, env, "KEY", 3)
	serveUntil(t, env, nil, allFinished(t, b, ids))
	rec, err := b.Store.Get(t.Context(), ids[0], time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(rec.Fingerprint, "hs256:") { // a keyed fingerprint: "hs256:<key id>:<hex>"
		t.Fatalf("serve stored an unkeyed fingerprint %.12s…", rec.Fingerprint)
	}
	// sendCharges' accounts are 0098765 and five digits: try them all.
	for n := range 100_000 {
		c := charge.Charge{AccountID: fmt.Sprintf("0098765%05d", n), Amount: charge.Money{Minor: 1000, Currency: "INR"},
			Type: charge.ChequeBookFee, DueDate: time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)}
		if c.Fingerprint(nil) == rec.Fingerprint {
			t.Fatalf("the stored fingerprint gave the account %s away", c.AccountID)
		}
	}
	r := runCmd(t.Context(), env, "inspect", ids[0], "--json")
	var shown struct{ Fingerprint string }
	if err := json.Unmarshal([]byte(r.stdout), &shown); err != nil || r.code != 0 {
		t.Fatalf("inspect --json: %d %v %s %s", r.code, err, r.stdout, r.stderr)
	}
	digest := rec.Fingerprint[strings.LastIndex(rec.Fingerprint, ":")+1:]
	if strings.Contains(r.stdout, digest[8:24]) || !strings.HasPrefix(rec.Fingerprint, strings.TrimSuffix(shown.Fingerprint, "…")) {
		t.Errorf("inspect shows %q of %q, want the key id and a few digits only", shown.Fingerprint, rec.Fingerprint)
	}
	text := runCmd(t.Context(), env, "inspect", ids[0])
	if strings.Contains(text.stdout, digest[8:24]) {
		t.Errorf("inspect shows the whole digest:\n%s", text.stdout)
	}

	short := filepath.Join(t.TempDir(), "short.key")
	if err := os.WriteFile(short, []byte("tooshort"), 0o600); err != nil {
		t.Fatal(err)
	}
	open := filepath.Join(t.TempDir(), "open.key")
	if err := os.WriteFile(open, []byte(strings.Repeat("k", 48)), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(open, 0o644); err != nil {
		t.Fatal(err)
	}
	for file, want := range map[string]string{"": "--fingerprint-key-file (IC_FINGERPRINT_KEY_FILE) is required", short: "want at least 32",
		open: "chmod 600 " + open} {
		e := map[string]string{"IC_FINGERPRINT_KEY_FILE": file}
		for k, v := range env {
			e[k] = v
		}
		if r := runCmd(t.Context(), e, "serve"); r.code != 2 || !strings.Contains(r.stderr, want) || strings.Contains(r.stderr, "tooshort") {
			t.Errorf("serve with key file %q: exit %d, %s; want 2 saying %q", file, r.code, r.stderr, want)
		}
	}
}
