// The design model measures what the hot path of a fresh charge costs a
// PostgreSQL server under each candidate representation of the claim
// (issue 55 item 1: bring the guard's cost from ~2.6× the queue-only
// baseline to ≤ 1.5×, with fewer writes per charge). It is a cost model
// of the hot path on raw SQL, not a driver: no Guard, no bank, no
// retries, no sweeper, no heartbeats, no dead-lettering.
//
// Each design has a scratch schema of its own (pgdesigns_<design>,
// created at start, dropped at the end; never public) with the tables and
// indexes of postgres/db.go's migrations, autovacuum off on them. For
// each design and round: the tables are truncated, -designs.charges messages
// (~400-byte JSON bodies carrying a chargeId, as the bench's) are sent,
// then -designs.workers workers each loop until all are consumed: one transaction
// receives up to -designs.batch messages (receiveSQL, FOR UPDATE SKIP LOCKED) and
// writes the design's claims, in key order, and commits; a second
// transaction (the settle group, one per batch here) locks the messages
// in id order and writes the design's DONE with each message's delete.
// Every charge is fresh: the duplicate path (30% of charges delivered
// twice in the real bench) is left out.
//
// Designs:
//
//   - baseline: the queue only — the receive, then the messages deleted
//     (Ack's unnest delete); no record.
//   - current: today's — claimSQL (insert of an IN_PROGRESS record) in
//     the receive's transaction; finishSettleSQL (the record to
//     DONE-DEBITED, a non-HOT rewrite, with the message's delete).
//   - brin-expires: current with the expires_at btree replaced by BRIN
//     (PostgreSQL 15: it still blocks HOT, but adds no entry per row to
//     a range not yet summarized).
//   - no-expires-at-done: current where DONE leaves expires_at as the
//     claim wrote it (the final retention): the rewrite is still non-HOT
//     (state and status are in the open index's key and predicate).
//   - claim-on-message: the claim is queue_messages.claim_key (a partial
//     unique index) set by one update per message after the plain
//     receive (a duplicate skips, it does not abort the batch); DONE is
//     one statement: the message deleted and the record inserted
//     DONE-DEBITED (primary key and expires_at entries only). The message
//     row is rewritten twice in the receive's transaction.
//   - claim-on-receive: claim-on-message with claim_key set by the
//     receive's own update (one rewrite of the message, not two); a
//     duplicate inside the batch or against a held claim or a record gets
//     no claim_key. Two receivers claiming one key at once would abort one
//     batch on the unique index (no duplicates here, so never).
//   - current-set: current's rows and index entries with fewer
//     statements: a batch's claims as one insert from arrays, a group's
//     DONE writes and deletes as one statement (a real driver would claim
//     the keys that insert did not take one by one; none here). It says
//     how much of current's cost is per statement rather than per write.
//   - record-floor: no claim at all, the record inserted DONE-DEBITED with
//     the message's delete. Not a guard (nothing stops a second delivery
//     meanwhile): the least any design that keeps a record per charge
//     writes, so the bound on what a new representation can win.
//   - record-floor-set: record-floor with a group's records inserted and
//     its messages deleted in one statement (records batched across
//     charges): the floor with the fewest statements too.
//
// Reported per design (medians over rounds): charges/s, its ratio to the
// baseline's rate in the same round, WAL bytes per charge
// (pg_current_wal_lsn, cluster-wide: other sessions' writes count too),
// heap tuples inserted / updated (HOT) / deleted per charge
// (pg_stat_user_tables, the workers' backends closed before they are
// read) and index bytes per charge (the indexes' growth over the
// consumption: pages, so coarse at small -designs.charges; a page freed by
// deletes is not given back). The send is outside every figure.
//
//	go test -count=1 -v -run TestDesignModel ./postgres -args -designs.charges 20000 -designs.rounds 3 \
//	  -designs.only baseline,current,claim-on-receive
package postgres

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

const queueName = "charges"

// design is one candidate: its schema and its two writes.
type design struct {
	name       string
	expiresIdx string // btree or brin
	claimCol   bool
	// claims queues the receive's claims (msgs sorted by key) on b.
	claims func(b *pgx.Batch, msgs []msg, now time.Time)
	// receive is the receive's statement (receiveSQL unless the design
	// claims in it).
	receive string
	// settle queues a batch's DONE writes and deletes on b and says how
	// many results to read.
	settle func(b *pgx.Batch, msgs []msg, now time.Time)
}

