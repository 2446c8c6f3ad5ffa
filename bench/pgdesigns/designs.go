package main

import (
	"strings"
)

// The tables as postgres/db.go's migrations leave them (1–6 applied):
// the records' key collated "C", the partial open index, no stuck or
// state-key index. expiresIdx is the index on expires_at (a btree, or
// BRIN for brin-expires); claimCol adds queue_messages.claim_key and its
// partial unique index (claim-on-message, claim-on-receive).
func schemaSQL(expiresIdx string, claimCol bool) string {
	s := `
create table idempotency_records (
  key           text collate "C" primary key,
  state         text not null check (state in ('IN_PROGRESS', 'DONE', 'FAILED', 'WAITING')),
  token         text not null,
  fingerprint   text not null,
  attempt       integer not null,
  lease_until   timestamptz not null,
  created_at    timestamptz not null,
  updated_at    timestamptz not null,
  expires_at    timestamptz not null,
  status        text not null default '',
  detail        text not null default '',
  reopens       integer not null default 0,
  reopened_at   timestamptz,
  reopen_reason text not null default '',
  prev_status   text not null default '',
  prev_detail   text not null default '',
  generation    integer not null default 1,
  history       text not null default '',
  summary       text not null default ''
) with (autovacuum_enabled = false);
create index idempotency_records_expires_idx on idempotency_records using ` + expiresIdx + ` (expires_at);
create index idempotency_records_open_idx on idempotency_records (state, key) where ` + openPredicate + `;
create table queue_messages (
  id         bigint generated always as identity primary key,
  queue      text not null,
  body       bytea not null,
  attributes jsonb,
  created_at timestamptz not null default clock_timestamp(),
  visible_at timestamptz not null default clock_timestamp(),
  received   integer not null default 0
) with (autovacuum_enabled = false);
create index queue_messages_ready_idx on queue_messages (queue, visible_at, id);
create index queue_messages_created_idx on queue_messages (queue, created_at);
`
	if claimCol {
		s += `alter table queue_messages add column claim_key text collate "C";
create unique index queue_messages_claim_idx on queue_messages (claim_key) where claim_key is not null;
`
	}
	return s
}

// openPredicate is postgres/db.go's.
const openPredicate = `(state <> 'DONE' or status <> 'DEBITED')`

// receiveSQL is postgres/queue.go's. $1 queue, $2 max, $3 max receive
// count, $4 visibility (ms), $5 largest body returned.
const receiveSQL = `
with picked as (
  select id from queue_messages
  where queue = $1 and visible_at <= clock_timestamp() and received < $3
  order by visible_at, id
  limit $2
  for update skip locked
)
update queue_messages m set received = m.received + 1, visible_at = clock_timestamp() + $4 * interval '1 millisecond'
from picked where m.id = picked.id
returning m.id, case when octet_length(m.body) <= $5 then m.body end, m.received`

