package main

import (
	"bufio"
	"context"
	"database/sql"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/app/corebanksim"
	"github.com/finedge/idempotent-consumer/app/service/backend"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
	"github.com/finedge/idempotent-consumer/internal/awstest"
	"github.com/finedge/idempotent-consumer/internal/dbtest"
	"github.com/finedge/idempotent-consumer/postgres/pgtest"
	"github.com/finedge/idempotent-consumer/queue"
)

// holdWriteLock is a child process's job (IC_TEST_HOLD_WRITE_LOCK=path|30s):
// take the SQLite file's write lock, say so on stdout, hold it, let go.
func holdWriteLock(spec string) int {
	path, d, _ := strings.Cut(spec, "|")
	hold, err := time.ParseDuration(d)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer db.Close()
	conn, err := db.Conn(context.Background())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if _, err := conn.ExecContext(context.Background(), "begin immediate"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println("locked")
	time.Sleep(hold)
	// Say so just before letting go: the outage ends no earlier than this.
	fmt.Println("released")
	_, _ = conn.ExecContext(context.Background(), "commit")
	return 0
}

// storeOutageScenario: two consumers drain the queue while the store is
// down for 30 s (outage starts it, and returns when it is over). They
// must keep running, post no debit without a claim, finish every
// charge exactly once afterwards, and dead-letter nothing; no message's
// receive count may grow by more than one during the outage.
//
// A 30-minute outage at production settings, compressed: the queue's
// redrive limit is 4 and a retried message returns after 1, 2, 4 s, so
// without the store gate a message would be dead-lettered ~7 s into the
// outage; the 30 s outage is four times that budget, as 30 minutes is
// about four times the default budget (10 receives, ~8 minutes).
// childEnv holds what only the consumer process sees (a proxy's address).
//
// outage returns when the store was down from and until, as precisely as
// it can tell (the receive-count check reads decisions between them).
func storeOutageScenario(t *testing.T, env, childEnv map[string]string, outage func() (from, to time.Time)) {
	const n = 300
	ledger := corebanksim.NewLedger(corebanksim.Faults{Latency: 40 * time.Millisecond})
	bank := httptest.NewServer(corebanksim.Handler(ledger))
	t.Cleanup(bank.Close)
	for k, v := range map[string]string{"IC_COREBANK_URL": bank.URL, "IC_COREBANK_ENQUIRY": "true", "IC_POLL_WAIT": "1s",
		"IC_VISIBILITY": "6s", "IC_LEASE": "6s", "IC_CONCURRENCY": "4", "IC_HTTP_ADDR": "127.0.0.1:0",
		"IC_LOG_LEVEL": "info", "IC_LOG_FORMAT": "json", "IC_MAX_RECEIVE": "4",
		"IC_CIRCUIT_PROBE": "500ms", "IC_CIRCUIT_PROBE_MAX": "4s", "IC_STORE_CIRCUIT_FAILURES": "3"} {
		if _, set := env[k]; !set {
			env[k] = v
		}
	}
	bc := backendFor(env)
	bc.MaxReceive = 4
	ctx := t.Context()
	b, err := backend.Open(ctx, *bc, 6*time.Second, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	run := backend.RandomID()
	var bodies [][]byte
	ids := make([]string, n)
	for i := range n {
		c := charge.Charge{ID: fmt.Sprintf("CHG-SO-%s-%03d", run, i), AccountID: "001234567890",
			Amount: charge.Money{Minor: 100 + int64(i), Currency: "INR"}, Type: charge.SMSAlertFee, DueDate: time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)}
		ids[i] = c.ID
		body, _ := charge.MarshalEvent(c)
		bodies = append(bodies, body)
	}
	msgs := make([]queue.Outgoing, len(bodies))
	for i, body := range bodies {
		msgs[i] = queue.Outgoing{Body: body}
	}
	if _, err := b.Queue.SendBatch(ctx, msgs); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	logs := []string{filepath.Join(dir, "serve-1.log"), filepath.Join(dir, "serve-2.log")}
	cenv := maps.Clone(env)
	maps.Copy(cenv, childEnv)
	var procs []*exec.Cmd
	for _, l := range logs { // two consumers on one queue, as in production
		procs = append(procs, childLogged(t, cenv, l, "serve"))
	}
	for len(ledger.Entries()) < 20 { // the drain is under way
		time.Sleep(20 * time.Millisecond)
	}
	start, end := outage()
	during := len(ledger.Entries())
	for _, p := range procs {
		if p.ProcessState != nil {
			t.Fatal("a consumer exited during the store outage")
		}
	}
	deadline := time.Now().Add(120 * time.Second)
	for {
		d, err := b.Queue.Depth(ctx)
		main := d.Waiting + d.InFlight
		if err == nil && main == 0 && len(ledger.Entries()) == n {
			break
		}
		if time.Now().After(deadline) {
			for _, l := range logs {
				b, _ := os.ReadFile(l)
				lines := strings.Split(string(b), "\n")
				t.Logf("%s, last lines:\n%s", filepath.Base(l), strings.Join(lines[max(len(lines)-40, 0):], "\n"))
			}
			t.Fatalf("not finished after the outage: %d messages left, %d posted", main, len(ledger.Entries()))
		}
		time.Sleep(100 * time.Millisecond)
	}
	stopAll(t, procs...)
	posted := ledger.PostingsByKey()
	for _, id := range ids {
		rec, err := b.Store.Get(ctx, id, time.Now())
		if err != nil || rec.State != driver.StateDone || posted[id] != 1 {
			t.Errorf("%s: record %+v (%v), posted %d; want DONE and posted once", id, rec.State, err, posted[id])
		}
	}
	if len(posted) != n {
		t.Errorf("%d keys posted, want %d: a debit without a claim?", len(posted), n)
	}
	r := runCmd(ctx, env, "redrive", "--dry-run", "--json")
	if r.code != 0 || !strings.Contains(r.stdout, `"seen":0`) {
		t.Errorf("the DLQ is not empty after a store outage: %s %s", r.stdout, r.stderr)
	}
	checkReceiveGrowth(t, readDecisions(t, logs...), "store outage", start, end)
	t.Logf("%d of %d posted when the outage ended", during, n)
}

func TestStoreOutageOnTheEmbeddedBackend(t *testing.T) {
	t.Parallel()
	db := filepath.Join(t.TempDir(), "outage.db")
	env := map[string]string{"IC_BACKEND": "embedded", "IC_DB": db}
	storeOutageScenario(t, env, nil, func() (time.Time, time.Time) {
		exe, err := os.Executable()
		if err != nil {
			t.Fatal(err)
		}
		locker := exec.Command(exe)
		locker.Env = append(os.Environ(), "IC_TEST_HOLD_WRITE_LOCK="+db+"|30s")
		out, err := locker.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := locker.Start(); err != nil {
			t.Fatal(err)
		}
		lines := bufio.NewScanner(out)
		if !lines.Scan() || lines.Text() != "locked" {
			t.Fatalf("the lock holder did not take the lock: %q", lines.Text())
		}
		from := time.Now()
		if !lines.Scan() || lines.Text() != "released" {
			t.Fatalf("the lock holder did not say it let go: %q", lines.Text())
		}
		to := time.Now()
		if err := locker.Wait(); err != nil {
			t.Fatalf("lock holder: %v", err)
		}
		return from, to
	})
}

// faultProxy forwards to the emulator, failing every DynamoDB request with
// a 500 while down is set (SQS requests pass).
type faultProxy struct {
	proxy *httputil.ReverseProxy
	down  atomic.Bool
	hits  atomic.Int64
}

func (p *faultProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if p.down.Load() && strings.HasPrefix(r.Header.Get("X-Amz-Target"), "DynamoDB_") {
		p.hits.Add(1)
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		w.WriteHeader(http.StatusInternalServerError)
		fmt.Fprint(w, `{"__type":"com.amazonaws.dynamodb.v20120810#InternalServerError","message":"injected outage"}`)
		return
	}
	p.proxy.ServeHTTP(w, r)
}

func TestStoreOutageOnTheAWSEmulator(t *testing.T) {
	emulatorInParallel(t)
	target, err := url.Parse(os.Getenv(awstest.EndpointEnv))
	if err != nil {
		t.Fatal(err)
	}
	fp := &faultProxy{proxy: httputil.NewSingleHostReverseProxy(target)}
	proxy := httptest.NewServer(fp)
	t.Cleanup(proxy.Close)
	env := awsSetup(t, "so", "--visibility", "6s", "--max-receive", "4")
	// the child's DynamoDB calls go through the proxy
	storeOutageScenario(t, env, map[string]string{"AWS_ENDPOINT_URL_DYNAMODB": proxy.URL}, func() (from, to time.Time) {
		fp.down.Store(true)
		from = time.Now()
		time.Sleep(30 * time.Second)
		to = time.Now()
		fp.down.Store(false)
		if fp.hits.Load() == 0 {
			t.Fatal("no DynamoDB request reached the proxy during the outage")
		}
		return from, to
	})
}

// The Redis store behind a proxy that drops every connection and refuses
// new ones for 30 s, while the embedded queue keeps delivering.
func TestStoreOutageOfTheRedisStore(t *testing.T) {
	t.Parallel()
	env := redisEnv(t, filepath.Join(t.TempDir(), "outage.db"))
	u, err := url.Parse(env["IC_REDIS_URL"])
	if err != nil {
		t.Fatal(err)
	}
	p := newTCPProxy(t, u.Host)
	u.Host = p.addr()
	storeOutageScenario(t, env, map[string]string{"IC_REDIS_URL": u.String()}, func() (time.Time, time.Time) { return p.cut(30 * time.Second) })
}

// PostgreSQL behind the same proxy: the queue and the records go down
// together.
func TestStoreOutageOnPostgreSQL(t *testing.T) {
	t.Parallel()
	env := pgEnv(t)
	u, err := url.Parse(env["IC_POSTGRES_URL"])
	if err != nil {
		t.Fatal(err)
	}
	p := newTCPProxy(t, u.Host)
	u.Host = p.addr()
	storeOutageScenario(t, env, map[string]string{"IC_POSTGRES_URL": u.String()}, func() (time.Time, time.Time) { return p.cut(30 * time.Second) })
}

// tcpProxy forwards connections to a server; cut drops every connection
// and refuses new ones for a while.
type tcpProxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	conns  []net.Conn
	down   bool
}