type msg struct {
	id       int64
	received int32
	key      string
	token    string
}

const (
	retention = 30 * 24 * time.Hour
	lease     = 30 * time.Second
	fpr       = "f3b1c2d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f90"
	bankRef   = "CBS0000000001"
)

func claimCurrent(b *pgx.Batch, msgs []msg, now time.Time) {
	for _, m := range msgs {
		b.Queue(claimSQL, m.key, m.token, fpr, now.Add(lease), now, now.Add(retention), now, "")
	}
}

func settleFinish(sql string) func(b *pgx.Batch, msgs []msg, now time.Time) {
	return func(b *pgx.Batch, msgs []msg, now time.Time) {
		b.Queue(lockMessagesSQL, queueName, ids(msgs))
		for _, m := range msgs {
			b.Queue(sql, m.key, m.token, "DONE", "DEBITED", bankRef, now, now.Add(retention), nil, 0, false, "",
				queueName, m.id, m.received, "", nil)
		}
	}
}

func settleOnMessage(b *pgx.Batch, msgs []msg, now time.Time) {
	b.Queue(lockMessagesSQL, queueName, ids(msgs))
	for _, m := range msgs {
		b.Queue(doneOnMessageSQL, m.key, m.token, fpr, now, now.Add(retention), bankRef, queueName, m.id, m.received)
	}
}

func ids(msgs []msg) []int64 {
	out := make([]int64, len(msgs))
	for i, m := range msgs {
		out[i] = m.id
	}
	return out
}

var designs = map[string]design{
	"baseline": {
		claims: func(*pgx.Batch, []msg, time.Time) {},
		settle: func(b *pgx.Batch, msgs []msg, _ time.Time) {
			counts := make([]int32, len(msgs))
			for i, m := range msgs {
				counts[i] = m.received
			}
			b.Queue(ackSQL, queueName, ids(msgs), counts)
		},
	},
	"current":            {claims: claimCurrent, settle: settleFinish(finishSettleSQL)},
	"brin-expires":       {expiresIdx: "brin", claims: claimCurrent, settle: settleFinish(finishSettleSQL)},
	"no-expires-at-done": {claims: claimCurrent, settle: settleFinish(finishSettleKeepExpirySQL)},
	"claim-on-message": {claimCol: true, settle: settleOnMessage,
		claims: func(b *pgx.Batch, msgs []msg, _ time.Time) {
			for _, m := range msgs {
				b.Queue(claimOnMessageSQL, m.key, m.id)
			}
		}},
	"claim-on-receive": {claimCol: true, receive: receiveClaimSQL, settle: settleOnMessage,
		claims: func(*pgx.Batch, []msg, time.Time) {}},
	"current-set": {claims: claimSet, settle: settleSet},
	"record-floor": {claims: func(*pgx.Batch, []msg, time.Time) {},
		settle: func(b *pgx.Batch, msgs []msg, now time.Time) {
			b.Queue(lockMessagesSQL, queueName, ids(msgs))
			for _, m := range msgs {
				b.Queue(doneOnlySQL, m.key, m.token, fpr, now, now.Add(retention), bankRef, queueName, m.id, m.received)
			}
		}},
	"record-floor-set": {claims: func(*pgx.Batch, []msg, time.Time) {},
		settle: func(b *pgx.Batch, msgs []msg, now time.Time) {
			keys, tokens, counts := make([]string, len(msgs)), make([]string, len(msgs)), make([]int32, len(msgs))
			for i, m := range msgs {
				keys[i], tokens[i], counts[i] = m.key, m.token, m.received
			}
			b.Queue(lockMessagesSQL, queueName, ids(msgs))
			b.Queue(doneOnlySetSQL, keys, tokens, ids(msgs), counts, fpr, now, now.Add(retention), bankRef, queueName)
		}},
}

// claimSet and settleSet are current's writes as one statement each per
// batch (current-set): the same rows and index entries, fewer statements.
func claimSet(b *pgx.Batch, msgs []msg, now time.Time) {
	keys, tokens := make([]string, len(msgs)), make([]string, len(msgs))
	for i, m := range msgs {
		keys[i], tokens[i] = m.key, m.token
	}
	b.Queue(claimSetSQL, keys, tokens, fpr, now.Add(lease), now, now.Add(retention))
}

