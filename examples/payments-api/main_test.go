package main_test

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

const payment = `{"amount": {"minor": 2500, "currency": "INR"}, "account": "0012345678901", "memo": "locker rent"}`

// The clients of the tests: alice pays from 0012345678901 (the account of
// payment), bob from 0098765432109.
const (
	aliceToken = "alice-token-0123456789abcdef0123456789abcdef"
	bobToken   = "bob-token-fedcba9876543210fedcba9876543210"
	clients    = "# id token accounts\nalice " + aliceToken + " 0012345678901\n\nbob " + bobToken + " 0098765432109\n"
)

// server is the example built and started as a process of its own.
type server struct {
	url string
	cmd *exec.Cmd
	out *syncBuf
}

// syncBuf is the process's stderr, written by exec's copier while the test
// reads it.
type syncBuf struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// build builds the example (the test is skipped in -short mode).
func build(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs the example")
	}
	bin := filepath.Join(t.TempDir(), "payments-api")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// buildAndStart builds the example and runs it on a fresh database,
// returning the server, the binary and the database's path.
func buildAndStart(t *testing.T) (*server, string, string) {
	t.Helper()
	bin := build(t)
	db := filepath.Join(t.TempDir(), "payments.db")
	return start(t, bin, db), bin, db
}

// start runs the example on db, with the clients file beside it.
func start(t *testing.T, bin, db string) *server {
	t.Helper()
	cf := db + ".clients"
	if err := os.WriteFile(cf, []byte(clients), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--addr", "127.0.0.1:0", "--db", db, "--clients-file", cf, "--work-delay", "300ms")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncBuf{}
	cmd.Stderr = logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if u, ok := strings.CutPrefix(sc.Text(), "listening on "); ok {
				lines <- u
			}
		}
		close(lines)
	}()
	select {
	case u, ok := <-lines:
		if !ok {
			t.Fatalf("payments-api stopped before it listened:\n%s", logs)
		}
		return &server{url: u, cmd: cmd, out: logs}
	case <-time.After(30 * time.Second):
		t.Fatalf("payments-api did not listen:\n%s", logs)
	}
	return nil
}

// stop sends SIGTERM and waits for a clean exit.
func (s *server) stop(t *testing.T) {
	t.Helper()
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := s.cmd.Wait(); err != nil {
		t.Fatalf("payments-api exited with %v:\n%s", err, s.out)
	}
}

type reply struct {
	status   int
	replayed bool
	id       string
	body     string
	header   http.Header
}

// post sends as alice.
func (s *server) post(t *testing.T, key, body string) reply {
	t.Helper()
	return s.postAs(t, aliceToken, key, body)
}

