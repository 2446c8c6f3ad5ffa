// Package redisstore is a driver.Store on Redis, usable with any
// queue. Each record is one hash under Prefix + key, so every operation
// touches one key and the store works on Redis Cluster; claim, finish,
// extend and reopen are each one Lua script, which Redis runs atomically.
// The key expires at the record's retention (a relative TTL computed from
// the claimant's clock, so the server's clock does not matter).
//
// The guarantee holds only while Redis keeps what it acknowledged: run it
// with AOF and appendfsync always (or accept losing the last second of
// claims with everysec), and know that an asynchronous replica promoted
// on failover may lack the latest claims — a charge claimed just before a
// failover can then be claimed again, and only the bank's idempotency key
// stops a second posting. See the README's backend table.
package redisstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/finedge/idempotent-consumer/idempotency/driver"
)

// Store implements driver.Store.
type Store struct {
	c      redis.UniversalClient
	prefix string
}

var (
	_ driver.Store         = (*Store)(nil)
	_ driver.Amender       = (*Store)(nil)
	_ driver.Collector     = (*Store)(nil)
	_ driver.ResultLister  = (*Store)(nil)
	_ driver.StateLister   = (*Store)(nil)
	_ driver.UpdatedWalker = (*Store)(nil)
)

// Options configure a Store.
type Options struct {
	// Prefix is put before every key. Default "ic:".
	Prefix string
}

// New returns a store on c (a client, a cluster client or a ring).
func New(c redis.UniversalClient, o Options) (*Store, error) {
	if c == nil {
		return nil, errors.New("redisstore: New needs a client")
	}
	if o.Prefix == "" {
		o.Prefix = "ic:"
	}
	return &Store{c: c, prefix: o.Prefix}, nil
}

// Times are Unix milliseconds in the hash; a TTL is set to ExpiresAt - Now.

// claimScript: ARGV token, fingerprint, now, lease expired by, lease until,
// expires at, ttl ms, summary ("" keeps a live record's). Returns {1,
// attempt, created_at, generation, history, reclaimed, summary} when the claim is written, else {0, field, value, ...} (the
// existing hash). A claim over a live record (a reclaim of an IN_PROGRESS
// claim, or the resume of a WAITING record that is due) keeps the audit
// fields, the generation and the history; only the first is reclaimed (1).
var claimScript = redis.NewScript(`
local k = KEYS[1]
local now, expiredBy = tonumber(ARGV[3]), tonumber(ARGV[4])
local old = redis.call('HGETALL', k)
local attempt, created, generation, history, reclaimed, summary = 1, ARGV[3], 1, '', 0, ARGV[8]
local keepAudit = false
if #old > 0 then
  local h = {}
  for i = 1, #old, 2 do h[old[i]] = old[i + 1] end
  local past = tonumber(h.expires_at) <= now
  if not past then
    if (h.state == 'IN_PROGRESS' or h.state == 'WAITING') and tonumber(h.lease_until) <= expiredBy and h.fingerprint == ARGV[2] then
      attempt, created, keepAudit = tonumber(h.attempt) + 1, h.created_at, true
      generation, history = tonumber(h.generation or '1'), h.history or ''
      if summary == '' then summary = h.summary or '' end
      if h.state == 'IN_PROGRESS' then reclaimed = 1 end
    else
      return {0, old}
    end
  end
end
if not keepAudit then
  redis.call('DEL', k)
end
redis.call('HSET', k, 'state', 'IN_PROGRESS', 'token', ARGV[1], 'fingerprint', ARGV[2], 'attempt', attempt,
  'lease_until', ARGV[5], 'created_at', created, 'updated_at', ARGV[3], 'expires_at', ARGV[6], 'status', '', 'detail', '',
  'generation', generation, 'history', history, 'summary', summary)
redis.call('PEXPIRE', k, ARGV[7])
return {1, attempt, created, generation, history, reclaimed, summary}
`)