func settleSet(b *pgx.Batch, msgs []msg, now time.Time) {
	keys, tokens, counts := make([]string, len(msgs)), make([]string, len(msgs)), make([]int32, len(msgs))
	for i, m := range msgs {
		keys[i], tokens[i], counts[i] = m.key, m.token, m.received
	}
	b.Queue(lockMessagesSQL, queueName, ids(msgs))
	b.Queue(finishSettleSetSQL, keys, tokens, ids(msgs), counts, bankRef, now, now.Add(retention), queueName)
}

// The model's flags (after -args); -designs.charges 0, the default, skips
// it: a measurement run by hand, not a test.
var (
	dmURL     = flag.String("designs.url", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable", "design model: PostgreSQL URL")
	dmCharges = flag.Int("designs.charges", 0, "design model: charges (messages) per design and round; 0 skips the model")
	dmWorkers = flag.Int("designs.workers", 4, "design model: workers (each a receive, then its settle)")
	dmBatch   = flag.Int("designs.batch", 10, "design model: messages per receive")
	dmRounds  = flag.Int("designs.rounds", 1, "design model: rounds (designs interleaved, order reversed every other round)")
	dmOnly    = flag.String("designs.only", "baseline,current,current-set,brin-expires,no-expires-at-done,claim-on-message,claim-on-receive,record-floor,record-floor-set", "design model: designs, comma-separated")
)

// TestDesignModel runs the design model (see above) when
// -designs.charges is set, and prints its table.
func TestDesignModel(t *testing.T) {
	for name, derived := range map[string][2]string{
		"record-floor's settle": {doneOnlySQL, doneOnMessageSQL},
		"no-expires-at-done's":  {finishSettleKeepExpirySQL, finishSettleSQL},
	} {
		if derived[0] == derived[1] {
			t.Fatalf("%s statement is the one it is derived from: the text it replaces changed", name)
		}
	}
	if *dmCharges == 0 {
		t.Skip("the design model is a measurement: -args -designs.charges N (BENCHMARKS.md)")
	}
	if err := dmRun(t.Context(), *dmURL, *dmCharges, *dmWorkers, *dmBatch, *dmRounds, *dmOnly); err != nil {
		t.Fatal(err)
	}
}

type result struct {
	rate, ratio, walPer, insPer, updPer, hotPer, delPer, idxPer float64
}

func dmRun(ctx context.Context, url string, charges, workers, batch, rounds int, names string) error {
	var order []string
	for _, n := range strings.Split(names, ",") {
		d, ok := designs[n]
		if !ok {
			return fmt.Errorf("unknown design %q", n)
		}
		if workers < 1 || batch < 1 || charges < 1 || rounds < 1 {
			return errors.New("-designs.charges, .workers, .batch and .rounds must be positive")
		}
		d.name = n
		if d.expiresIdx == "" {
			d.expiresIdx = "btree"
		}
		if d.receive == "" {
			d.receive = receiveSQL
		}
		designs[n] = d
		order = append(order, n)
	}
	admin, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer admin.Close(ctx)
	for _, n := range order {
		if err := setUp(ctx, admin, url, designs[n]); err != nil {
			return err
		}
	}
	defer func() {
		for _, n := range order {
			if _, err := admin.Exec(context.WithoutCancel(ctx), `drop schema if exists `+schema(n)+` cascade`); err != nil {
				fmt.Println("design model: drop:", err)
			}
		}
	}()
	got := map[string][]result{}
	for r := range rounds {
		seq := slices.Clone(order)
		if r%2 == 1 {
			slices.Reverse(seq)
		}
		rates := map[string]float64{}
		for _, n := range seq {
			res, err := round(ctx, admin, url, designs[n], r, charges, workers, batch)
			if err != nil {
				return fmt.Errorf("%s, round %d: %w", n, r+1, err)
			}
			rates[n] = res.rate
			got[n] = append(got[n], res)
		}
		for _, n := range seq {
			if b, ok := rates["baseline"]; ok {
				got[n][r].ratio = b / rates[n]
			}
		}
	}
	fmt.Printf("%-20s %10s %16s %10s %10s %10s %10s %10s %12s\n", "design", "charges/s", "baseline/design", "WAL B/ch", "ins/ch", "upd/ch", "hot/ch", "del/ch", "idx B/ch")
	for _, n := range order {
		rs := got[n]
		med := func(f func(result) float64) float64 {
			v := make([]float64, len(rs))
			for i, r := range rs {
				v[i] = f(r)
			}
			slices.Sort(v)
			if len(v)%2 == 1 {
				return v[len(v)/2]
			}
			return (v[len(v)/2-1] + v[len(v)/2]) / 2
		}
		ratio := "-"
		if slices.Contains(order, "baseline") {
			ratio = fmt.Sprintf("%.2f×", med(func(r result) float64 { return r.ratio }))
		}
		fmt.Printf("%-20s %10.0f %16s %10.0f %10.2f %10.2f %10.2f %10.2f %12.0f\n", n,
			med(func(r result) float64 { return r.rate }), ratio,
			med(func(r result) float64 { return r.walPer }),
			med(func(r result) float64 { return r.insPer }),
			med(func(r result) float64 { return r.updPer }),
			med(func(r result) float64 { return r.hotPer }),
			med(func(r result) float64 { return r.delPer }),
			med(func(r result) float64 { return r.idxPer }))
	}
	return nil
}

func schema(design string) string { return "pgdesigns_" + strings.ReplaceAll(design, "-", "_") }

func setUp(ctx context.Context, admin *pgx.Conn, url string, d design) error {
	s := schema(d.name)
	if _, err := admin.Exec(ctx, `drop schema if exists `+s+` cascade`); err != nil {
		return err
	}
	db, err := Open(ctx, url, Options{Schema: s, QueueVacuumThreshold: -1}) // the package's own migrations
	if err != nil {
		return fmt.Errorf("%s: create tables: %w", d.name, err)
	}
	db.Close()
	ddl := `alter table queue_messages set (autovacuum_enabled = false);
		alter table idempotency_records set (autovacuum_enabled = false);`
	if d.expiresIdx == "brin" {
		ddl += `drop index idempotency_records_expires_idx;
			create index idempotency_records_expires_idx on idempotency_records using brin (expires_at);`
	}
	if d.claimCol {
		ddl += `alter table queue_messages add column claim_key text collate "C";
			create unique index queue_messages_claim_idx on queue_messages (claim_key) where claim_key is not null;`
	}
	if _, err := admin.Exec(ctx, `set search_path = `+s+`; `+ddl+` reset search_path`); err != nil {
		return fmt.Errorf("%s: the design's tables: %w", d.name, err)
	}
	return nil
}

type counts struct{ ins, upd, hot, del int64 }

// stats sums the schema's tables' counters.
func stats(ctx context.Context, admin *pgx.Conn, s string) (c counts, err error) {
	if _, err = admin.Exec(ctx, `select pg_stat_clear_snapshot()`); err != nil {
		return c, err
	}
	err = admin.QueryRow(ctx, `select coalesce(sum(n_tup_ins), 0)::bigint, coalesce(sum(n_tup_upd), 0)::bigint,
		coalesce(sum(n_tup_hot_upd), 0)::bigint, coalesce(sum(n_tup_del), 0)::bigint
		from pg_stat_user_tables where schemaname = $1`, s).Scan(&c.ins, &c.upd, &c.hot, &c.del)
	return c, err
}

// settled reads the schema's counters until ok holds of them (the
// backends that wrote have reported), or for at most 5 seconds.
func settled(ctx context.Context, admin *pgx.Conn, s string, ok func(counts) bool) (counts, error) {
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		c, err := stats(ctx, admin, s)
		if err != nil || ok(c) {
			return c, err
		}
		if time.Now().After(deadline) {
			return c, errors.New("the counters did not catch up in 5s (track_counts off?)")
		}
	}
}

