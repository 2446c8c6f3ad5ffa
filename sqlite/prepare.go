package sqlite

import (
	"context"
	"database/sql"
	"sync"
	"time"

	"github.com/finedge/idempotent-consumer/queue"
)

// A claiming receive's claims are made (each body parsed, each fingerprint
// computed: the policy's work) before its write, outside the single
// writer that every receive, claim, result and delete of the file goes
// through: prepare reads the messages next in line with a reader
// connection (WAL: beside the writer, never blocking it) and keeps a claim
// for each; the receive's write takes the one made from the very body it
// received (queue.ClaimPolicy.ClaimsPrepared), and makes any other there,
// as before. A prepared claim is used once (its token is fresh once) and
// within maxPreparedAge of being made (its time is its claim's Now, so a
// claim made earlier judges a lease as of then: at most that much on the
// safe side, a lease thought still held).

// maxPreparedAge is how long a prepared claim may wait for its receive.
const maxPreparedAge = 250 * time.Millisecond

// preparedAhead is how many receives' worth of messages prepare reads
// ahead: the receives under way at once take the next few batches.
const preparedAhead = 4

// maxPrepared bounds the prepared claims kept (messages another process
// received are never taken here: they age out).
const maxPrepared = 4096

// preparedClaims are the claims made ahead, by message id.
type preparedClaims struct {
	mu sync.Mutex
	m  map[string]preparedClaim
}

type preparedClaim struct {
	pr queue.Prepared
	at time.Time
	// making: a receive is preparing it (the others leave it alone).
	making bool
}

// take hands out the claim prepared for m, once.
func (c *preparedClaims) take(m queue.Message) (queue.Prepared, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[m.ID]
	if !ok || e.making {
		return queue.Prepared{}, false
	}
	delete(c.m, m.ID)
	return e.pr, time.Since(e.at) < maxPreparedAge
}

// reserve marks the ids not yet prepared (or prepared too long ago) as
// being prepared by the caller, and returns them; it drops what has aged
// out once the map is large.
func (c *preparedClaims) reserve(ids []string, now time.Time) []bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[string]preparedClaim{}
	}
	if len(c.m) >= maxPrepared/2 {
		for id, e := range c.m {
			if !e.making && now.Sub(e.at) >= maxPreparedAge {
				delete(c.m, id)
			}
		}
	}
	mine := make([]bool, len(ids))
	for i, id := range ids {
		e, ok := c.m[id]
		if (ok && (e.making || now.Sub(e.at) < maxPreparedAge)) || len(c.m) >= maxPrepared {
			continue
		}
		c.m[id] = preparedClaim{making: true}
		mine[i] = true
	}
	return mine
}

// put keeps what the caller prepared for the ids it reserved.
func (c *preparedClaims) put(msgs []queue.Message, prs []queue.Prepared, at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, m := range msgs {
		c.m[m.ID] = preparedClaim{pr: prs[i], at: at}
	}
}

// prepareSQL reads the messages the next receives take (receiveSQL's
// selection, the bodies within the size limit), with their attributes
// and time sent; their receive counts are the ones before those receives.
const prepareSQL = `select id, body, attributes, created from goqite
where queue = ? and ? >= timeout and received < ? and length(body) <= ?
order by priority desc, created
limit ?`

// prepare makes the claims of the messages next in line that no receive
// has prepared yet (see above). It is an optimisation only: a read that
// fails prepares nothing, and the receive makes its claims itself.
func (q *Queue) prepare(ctx context.Context, p queue.ClaimPolicy, max int) {
	now := time.Now().UTC()
	stmt, err := q.db.w.stmts.get(ctx, prepareSQL) // prepared once on the pool
	if err != nil {
		return
	}
	rows, err := stmt.QueryContext(ctx, q.opts.Name, now.Format(timeFormat), q.opts.MaxReceiveCount,
		queue.MaxMessageBytes, preparedAhead*max)
	if err != nil {
		return
	}
	var msgs []queue.Message
	for rows.Next() {
		var m queue.Message
		var attrs sql.NullString
		var created string
		if rows.Scan(&m.ID, &m.Body, &attrs, &created) != nil {
			break
		}
		if attrs.Valid {
			m.Attributes = queue.DecodeAttributes([]byte(attrs.String))
		}
		m.SentAt, _ = time.Parse(time.RFC3339Nano, created)
		msgs = append(msgs, m)
	}
	rows.Close()
	ids := make([]string, len(msgs))
	for i, m := range msgs {
		ids[i] = m.ID
	}
	mine := q.prepared.reserve(ids, now)
	keep := msgs[:0]
	for i, m := range msgs {
		if mine[i] {
			keep = append(keep, m)
		}
	}
	if len(keep) == 0 {
		return
	}
	prs := make([]queue.Prepared, len(keep))
	for i, m := range keep {
		prs[i] = p.Prepare(m)
	}
	q.prepared.put(keep, prs, now)
}