// finishScript: ARGV token, state, status, detail, now, expires at, ttl,
// not-before ("" but for WAITING: the new lease_until), generation (0
// keep), history given ("1" replace, "0" keep), history. Returns 1
// written, 2 already in that state under the token (a retry that landed),
// 0 not ours.
var finishScript = redis.NewScript(`
local k = KEYS[1]
local h = redis.call('HMGET', k, 'state', 'token')
if h[1] == 'IN_PROGRESS' and h[2] == ARGV[1] then
  redis.call('HSET', k, 'state', ARGV[2], 'status', ARGV[3], 'detail', ARGV[4], 'updated_at', ARGV[5], 'expires_at', ARGV[6])
  if ARGV[8] ~= '' then redis.call('HSET', k, 'lease_until', ARGV[8]) end
  if tonumber(ARGV[9]) > 0 then redis.call('HSET', k, 'generation', ARGV[9]) end
  if ARGV[10] == '1' then redis.call('HSET', k, 'history', ARGV[11]) end
  redis.call('PEXPIRE', k, ARGV[7])
  return 1
end
if h[1] == ARGV[2] and h[2] == ARGV[1] then return 2 end
return 0
`)

// extendScript: ARGV token, lease until, now. Returns 1 or 0 (not ours).
var extendScript = redis.NewScript(`
local k = KEYS[1]
local h = redis.call('HMGET', k, 'state', 'token')
if h[1] == 'IN_PROGRESS' and h[2] == ARGV[1] then
  redis.call('HSET', k, 'lease_until', ARGV[2], 'updated_at', ARGV[3])
  return 1
end
return 0
`)

// readHash begins the scripts that write a record only as read (reopen,
// amend, collect): KEYS[1]'s hash as old (its field, value pairs) and as
// the table h; a missing key answers {0}.
const readHash = `
local k = KEYS[1]
local old = redis.call('HGETALL', k)
if #old == 0 then return {0} end
local h = {}
for i = 1, #old, 2 do h[old[i]] = old[i + 1] end`

// reopenScript: ARGV token, now, expires at, reason, lease until, ttl,
// previous token ("" any), generation (0 keep), history. Returns {1, hash}
// reopened, {0, hash} not FAILED, another token or past retention, {0}
// missing.
var reopenScript = redis.NewScript(readHash + `
if h.state ~= 'FAILED' or tonumber(h.expires_at) <= tonumber(ARGV[2]) then return {0, old} end
if ARGV[7] ~= '' and h.token ~= ARGV[7] then return {0, old} end
if tonumber(ARGV[8]) > 0 then
  redis.call('HSET', k, 'generation', ARGV[8], 'history', ARGV[9])
end
redis.call('HSET', k, 'state', 'IN_PROGRESS', 'token', ARGV[1], 'lease_until', ARGV[5], 'updated_at', ARGV[2],
  'expires_at', ARGV[3], 'prev_status', h.status or '', 'prev_detail', h.detail or '', 'status', '', 'detail', '',
  'reopens', tonumber(h.reopens or '0') + 1, 'reopened_at', ARGV[2], 'reopen_reason', ARGV[4])
redis.call('PEXPIRE', k, ARGV[6])
return {1, redis.call('HGETALL', k)}
`)

func ms(t time.Time) int64 { return t.UnixMilli() }

// ttl is how long a record written at now must live to reach expiresAt
// (at least 1 ms: PEXPIRE 0 would delete it at once).
func ttl(now, expiresAt time.Time) int64 { return max(expiresAt.Sub(now).Milliseconds(), 1) }

func (s *Store) key(k string) string { return s.prefix + k }