// indexBytes is the size of the schema's indexes.
func indexBytes(ctx context.Context, admin *pgx.Conn, s string) (b float64, err error) {
	err = admin.QueryRow(ctx, `select coalesce(sum(pg_relation_size(indexrelid)), 0)::float8 from pg_stat_user_indexes where schemaname = $1`, s).Scan(&b)
	return b, err
}

func pool(ctx context.Context, url, s string, conns int) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = int32(conns)
	cfg.ConnConfig.RuntimeParams["search_path"] = s
	return pgxpool.NewWithConfig(ctx, cfg)
}

func round(ctx context.Context, admin *pgx.Conn, url string, d design, r, n, workers, batch int) (result, error) {
	s := schema(d.name)
	if _, err := admin.Exec(ctx, `truncate `+s+`.queue_messages, `+s+`.idempotency_records restart identity`); err != nil {
		return result{}, err
	}
	// A checkpoint the round does not cause must not fall inside it: the
	// earlier designs' WAL would be written out on this one's time (and
	// its first writes to each page carry a full page image after one).
	if _, err := admin.Exec(ctx, `checkpoint`); err != nil {
		return result{}, fmt.Errorf("checkpoint: %w", err)
	}
	sent, err := stats(ctx, admin, s)
	if err != nil {
		return result{}, err
	}
	if err := send(ctx, url, s, r, n); err != nil {
		return result{}, fmt.Errorf("send: %w", err)
	}
	// The sender's backend reports its inserts as it exits: wait for them,
	// so that they are not counted as the round's.
	before, err := settled(ctx, admin, s, func(c counts) bool { return c.ins-sent.ins >= int64(n) })
	if err != nil {
		return result{}, err
	}
	idx0, err := indexBytes(ctx, admin, s)
	if err != nil {
		return result{}, err
	}
	p, err := pool(ctx, url, s, workers+1)
	if err != nil {
		return result{}, err
	}
	var startLSN string
	if err := admin.QueryRow(ctx, `select pg_current_wal_lsn()::text`).Scan(&startLSN); err != nil {
		p.Close()
		return result{}, err
	}
	var done atomic.Int64
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	start := time.Now()
	for range workers {
		wg.Go(func() { errs <- work(ctx, p, d, n, batch, &done) })
	}
	wg.Wait()
	elapsed := time.Since(start)
	close(errs)
	for err := range errs {
		if err != nil {
			p.Close()
			return result{}, err
		}
	}
	var wal float64
	if err := admin.QueryRow(ctx, `select pg_wal_lsn_diff(pg_current_wal_lsn(), $1::pg_lsn)::float8`, startLSN).Scan(&wal); err != nil {
		p.Close()
		return result{}, err
	}
	p.Close() // the workers' backends report their counters as they exit
	after, err := settled(ctx, admin, s, func(c counts) bool { return c.del-before.del >= int64(n) })
	if err != nil {
		return result{}, err
	}
	var left, records int64
	if err := admin.QueryRow(ctx, `select (select count(*) from `+s+`.queue_messages), (select count(*) from `+s+`.idempotency_records where state = 'DONE' and status = 'DEBITED')`).Scan(&left, &records); err != nil {
		return result{}, err
	}
	if want := int64(n); left != 0 || (d.name != "baseline" && records != want) {
		return result{}, fmt.Errorf("%d messages left, %d records DONE-DEBITED (want 0 and %d): a write did not land", left, records, want)
	}
	idx, err := indexBytes(ctx, admin, s)
	if err != nil {
		return result{}, err
	}
	idx -= idx0
	f := float64(n)
	return result{
		rate:   f / elapsed.Seconds(),
		walPer: wal / f,
		insPer: float64(after.ins-before.ins) / f,
		updPer: float64(after.upd-before.upd) / f,
		hotPer: float64(after.hot-before.hot) / f,
		delPer: float64(after.del-before.del) / f,
		idxPer: idx / f,
	}, nil
}