// receiveClaimSQL is receiveSQL that also writes the claim on the message
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
returning m.id, case when octet_length(m.body) <= $5 then m.body end, m.received`

// claimOnMessageSQL is claim-on-message's claim: after the plain receive,
// one update per message, so that a duplicate does not abort the batch.
// $1 key, $2 message id.
const claimOnMessageSQL = `
update queue_messages set claim_key = $1
where id = $2 and claim_key is null
  and not exists (select 1 from queue_messages where claim_key = $1)
  and not exists (select 1 from idempotency_records where key = $1)`

const columns = `key, state, token, fingerprint, attempt, lease_until, created_at, updated_at, expires_at, status, detail,
  reopens, reopened_at, reopen_reason, prev_status, prev_detail, generation, history, summary`

// claimSQL is postgres/store.go's. $1 key, $2 token, $3 fingerprint, $4
// lease until, $5 now, $6 expires at, $7 lease expired by, $8 summary.
const claimSQL = `
with prev as (
  select ` + columns + ` from idempotency_records where key = $1 for no key update
), upd as (
  update idempotency_records r set
    attempt = case when p.expires_at <= $5 then 1 else p.attempt + 1 end,
    created_at = case when p.expires_at <= $5 then $5 else p.created_at end,
    state = 'IN_PROGRESS', token = $2, fingerprint = $3, lease_until = $4,
    updated_at = $5, expires_at = $6, status = '', detail = '',
    summary = case when $8 = '' and p.expires_at > $5 then p.summary else $8 end,
    reopens = case when p.expires_at <= $5 then 0 else p.reopens end,
    reopened_at = case when p.expires_at <= $5 then null else p.reopened_at end,
    reopen_reason = case when p.expires_at <= $5 then '' else p.reopen_reason end,
    prev_status = case when p.expires_at <= $5 then '' else p.prev_status end,
    prev_detail = case when p.expires_at <= $5 then '' else p.prev_detail end,
    generation = case when p.expires_at <= $5 then 1 else p.generation end,
    history = case when p.expires_at <= $5 then '' else p.history end
  from prev p
  where r.key = $1
    and (p.expires_at <= $5 or (p.state in ('IN_PROGRESS', 'WAITING') and p.lease_until <= $7 and p.fingerprint = $3))
  returning r.attempt, r.created_at, r.generation, r.history, r.summary
), ins as (
  insert into idempotency_records (key, state, token, fingerprint, attempt, lease_until, created_at, updated_at, expires_at, summary)
  select $1, 'IN_PROGRESS', $2, $3, 1, $4, $5, $5, $6, $8 where not exists (select 1 from prev)
  on conflict (key) do nothing
  returning attempt, created_at, generation, history, summary
), won as (
  select * from upd union all select * from ins
)
select w.attempt, w.created_at, w.generation, w.history, w.summary, p.key, p.state, p.token, p.fingerprint, p.attempt, p.lease_until, p.created_at, p.updated_at,
  p.expires_at, p.status, p.detail, p.reopens, p.reopened_at, p.reopen_reason, p.prev_status, p.prev_detail, p.generation, p.history, p.summary
from (select 1) one left join won w on true left join prev p on true`

// finishSet is postgres/store.go's. $3 state, $4 status, $5 detail, $6
// now, $7 expires at, $8 not-before, $9 generation, $10 whether the
// history is replaced, $11 the history.
const finishSet = `state = $3, status = $4, detail = $5, updated_at = $6, expires_at = $7,
    lease_until = case when $3 = 'WAITING' then $8::timestamptz else lease_until end,
    generation = case when $9::integer > 0 then $9::integer else generation end,
    history = case when $10::boolean then $11::text else history end`

// finishSettleSQL is postgres/claim.go's (set: the record's SET list).
// $1 key, $2 token, $3–$11 as finishSet, $12 queue, $13 message id, $14
// receive count, $15 the DLQ (empty here), $16 the DLQ copy's attributes.
func finishSettleSQL(set string) string {
	return `
with u as (
  update idempotency_records set ` + set + `
  where key = $1 and state = 'IN_PROGRESS' and token = $2
  returning 1
), d as (
  delete from queue_messages
  where queue = $12 and id = $13 and received = $14 and exists (select 1 from u)
  returning body
), f as (
  insert into queue_messages (queue, body, attributes) select $15::text, body, $16::jsonb from d where $15::text <> ''
)
select (select count(*) from u), (select count(*) from d)`
}

// finishSetKeepExpiry is finishSet without the retention: the claim wrote
// the final one (no-expires-at-done). $7 is still passed, unused.
// (PostgreSQL compares an indexed column's old and new values, so an
// unchanged expires_at is no change; the state's change still makes the
// update non-HOT.)
var finishSetKeepExpiry = strings.Replace(finishSet, "expires_at = $7,", "expires_at = coalesce(expires_at, $7::timestamptz),", 1)

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

// lockMessagesSQL is postgres/claim.go's: a settle group's messages
// locked in id order.
const lockMessagesSQL = `select id from queue_messages where queue = $1 and id = any($2::bigint[]) order by id for update`

// ackSQL is postgres/queue.go's Ack (the baseline's settle).
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
const doneOnlySQL = `
with d as (
  delete from queue_messages
  where queue = $7 and id = $8 and received = $9
  returning 1
), i as (
  insert into idempotency_records (key, state, token, fingerprint, attempt, lease_until, created_at, updated_at, expires_at, status, detail)
  select $1, 'DONE', $2, $3, 1, $4, $4, $4, $5, 'DEBITED', $6 from d
  on conflict (key) do nothing
  returning 1
)
select (select count(*) from i), (select count(*) from d)`