// Claim implements driver.Store: one script, one round trip also for
// a duplicate (the script returns the existing record).
func (s *Store) Claim(ctx context.Context, req driver.ClaimRequest) (driver.ClaimResult, error) {
	if req.Key == "" || req.Token == "" {
		return driver.ClaimResult{}, fmt.Errorf("%w: claim needs key and token", driver.ErrInvalid)
	}
	res, err := claimScript.Run(ctx, s.c, []string{s.key(req.Key)}, req.Token, req.Fingerprint, ms(req.Now), ms(req.LeaseExpiredBy),
		ms(req.LeaseUntil), ms(req.ExpiresAt), ttl(req.Now, req.ExpiresAt), req.Summary).Slice()
	if err != nil {
		return driver.ClaimResult{}, driver.Unavailable("claim", err)
	}
	if len(res) == 7 && res[0] == int64(1) {
		attempt, _ := res[1].(int64)
		created := parseMS(res[2])
		generation, _ := res[3].(int64)
		history, _ := res[4].(string)
		summary, _ := res[6].(string)
		return driver.ClaimResult{Acquired: true, Reclaimed: res[5] == int64(1), Record: driver.Record{
			Key: req.Key, State: driver.StateInProgress, LeaseUntil: req.LeaseUntil, Token: req.Token,
			Attempt: int(attempt), Fingerprint: req.Fingerprint, CreatedAt: created, UpdatedAt: req.Now, ExpiresAt: req.ExpiresAt,
			Generation: int(generation), History: driver.SplitHistory(history), Summary: summary,
		}}, nil
	}
	if len(res) != 2 {
		return driver.ClaimResult{}, driver.Unavailable("claim", fmt.Errorf("unexpected script answer %v", res))
	}
	rec, err := decode(req.Key, res[1])
	if err != nil {
		return driver.ClaimResult{}, driver.Unavailable("claim", err)
	}
	return driver.ClaimResult{Record: rec}, nil
}

// parseMS reads a Unix-millisecond field (string or integer).
func parseMS(v any) time.Time {
	var n int64
	switch x := v.(type) {
	case int64:
		n = x
	case string:
		n, _ = strconv.ParseInt(x, 10, 64)
	}
	return time.UnixMilli(n).UTC()
}

// decode turns a flat field/value list (or map) into a record.
func decode(key string, v any) (driver.Record, error) {
	h := map[string]string{}
	switch x := v.(type) {
	case []any:
		for i := 0; i+1 < len(x); i += 2 {
			k, _ := x[i].(string)
			val, _ := x[i+1].(string)
			h[k] = val
		}
	case map[string]string:
		h = x
	default:
		return driver.Record{}, fmt.Errorf("redisstore: record %s: unexpected %T", key, v)
	}
	if h["state"] == "" {
		return driver.Record{}, fmt.Errorf("redisstore: record %s has no state", key)
	}
	n := func(f string) int { i, _ := strconv.Atoi(h[f]); return i }
	r := driver.Record{
		Key: key, State: driver.State(h["state"]), Token: h["token"], Fingerprint: h["fingerprint"], Attempt: n("attempt"),
		LeaseUntil: parseMS(h["lease_until"]), CreatedAt: parseMS(h["created_at"]), UpdatedAt: parseMS(h["updated_at"]),
		ExpiresAt: parseMS(h["expires_at"]), Status: h["status"], Detail: h["detail"], Reopens: n("reopens"),
		ReopenReason: h["reopen_reason"], PrevStatus: h["prev_status"], PrevDetail: h["prev_detail"],
		Generation: max(n("generation"), 1), History: driver.SplitHistory(h["history"]), Summary: h["summary"],
	}
	if h["reopened_at"] != "" {
		r.ReopenedAt = parseMS(h["reopened_at"])
	}
	return r, nil
}

// Get implements driver.Store.
func (s *Store) Get(ctx context.Context, key string, now time.Time) (driver.Record, error) {
	h, err := s.c.HGetAll(ctx, s.key(key)).Result()
	if err != nil {
		return driver.Record{}, driver.Unavailable("get", err)
	}
	if len(h) == 0 {
		return driver.Record{}, driver.ErrNotFound
	}
	rec, err := decode(key, h)
	if err != nil {
		return driver.Record{}, driver.Unavailable("get", err)
	}
	if rec.Expired(now) {
		return driver.Record{}, driver.ErrNotFound
	}
	return rec, nil
}