// send inserts n messages on a connection of its own, closed before the
// round's counters are read (so that its inserts are not counted).
func send(ctx context.Context, url, s string, r, n int) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	pad := strings.Repeat("x", 200)
	const chunk = 1000
	for i := 0; i < n; i += chunk {
		bodies := make([][]byte, 0, chunk)
		for j := i; j < min(n, i+chunk); j++ {
			b, err := json.Marshal(map[string]any{
				"schemaVersion": 1, "chargeId": fmt.Sprintf("ch-r%d-%08d", r, j), "accountId": "001234567890",
				"amount": map[string]any{"minor": 2500, "currency": "INR"}, "chargeType": "SMS_ALERT_FEE",
				"dueDate": "2026-12-01", "narration": pad,
			})
			if err != nil {
				return err
			}
			bodies = append(bodies, b)
		}
		if _, err := conn.Exec(ctx, `insert into `+s+`.queue_messages (queue, body) select $1, b from unnest($2::bytea[]) as t(b)`, queueName, bodies); err != nil {
			return err
		}
	}
	return nil
}

// work receives and settles until n messages are done in all.
func work(ctx context.Context, p *pgxpool.Pool, d design, n, batch int, done *atomic.Int64) error {
	for done.Load() < int64(n) {
		msgs, err := receive(ctx, p, d, batch)
		if err != nil {
			return fmt.Errorf("receive: %w", err)
		}
		if len(msgs) == 0 {
			time.Sleep(time.Millisecond) // the rest are locked by other workers
			continue
		}
		if err := settle(ctx, p, d, msgs); err != nil {
			return fmt.Errorf("settle: %w", err)
		}
		done.Add(int64(len(msgs)))
	}
	return nil
}