// postAs sends with token as the bearer token ("": none).
func (s *server) postAs(t *testing.T, token, key, body string) reply {
	t.Helper()
	req, err := http.NewRequest("POST", s.url+"/payments", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var p struct {
		ID string `json:"id"`
	}
	_ = json.Unmarshal(b, &p)
	return reply{resp.StatusCode, resp.Header.Get("Idempotent-Replayed") == "true", p.ID, string(b), resp.Header}
}

func TestPaymentsAPIAsAProcess(t *testing.T) {
	s, bin, db := buildAndStart(t)

	first := s.post(t, "key-1", payment)
	if first.status != 201 || first.replayed || !strings.HasPrefix(first.id, "pay_") {
		t.Fatalf("first POST: %+v", first)
	}
	if strings.Contains(first.body, "0012345678901") || strings.Contains(s.out.String(), "0012345678901") {
		t.Fatalf("the account number is in the output: %s\n%s", first.body, s.out)
	}
	again := s.post(t, "key-1", payment)
	if again.status != 201 || !again.replayed || again.id != first.id || again.body != first.body {
		t.Fatalf("same key again: %+v, want the replay of %+v", again, first)
	}
	// While a first request runs: 409.
	running := make(chan reply)
	go func() { running <- s.post(t, "key-2", payment) }()
	time.Sleep(100 * time.Millisecond)
	if busy := s.post(t, "key-2", payment); busy.status != 409 {
		t.Fatalf("while the first runs: %+v, want 409", busy)
	}
	second := <-running
	if second.status != 201 || second.id == first.id {
		t.Fatalf("another key: %+v, want a new payment", second)
	}
	if r := s.post(t, "", payment); r.status != 400 {
		t.Fatalf("no key: %+v, want 400", r)
	}
	s.stop(t)

	// The replay survives a restart on the same file.
	s = start(t, bin, db)
	after := s.post(t, "key-1", payment)
	if after.status != 201 || !after.replayed || after.id != first.id {
		t.Fatalf("after a restart: %+v, want the replay of %s", after, first.id)
	}
	other := strings.Replace(payment, "2500", "2600", 1)
	if r := s.post(t, "key-1", other); r.status != 422 {
		t.Fatalf("the key with another body: %+v, want 422", r)
	}
	if r := s.post(t, "key-3", payment); r.status != 201 || r.replayed || r.id == first.id || r.id == second.id {
		t.Fatalf("a new key after the restart: %+v, want a new payment", r)
	}
	s.stop(t)
	if _, err := os.Stat(db); err != nil {
		t.Fatal(err)
	}
}

// Issue 51: keys are kept per authenticated client. Bob, sending Alice's
// key and body, has his request authorised by the handler (and refused:
// the account is Alice's), and never gets Alice's stored 201; before, the
// example shared one key space and handed him her payment.
func TestPaymentsAPIKeepsClientsApart(t *testing.T) {
	s, _, _ := buildAndStart(t)

	alice := s.postAs(t, aliceToken, "shared-key", payment)
	if alice.status != 201 || alice.replayed || !strings.HasPrefix(alice.id, "pay_") {
		t.Fatalf("alice: %+v", alice)
	}
	for range 2 {
		bob := s.postAs(t, bobToken, "shared-key", payment)
		if bob.status != 403 || bob.replayed || bob.id != "" || strings.Contains(bob.body, alice.id) || strings.Contains(bob.body, "locker rent") {
			t.Fatalf("bob with alice's key and body: %+v, want his own 403", bob)
		}
	}
	// Bob's payment from his own account, under a key Alice also uses:
	// a payment of his own.
	bobs := strings.Replace(payment, "0012345678901", "0098765432109", 1)
	if r := s.postAs(t, aliceToken, "bob-key", payment); r.status != 201 {
		t.Fatalf("alice, bob-key: %+v", r)
	}
	own := s.postAs(t, bobToken, "bob-key", bobs)
	if own.status != 201 || own.replayed || own.id == "" || own.id == alice.id || !strings.Contains(own.body, "****2109") {
		t.Fatalf("bob's own payment: %+v", own)
	}
	// Alice's key still replays her payment to her.
	if again := s.postAs(t, aliceToken, "shared-key", payment); again.status != 201 || !again.replayed || again.id != alice.id {
		t.Fatalf("alice again: %+v, want the replay of %s", again, alice.id)
	}
	// No token, or an unknown one: 401 with the challenge, the handler
	// never reached.
	for _, tok := range []string{"", "not-a-token-of-anyone-0123456789abcdef"} {
		r := s.postAs(t, tok, "shared-key", payment)
		if r.status != 401 || r.header.Get("WWW-Authenticate") != `Bearer realm="payments-api"` || r.replayed || r.id != "" {
			t.Fatalf("token %q: %+v", tok, r)
		}
	}
	if n := strings.Count(s.out.String(), "payment made"); n != 3 {
		t.Fatalf("%d payments made, want 3 (alice twice, bob once):\n%s", n, s.out)
	}
	for _, secret := range []string{aliceToken, bobToken} {
		if strings.Contains(s.out.String(), secret) {
			t.Fatalf("a token is in the log:\n%s", s.out)
		}
	}
	s.stop(t)
}

// The example refuses to start without its clients (a server with no
// authentication would have no scope for its keys) and with a clients
// file others can read.
func TestPaymentsAPINeedsItsClients(t *testing.T) {
	bin := build(t)
	dir := t.TempDir()
	db := filepath.Join(dir, "payments.db")
	if out, err := exec.Command(bin, "--addr", "127.0.0.1:0", "--db", db).CombinedOutput(); err == nil || !strings.Contains(string(out), "--clients-file") {
		t.Fatalf("no --clients-file: %v\n%s", err, out)
	}
	cf := filepath.Join(dir, "clients")
	if err := os.WriteFile(cf, []byte(clients), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(bin, "--addr", "127.0.0.1:0", "--db", db, "--clients-file", cf).CombinedOutput(); err == nil || !strings.Contains(string(out), "chmod 600") {
		t.Fatalf("a clients file others can read: %v\n%s", err, out)
	}
}