// Finish implements driver.Store.
func (s *Store) Finish(ctx context.Context, f driver.FinishRequest) error {
	if !f.Valid() {
		return fmt.Errorf("%w: finish to state %q (not-before %v)", driver.ErrInvalid, f.State, f.NotBefore)
	}
	notBefore, hasHistory := "", "0"
	if f.State == driver.StateWaiting {
		notBefore = strconv.FormatInt(ms(f.NotBefore), 10)
	}
	if f.History != nil {
		hasHistory = "1"
	}
	n, err := finishScript.Run(ctx, s.c, []string{s.key(f.Key)}, f.Token, string(f.State), f.Status, f.Detail,
		ms(f.Now), ms(f.ExpiresAt), ttl(f.Now, f.ExpiresAt), notBefore, f.Generation, hasHistory, driver.JoinHistory(f.History)).Int()
	if err != nil {
		return driver.Unavailable("finish", err)
	}
	if n == 0 {
		return driver.ErrLeaseLost
	}
	return nil
}

// Extend implements driver.Store.
func (s *Store) Extend(ctx context.Context, req driver.ExtendRequest) error {
	n, err := extendScript.Run(ctx, s.c, []string{s.key(req.Key)}, req.Token, ms(req.LeaseUntil), ms(req.Now)).Int()
	if err != nil {
		return driver.Unavailable("extend", err)
	}
	if n == 0 {
		return driver.ErrLeaseLost
	}
	return nil
}

// Reopen implements driver.Store.
func (s *Store) Reopen(ctx context.Context, r driver.ReopenRequest) (driver.Record, error) {
	if r.Key == "" || r.Token == "" {
		return driver.Record{}, fmt.Errorf("%w: reopen needs key and token", driver.ErrInvalid)
	}
	res, err := reopenScript.Run(ctx, s.c, []string{s.key(r.Key)}, r.Token, ms(r.Now), ms(r.ExpiresAt), r.Reason,
		ms(r.LeaseUntil), ttl(r.Now, r.ExpiresAt), r.PrevToken, r.Generation, driver.JoinHistory(r.History)).Slice()
	return answered("reopen", r.Key, res, err, r.Now, driver.ErrNotFailed)
}

// amendScript: ARGV token, from status, status, detail, history, now.
// Returns {1, hash} amended, {0, hash} not as read (or past retention),
// {0} missing.
var amendScript = redis.NewScript(readHash + `
if h.state ~= 'DONE' or h.token ~= ARGV[1] or h.status ~= ARGV[2] or tonumber(h.expires_at) <= tonumber(ARGV[6]) then return {0, old} end
redis.call('HSET', k, 'status', ARGV[3], 'detail', ARGV[4], 'history', ARGV[5], 'updated_at', ARGV[6])
return {1, redis.call('HGETALL', k)}
`)

// Amend implements driver.Amender: one script.
func (s *Store) Amend(ctx context.Context, a driver.AmendRequest) (driver.Record, error) {
	res, err := amendScript.Run(ctx, s.c, []string{s.key(a.Key)}, a.Token, a.FromStatus, a.Status, a.Detail,
		driver.JoinHistory(a.History), ms(a.Now)).Slice()
	return answered("amend", a.Key, res, err, a.Now, driver.ErrStale)
}

// collectScript: ARGV from state, token read, generation read (1 or
// more; a record without one is 1), lease expired by (for IN_PROGRESS),
// new token, posted generation, status, detail, history, now, expires at,
// ttl. Returns {1, hash} collected, {2, hash} DONE under the new token
// already (a retry that landed), {0, hash} not as read (or past
// retention), {0} missing.
var collectScript = redis.NewScript(readHash + `
if tonumber(h.expires_at) <= tonumber(ARGV[10]) then return {0, old} end
if h.state == 'DONE' and h.token == ARGV[5] then return {2, old} end
local gen = tonumber(h.generation or '1') or 1
if gen < 1 then gen = 1 end
if h.state ~= ARGV[1] or h.token ~= ARGV[2] or gen ~= tonumber(ARGV[3]) then return {0, old} end
if ARGV[1] == 'IN_PROGRESS' and tonumber(h.lease_until) > tonumber(ARGV[4]) then return {0, old} end
redis.call('HSET', k, 'state', 'DONE', 'token', ARGV[5], 'generation', ARGV[6], 'status', ARGV[7], 'detail', ARGV[8],
  'history', ARGV[9], 'updated_at', ARGV[10], 'expires_at', ARGV[11])
redis.call('PEXPIRE', k, ARGV[12])
return {1, redis.call('HGETALL', k)}
`)