// receive is the claiming receive: the receive and the claims, in key
// order, in one transaction.
func receive(ctx context.Context, p *pgxpool.Pool, d design, max int) ([]msg, error) {
	tx, err := p.Begin(ctx)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after a commit, a no-op
	rows, err := tx.Query(ctx, d.receive, queueName, max, 10, lease.Milliseconds(), 256*1024)
	if err != nil {
		return nil, err
	}
	var msgs []msg
	for rows.Next() {
		var (
			m       msg
			body    []byte
			size    int32
			attrs   []byte
			created time.Time
		)
		if err := rows.Scan(&m.id, &body, &size, &attrs, &m.received, &created); err != nil {
			return nil, err
		}
		var c struct {
			ChargeID string `json:"chargeId"`
		}
		if err := json.Unmarshal(body, &c); err != nil {
			return nil, err
		}
		m.key, m.token = c.ChargeID, token()
		msgs = append(msgs, m)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	slices.SortFunc(msgs, func(a, b msg) int { return strings.Compare(a.key, b.key) })
	b := &pgx.Batch{}
	d.claims(b, msgs, time.Now())
	if b.Len() > 0 {
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return nil, err
		}
	}
	return msgs, tx.Commit(ctx)
}

// settle is the settle group of one batch: its DONE writes and deletes in
// one implicit transaction (a pgx batch), as runSettles.
func settle(ctx context.Context, p *pgxpool.Pool, d design, msgs []msg) error {
	slices.SortFunc(msgs, func(a, b msg) int { return int(a.id - b.id) })
	b := &pgx.Batch{}
	d.settle(b, msgs, time.Now())
	return p.SendBatch(ctx, b).Close()
}

func token() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// receiveClaimSQL is receiveSQL (queue.go's) that also writes the claim on the message
// row in the same update (claim-on-receive): claim_key is the body's
// chargeId unless the message already carries one (a redelivery keeps
// it), another message carries it, a record holds it, or an earlier
// message of this batch takes it. Returns whether the row holds the claim.
const receiveClaimSQL = `
with picked as (
  select id, convert_from(body, 'UTF8')::jsonb ->> 'chargeId' as k from queue_messages
  where queue = $1 and visible_at <= clock_timestamp() and received < $3
  order by visible_at, id
  limit $2
  for update skip locked
), firsts as (
  select id, k, row_number() over (partition by k order by id) = 1 as first from picked
)
update queue_messages m set received = m.received + 1, visible_at = clock_timestamp() + $4 * interval '1 millisecond',
  claim_key = case
    when m.claim_key is not null then m.claim_key
    when f.first
      and not exists (select 1 from queue_messages o where o.claim_key = f.k)
      and not exists (select 1 from idempotency_records r where r.key = f.k) then f.k
  end
from firsts f where m.id = f.id
returning m.id, case when octet_length(m.body) <= $5 then m.body end, octet_length(m.body), m.attributes, m.received, m.created_at`

// claimOnMessageSQL is claim-on-message's claim: after the plain receive,
// one update per message, so that a duplicate does not abort the batch.
// $1 key, $2 message id.
const claimOnMessageSQL = `
update queue_messages set claim_key = $1
where id = $2 and claim_key is null
  and not exists (select 1 from queue_messages where claim_key = $1)
  and not exists (select 1 from idempotency_records where key = $1)`