func newTCPProxy(t *testing.T, target string) *tcpProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &tcpProxy{ln: ln, target: target}
	t.Cleanup(func() { ln.Close(); p.dropAll() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.mu.Lock()
			down := p.down
			p.mu.Unlock()
			if down {
				c.Close()
				continue
			}
			go p.pipe(c)
		}
	}()
	return p
}

func (p *tcpProxy) addr() string { return p.ln.Addr().String() }

func (p *tcpProxy) pipe(c net.Conn) {
	s, err := net.Dial("tcp", p.target)
	if err != nil {
		c.Close()
		return
	}
	p.mu.Lock()
	p.conns = append(p.conns, c, s)
	p.mu.Unlock()
	go func() { _, _ = io.Copy(s, c); s.Close() }()
	_, _ = io.Copy(c, s)
	c.Close()
}

func (p *tcpProxy) dropAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

func (p *tcpProxy) cut(d time.Duration) (from, to time.Time) {
	p.mu.Lock()
	p.down = true
	p.mu.Unlock()
	p.dropAll()
	from = time.Now()
	time.Sleep(d)
	to = time.Now()
	p.mu.Lock()
	p.down = false
	p.mu.Unlock()
	return from, to
}

// Three serve processes share one PostgreSQL database while one of them is
// SIGKILLed and replaced every second for 20 s: every charge is posted
// once and recorded DONE, and nothing reaches the DLQ.
func TestThreePostgresConsumersWithOneKilledEverySecond(t *testing.T) {
	t.Parallel()
	ledger := corebanksim.NewLedger(corebanksim.Faults{Latency: 150 * time.Millisecond})
	bank := httptest.NewServer(corebanksim.Handler(ledger))
	defer bank.Close()
	schema := dbtest.Schema(t)
	env := map[string]string{
		"IC_BACKEND": "postgres", "IC_POSTGRES_URL": dbtest.PostgresURL(), "IC_POSTGRES_SCHEMA": schema,
		"IC_COREBANK_URL": bank.URL, "IC_POLL_WAIT": "1s", "IC_CONCURRENCY": "2",
		"IC_VISIBILITY": "3s", "IC_LEASE": "3s", "IC_SKEW_MARGIN": "500ms", "IC_MAX_RECEIVE": "100",
		"IC_HTTP_ADDR": "127.0.0.1:0", "IC_LOG_LEVEL": "warn",
	}
	ctx := t.Context()
	var bc backend.Config
	bc.FreshDefaults()
	bc.Kind, bc.PostgresURL, bc.PostgresSchema, bc.Queue, bc.MaxReceive = backend.Postgres, dbtest.PostgresURL(), schema, "charge-due-events", 100
	b, err := backend.Open(ctx, bc, 3*time.Second, false)
	if err != nil {
		pgtest.Open(t) // fails in CI, skips elsewhere, saying how to start PostgreSQL
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	const n = 500
	var msgs []queue.Outgoing
	var ids []string
	for i := range n {
		c := charge.Charge{ID: fmt.Sprintf("CHG-PG-%03d", i), AccountID: "001234567890", Amount: charge.Money{Minor: 2500, Currency: "INR"},
			Type: charge.SMSAlertFee, DueDate: time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)}
		body, err := charge.MarshalEvent(c)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, c.ID)
		msgs = append(msgs, queue.Outgoing{Body: body})
		if i%5 < 2 { // 40% resent
			msgs = append(msgs, queue.Outgoing{Body: body})
		}
	}
	if _, err := b.Queue.SendBatch(ctx, msgs); err != nil {
		t.Fatal(err)
	}
	procs := []*exec.Cmd{child(t, env, "serve"), child(t, env, "serve"), child(t, env, "serve")}
	kills, midWork := 0, 0
	for i := range 20 {
		time.Sleep(time.Second)
		victim := i % 3
		if len(ledger.PostingsByKey()) < n {
			midWork++
		}
		_ = procs[victim].Process.Kill()
		_ = procs[victim].Wait()
		kills++
		procs[victim] = child(t, env, "serve")
	}
	if midWork < 10 {
		t.Fatalf("only %d of %d kills came while charges were still unposted: the test proves little", midWork, kills)
	}
	deadline := time.Now().Add(90 * time.Second)
	for {
		d, err := b.Queue.Depth(ctx)
		if err == nil && d.Waiting+d.InFlight == 0 && len(ledger.PostingsByKey()) == n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not drained: depth %+v, %d of %d posted", d, len(ledger.PostingsByKey()), n)
		}
		time.Sleep(100 * time.Millisecond)
	}
	stopAll(t, procs...)
	for k, c := range ledger.PostingsByKey() {
		if c != 1 {
			t.Errorf("%s posted %d times", k, c)
		}
	}
	for _, id := range ids {
		r, err := b.Store.Get(ctx, id, time.Now())
		if err != nil || r.State != driver.StateDone {
			t.Fatalf("record %s: %+v %v, want DONE", id, r, err)
		}
	}
	if d, err := b.Queue.Depth(ctx); err != nil || d.DLQ != 0 {
		t.Fatalf("DLQ holds %d (%v), want none", d.DLQ, err)
	}
	t.Logf("%d kills (%d while charges were unposted); %d debit requests after a confirmed posting (crashes between the debit and DONE, absorbed by the key)",
		kills, midWork, len(ledger.DuplicateRequests()))
}