// answered reads the answer of a script that writes key only as read
// (reopen, amend, collect): {1, hash} written, {2, hash} written already
// (a collect's retry that landed), {0, hash} not as read, {0} missing.
// The record past its retention at now is missing; one not as read is
// refused.
func answered(op, key string, res []any, err error, now time.Time, refused error) (driver.Record, error) {
	if err != nil {
		return driver.Record{}, driver.Unavailable(op, err)
	}
	if len(res) == 1 {
		return driver.Record{}, driver.ErrNotFound
	}
	rec, err := decode(key, res[1])
	if err != nil {
		return driver.Record{}, driver.Unavailable(op, err)
	}
	switch {
	case res[0] == int64(1), res[0] == int64(2):
		return rec, nil
	case rec.Expired(now):
		return driver.Record{}, driver.ErrNotFound
	}
	return rec, refused
}

// Collect implements driver.Collector: one script.
func (s *Store) Collect(ctx context.Context, c driver.CollectRequest) (driver.Record, error) {
	if !c.Valid() {
		return driver.Record{}, fmt.Errorf("%w: collect needs key, the token read, a new token, a state it collects from and the posted generation", driver.ErrInvalid)
	}
	res, err := collectScript.Run(ctx, s.c, []string{s.key(c.Key)}, string(c.From), c.Token, max(c.Generation, 1), ms(c.LeaseExpiredBy),
		c.NewToken, c.PostedGeneration, c.Status, c.Detail, driver.JoinHistory(c.History), ms(c.Now), ms(c.ExpiresAt), ttl(c.Now, c.ExpiresAt)).Slice()
	return answered("collect", c.Key, res, err, c.Now, driver.ErrStale)
}

// ListByResult implements driver.ResultLister by SCAN over the prefix
// (an operator's tool: it reads every record).
func (s *Store) ListByResult(ctx context.Context, state driver.State, status string, now time.Time, limit int) ([]driver.Record, error) {
	var out []driver.Record
	iter := s.c.Scan(ctx, 0, s.prefix+"*", 500).Iterator()
	for iter.Next(ctx) {
		k := iter.Val()
		h, err := s.c.HGetAll(ctx, k).Result()
		if err != nil {
			return nil, driver.Unavailable("list", err)
		}
		if len(h) == 0 || h["state"] != string(state) || h["status"] != status {
			continue
		}
		rec, err := decode(strings.TrimPrefix(k, s.prefix), h)
		if err == nil && !rec.Expired(now) {
			out = append(out, rec)
		}
	}
	if err := iter.Err(); err != nil {
		return nil, driver.Unavailable("list", err)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].UpdatedAt.Before(out[j].UpdatedAt) })
	return out[:min(limit, len(out))], nil
}