// finishSettleKeepExpirySQL is finishSettleSQL without the retention: the
// claim wrote the final one (no-expires-at-done). $7 is still passed,
// unused.
// (PostgreSQL compares an indexed column's old and new values, so an
// unchanged expires_at is no change; the state's change still makes the
// update non-HOT.)
var finishSettleKeepExpirySQL = strings.Replace(finishSettleSQL, "expires_at = $7,", "expires_at = coalesce(expires_at, $7::timestamptz),", 1)

// doneOnMessageSQL is claim-on-message's DONE: the message deleted (if
// this delivery holds the claim) and the record inserted DONE-DEBITED,
// one statement. $1 key, $2 token, $3 fingerprint, $4 now, $5 expires at,
// $6 detail, $7 queue, $8 message id, $9 receive count.
const doneOnMessageSQL = `
with d as (
  delete from queue_messages
  where queue = $7 and id = $8 and received = $9 and claim_key = $1
  returning 1
), i as (
  insert into idempotency_records (key, state, token, fingerprint, attempt, lease_until, created_at, updated_at, expires_at, status, detail)
  select $1, 'DONE', $2, $3, 1, $4, $4, $4, $5, 'DEBITED', $6 from d
  on conflict (key) do nothing
  returning 1
)
select (select count(*) from i), (select count(*) from d)`

// ackSQL is Queue.Ack's delete (the baseline's settle).
const ackSQL = `delete from queue_messages m using unnest($2::bigint[], $3::int[]) as r(id, received)
  where m.queue = $1 and m.id = r.id and m.received = r.received returning m.id`

// claimSetSQL is current-set's claim: every fresh key of the batch in one
// insert (a real driver would run claimSQL for the keys it did not
// insert: duplicates, reclaims, none here). $1 keys, $2 tokens, $3
// fingerprint, $4 lease until, $5 now, $6 expires at.
const claimSetSQL = `
insert into idempotency_records (key, state, token, fingerprint, attempt, lease_until, created_at, updated_at, expires_at, summary)
select k, 'IN_PROGRESS', t, $3, 1, $4, $5, $5, $6, '' from unnest($1::text[], $2::text[]) as c(k, t)
on conflict (key) do nothing`

// finishSettleSetSQL is current-set's settle: every DONE of the group
// and its message's delete in one statement. $1 keys, $2 tokens, $3
// message ids, $4 receive counts, $5 detail, $6 now, $7 expires at, $8
// queue.
const finishSettleSetSQL = `
with v as (
  select * from unnest($1::text[], $2::text[], $3::bigint[], $4::int[]) as v(k, t, id, received)
), u as (
  update idempotency_records r set state = 'DONE', status = 'DEBITED', detail = $5, updated_at = $6, expires_at = $7
  from v where r.key = v.k and r.state = 'IN_PROGRESS' and r.token = v.t
  returning r.key
), d as (
  delete from queue_messages m using v, u
  where u.key = v.k and m.queue = $8 and m.id = v.id and m.received = v.received
  returning 1
)
select (select count(*) from u), (select count(*) from d)`

// doneOnlySQL is record-floor's settle: the record inserted DONE-DEBITED
// with the message's delete, and no claim before it — not a guard (nothing
// stops a second delivery meanwhile), the least any design that keeps a
// record per charge writes. $1 key, $2 token, $3 fingerprint, $4 now, $5
// expires at, $6 detail, $7 queue, $8 message id, $9 receive count.
var doneOnlySQL = strings.Replace(doneOnMessageSQL, " and claim_key = $1", "", 1)

// doneOnlySetSQL is record-floor-set's settle: a group's messages deleted
// and their records inserted DONE-DEBITED in one statement. $1 keys, $2
// tokens, $3 message ids, $4 receive counts, $5 fingerprint, $6 now, $7
// expires at, $8 detail, $9 queue.
const doneOnlySetSQL = `
with v as (
  select * from unnest($1::text[], $2::text[], $3::bigint[], $4::int[]) as v(k, t, id, received)
), d as (
  delete from queue_messages m using v
  where m.queue = $9 and m.id = v.id and m.received = v.received
  returning v.k, v.t
), i as (
  insert into idempotency_records (key, state, token, fingerprint, attempt, lease_until, created_at, updated_at, expires_at, status, detail)
  select d.k, 'DONE', d.t, $5, 1, $6, $6, $6, $7, 'DEBITED', $8 from d
  on conflict (key) do nothing
  returning 1
)
select (select count(*) from i), (select count(*) from d)`