// A PostgreSQL pool too small for the receivers serve runs is refused at
// start, saying what to set; without pool_max_conns serve sizes the pool
// for its receivers itself.
func TestServeRefusesAPostgresPoolTooSmallForItsReceivers(t *testing.T) {
	t.Parallel()
	pgtest.Open(t) // fails in CI, skips elsewhere, when the server is not there
	for _, tc := range []struct {
		url       string
		receivers string
		refused   bool
	}{
		{dbtest.PostgresURL() + "&pool_max_conns=4", "", true},   // 4 receivers by default where claims ride in the queue
		{dbtest.PostgresURL() + "&pool_max_conns=5", "3", false}, // 3 + 2
		{dbtest.PostgresURL() + "&pool_max_conns=8", "8", true},
		{dbtest.PostgresURL(), "16", false},
	} {
		env := map[string]string{"IC_BACKEND": "postgres", "IC_POSTGRES_URL": tc.url, "IC_POSTGRES_SCHEMA": dbtest.Schema(t),
			"IC_COREBANK_URL": "http://127.0.0.1:1", "IC_RECEIVERS": tc.receivers}
		r := runCmd(t.Context(), env, "serve")
		if tc.refused {
			if r.code != exitUsage || !strings.Contains(r.stderr, "too small for") || !strings.Contains(r.stderr, "set pool_max_conns to at least") {
				t.Errorf("receivers %q with %s: exit %d, %s; want 2 saying the pool is too small", tc.receivers, tc.url, r.code, r.stderr)
			}
			continue
		}
		// Past the pool check: it stops at the schema setup has not made.
		if r.code != exitFailed || !strings.Contains(r.stderr, "run chargerecovery setup") {
			t.Errorf("receivers %q with %s: exit %d, %s; want the pool accepted (and the missing schema named)", tc.receivers, tc.url, r.code, r.stderr)
		}
	}
}