// ListState implements driver.StateLister by SCAN: Redis keeps no index
// by state (one key per record, so that every write touches one key and
// the store works on Redis Cluster), so every page reads the keys under
// the prefix — with a search, only those of the charge-id prefix are
// returned by the server (MATCH, the prefix's glob characters escaped:
// they match only themselves), but the server still walks every key. An
// operator's tool; on a large keyspace search by prefix.
func (s *Store) ListState(ctx context.Context, req driver.ListRequest) (driver.ListPage, error) {
	limit := req.PageLimit()
	var keys []string
	iter := s.c.Scan(ctx, 0, globEscape(s.prefix+req.Prefix)+"*", 1000).Iterator()
	for iter.Next(ctx) {
		if k := strings.TrimPrefix(iter.Val(), s.prefix); k > req.After {
			keys = append(keys, k)
		}
		if len(keys) > MaxListScan {
			return driver.ListPage{}, fmt.Errorf("%w: more than %d records under %q on Redis, which keeps no index by state: search by a longer charge-id prefix",
				driver.ErrNotIndexed, MaxListScan, req.Prefix)
		}
	}
	if err := iter.Err(); err != nil {
		return driver.ListPage{}, driver.Unavailable("list", err)
	}
	sort.Strings(keys)
	keys = slices.Compact(keys) // SCAN may return a key twice
	var out []driver.Record
	for len(keys) > 0 && len(out) <= limit {
		batch := keys[:min(len(keys), 100)]
		keys = keys[len(batch):]
		cmds := s.hashes(ctx, batch)
		for i, k := range batch {
			h, err := hashOf(cmds[i])
			if err != nil {
				return driver.ListPage{}, driver.Unavailable("list", err)
			}
			if len(h) == 0 || h["state"] != string(req.State) {
				continue // gone since the scan, another program's key or another state
			}
			rec, err := decode(k, h)
			if err == nil && req.Listed(rec) {
				out = append(out, rec)
			}
		}
	}
	return driver.Page(out[:min(len(out), limit+1)], limit), nil
}

// hashes asks for the hashes of keys (names under the prefix) in one
// pipeline; each command's own error is read by hashOf.
func (s *Store) hashes(ctx context.Context, keys []string) []*redis.MapStringStringCmd {
	p := s.c.Pipeline()
	cmds := make([]*redis.MapStringStringCmd, len(keys))
	for i, k := range keys {
		cmds[i] = p.HGetAll(ctx, s.key(k))
	}
	_, _ = p.Exec(ctx) // each command's own error below
	return cmds
}

// hashOf is a pipelined HGETALL's hash: none for a key gone or another
// program's key under the prefix (not a hash: not a record).
func hashOf(c *redis.MapStringStringCmd) (map[string]string, error) {
	if err := c.Err(); err != nil && !errors.Is(err, redis.Nil) {
		if strings.HasPrefix(err.Error(), "WRONGTYPE") {
			return nil, nil
		}
		return nil, err
	}
	return c.Val(), nil
}

// MaxListScan bounds the keys one ListState page holds in memory (they
// are sorted to page by key): past it the listing refuses, saying to
// search by a longer prefix.
var MaxListScan = 200_000

// globEscape makes s match only itself in a Redis glob pattern.
func globEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[]\^-`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// Ping checks that the server answers.
func (s *Store) Ping(ctx context.Context) error { return s.c.Ping(ctx).Err() }

// WalkUpdated implements driver.UpdatedWalker: one SCAN of the prefix's
// keys, read 100 at a time in a pipeline, each record filtered by
// req.Walked (no index by state or time on Redis: a daily job's read of
// every record once). SCAN may return a key twice: the keys walked are
// remembered to call fn once each (memory: the records walked, a day's
// finished charges, not the table).
func (s *Store) WalkUpdated(ctx context.Context, req driver.WalkRequest, fn func(driver.Record) error) error {
	iter := s.c.Scan(ctx, 0, globEscape(s.prefix)+"*", 1000).Iterator()
	batch := make([]string, 0, 100)
	walked := map[string]struct{}{}
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		cmds := s.hashes(ctx, batch)
		for i, k := range batch {
			h, err := hashOf(cmds[i])
			if err != nil {
				return driver.Unavailable("walk", err)
			}
			if len(h) == 0 || h["state"] != string(req.State) {
				continue
			}
			rec, err := decode(k, h)
			if _, dup := walked[k]; err == nil && !dup && req.Walked(rec) {
				walked[k] = struct{}{}
				if err := fn(rec); err != nil {
					return err
				}
			}
		}
		batch = batch[:0]
		return nil
	}
	for iter.Next(ctx) {
		batch = append(batch, strings.TrimPrefix(iter.Val(), s.prefix))
		if len(batch) == cap(batch) {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	if err := iter.Err(); err != nil {
		return driver.Unavailable("walk", err)
	}
	return flush()
}
