// Package awsdynamodb is the driver.Store on Amazon DynamoDB: the claim is
// one conditional PutItem whose failure returns the existing item in the
// same round trip (ReturnValuesOnConditionCheckFailure=ALL_OLD), a reclaim
// of an expired lease (or the resume of a WAITING record that is due) a
// second write fenced on the state and token it saw, and every later write
// is conditional on state = IN_PROGRESS and the claim's token.
//
// Table layout: partition key "pk" (S); attributes state, token, fingerprint
// (S), attempt (N), leaseUntil, createdAt, updatedAt, expiresAt (N, Unix
// milliseconds), status and detail (S), and ttl (N, Unix seconds), the
// DynamoDB TTL attribute that deletes a record some time after its
// retention. A record past expiresAt counts as absent whether or not TTL has
// deleted it yet.
package awsdynamodb

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/finedge/idempotent-consumer/idempotency/driver"
)

// API is the part of the DynamoDB client the store uses.
type API interface {
	PutItem(ctx context.Context, in *dynamodb.PutItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error)
	UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
	GetItem(ctx context.Context, in *dynamodb.GetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error)
}

var _ API = (*dynamodb.Client)(nil)

// Attribute names.
const (
	attrKey         = "pk"
	attrState       = "state"
	attrToken       = "token"
	attrFingerprint = "fingerprint"
	attrAttempt     = "attempt"
	attrLeaseUntil  = "leaseUntil"
	attrCreatedAt   = "createdAt"
	attrUpdatedAt   = "updatedAt"
	attrExpiresAt   = "expiresAt"
	attrStatus      = "status"
	attrDetail      = "detail"
	attrReopens     = "reopens"
	attrReopenedAt  = "reopenedAt"
	attrReopenWhy   = "reopenReason"
	attrPrevStatus  = "prevStatus"
	attrPrevDetail  = "prevDetail"
	attrGeneration  = "generation"
	attrHistory     = "history"
	attrSummary     = "summary"
	// attrListState is the key of the sparse index IndexName: set only
	// while a record is in a state worth listing (listStateOf), removed by
	// the write that moves it out.
	attrListState = "listState"
	// AttrTTL is the table's TTL attribute (Unix seconds).
	AttrTTL = "ttl"
)

// names maps a placeholder to every attribute (several are reserved words).
var names = map[string]string{
	"#pk": attrKey, "#state": attrState, "#token": attrToken, "#fp": attrFingerprint,
	"#attempt": attrAttempt, "#lease": attrLeaseUntil, "#created": attrCreatedAt,
	"#updated": attrUpdatedAt, "#expires": attrExpiresAt, "#status": attrStatus,
	"#detail": attrDetail, "#ttl": AttrTTL, "#reopens": attrReopens, "#reopenedAt": attrReopenedAt,
	"#reopenWhy": attrReopenWhy, "#prevStatus": attrPrevStatus, "#prevDetail": attrPrevDetail,
	"#gen": attrGeneration, "#history": attrHistory, "#ls": attrListState, "#summary": attrSummary,
}

// IndexName is the table's sparse global secondary index: partition key
// listState (S), sort key pk, every attribute projected. Only the records
// an operator lists that left the hot path are in it — FAILED, WAITING
// (charges waiting for a retry or a window: operators must see them), and
// DONE with ListedResult (a missed notice) — so that their counts and
// lists are a Query, never a Scan. The hot path never writes the index: a
// fresh claim writes no listState, and its DONE (a whole-item PutItem
// without it) has none to remove, so a fresh charge is two table writes
// and no index write (DynamoDB bills a write to a global secondary index
// only for an item that is in it before or after the write). IN_PROGRESS
// is not in it, whether fresh, reclaimed, resumed, reopened or extended:
// a claim whose worker died and whose message never came back (it went to
// the DLQ) stays a fresh claim forever, so only a Scan finds every stuck
// claim, and that Scan reads every item anyway; indexing the other
// IN_PROGRESS records would cost index writes and save no read. Stuck,
// CountByState's IN_PROGRESS and ListState(IN_PROGRESS) are that Scan
// (scanInProgress, listing.go). DONE records, nearly all of a table, are
// not in it either (counting them would be a Scan). Reads of an index are
// eventually consistent: a record that just changed state may show in its
// old listing for a moment (the charge page reads it consistently).
//
// A table written by an older version may hold records with listState =
// IN_PROGRESS: each leaves the index with its next write (DONE, FAILED
// and WAITING by PutItem replace the whole item; a reclaim, a reopen and
// a finish in place REMOVE listState where it is not set), and nothing
// reads that partition any more, so one that is never written again (a
// stuck claim) lingers there unread until TTL deletes it.
const IndexName = "listState"

// ListedResult is the one DONE status the index holds: a charge debited
// whose pre-debit notice was not sent (charge.DebitedNotificationFailed).
// Every writer of a table must agree on it, so it is not an option.
const ListedResult = "DEBITED_NOTIFICATION_FAILED"

// listStateOf is r's listState ("" none: the attribute is not written, or
// is removed). IN_PROGRESS is never listed (see IndexName).
func listStateOf(state driver.State, status string) string {
	switch {
	case state == driver.StateFailed, state == driver.StateWaiting:
		return string(state)
	case state == driver.StateDone && status == ListedResult:
		return ListedResult
	}
	return ""
}

func pick(keys ...string) map[string]string {
	m := make(map[string]string, len(keys))
	for _, k := range keys {
		m[k] = names[k]
	}
	return m
}

// Store implements driver.Store on one DynamoDB table.
type Store struct {
	api   API
	table string
}

var (
	_ driver.Store         = (*Store)(nil)
	_ driver.StuckLister   = (*Store)(nil)
	_ driver.Amender       = (*Store)(nil)
	_ driver.Collector     = (*Store)(nil)
	_ driver.ResultLister  = (*Store)(nil)
	_ driver.StateLister   = (*Store)(nil)
	_ driver.StateCounter  = (*Store)(nil)
	_ driver.UpdatedWalker = (*Store)(nil)
)

// New returns a store on table through api (an *dynamodb.Client).
func New(api API, table string) (*Store, error) {
	if api == nil || table == "" {
		return nil, errors.New("dynamodb: New needs a client and a table name")
	}
	return &Store{api: api, table: table}, nil
}

// Table returns the table name.
func (s *Store) Table() string { return s.table }

func ms(t time.Time) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(t.UnixMilli(), 10)}
}

func str(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }

func num(n int64) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(n, 10)}
}

func (s *Store) key(k string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{attrKey: str(k)}
}

// updateAsRead is the UpdateItem of key's item that writes only where
// cond holds, answering the item as written or, where cond failed, as it
// was (a reclaim, reopen, amend or collect of the record as read).
func (s *Store) updateAsRead(key, cond, update string, names map[string]string, values map[string]types.AttributeValue) *dynamodb.UpdateItemInput {
	return &dynamodb.UpdateItemInput{
		TableName:                           aws.String(s.table),
		Key:                                 s.key(key),
		ConditionExpression:                 aws.String(cond),
		UpdateExpression:                    aws.String(update),
		ExpressionAttributeNames:            names,
		ExpressionAttributeValues:           values,
		ReturnValues:                        types.ReturnValueAllNew,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	}
}

// ttlSeconds rounds up, so that TTL never deletes a record before its
// retention.
func ttlSeconds(t time.Time) int64 {
	sec := t.Unix()
	if t.UnixMilli()%1000 != 0 {
		sec++
	}
	return sec
}

// claimCondition is the fresh claim's: no record, or one past its
// retention (which TTL has not deleted yet).
const claimCondition = `attribute_not_exists(#pk) OR #expires <= :now`

// reclaimCondition fences a reclaim on the record it takes over: the same
// record in the same state as read, IN_PROGRESS or WAITING (every claim,
// reclaim and reopen writes a new token; a finish to WAITING keeps it, so
// the state is fenced too: a reclaim must not take over as a crash a
// record that has since ended cleanly), its lease (a WAITING record's
// not-before) passed by the margin, its retention not.
const reclaimCondition = `#state = :seen AND #token = :prev AND #lease <= :expiredBy AND #expires > :now`

// reclaimUpdate keeps the attempt count (+1), CreatedAt, the reopen audit
// fields, the generation and the history; a WAITING record's status and
// detail go, and so does its listState (it leaves the WAITING listing:
// one index write; a reclaimed IN_PROGRESS record has none, and removing
// an absent attribute writes no index).
const reclaimUpdate = `SET #state = :ip, #token = :token, #lease = :lease, #attempt = #attempt + :one, #updated = :now, #expires = :exp, #ttl = :ttl ` +
	`REMOVE #status, #detail, #ls`

// reclaimSummaryUpdate is reclaimUpdate for a claim that writes its
// summary.
var reclaimSummaryUpdate = strings.Replace(reclaimUpdate, "SET ", "SET #summary = :summary, ", 1)

var (
	claimNames          = pick("#pk", "#expires")
	reclaimNames        = pick("#state", "#token", "#lease", "#expires", "#attempt", "#updated", "#ttl", "#ls", "#status", "#detail")
	reclaimSummaryNames = pick("#state", "#token", "#lease", "#expires", "#attempt", "#updated", "#ttl", "#ls", "#status", "#detail", "#summary")
)

// Claim implements driver.Store. A fresh claim, and a duplicate, is one
// conditional PutItem (the seed's shape): on success the new record is
// written whole; on failure the existing item comes back with the error
// (ReturnValuesOnConditionCheckFailure=ALL_OLD), so a duplicate costs one
// round trip and no read. Only the rare reclaim of an expired lease costs a
// second write: an UpdateItem fenced on the token the first one saw, which
// counts the attempt on the server and lets one of several racing
// reclaimers win. The resume of a WAITING record that is due is the same
// second write (it is not Reclaimed: the run before it ended cleanly), so
// a waiting charge costs two writes when it runs again. A backend that does not return the item on failure costs
// a strongly consistent read instead.
func (s *Store) Claim(ctx context.Context, req driver.ClaimRequest) (driver.ClaimResult, error) {
	if req.Key == "" || req.Token == "" {
		return driver.ClaimResult{}, fmt.Errorf("%w: claim needs key and token", driver.ErrInvalid)
	}
	fresh := driver.Record{
		Key: req.Key, State: driver.StateInProgress, LeaseUntil: req.LeaseUntil, Token: req.Token,
		Attempt: 1, Fingerprint: req.Fingerprint, Summary: req.Summary, CreatedAt: req.Now, UpdatedAt: req.Now, ExpiresAt: req.ExpiresAt,
	}
	tries := 0
	for range 3 {
		_, err := s.api.PutItem(ctx, &dynamodb.PutItemInput{
			TableName:                           aws.String(s.table),
			Item:                                encode(fresh),
			ConditionExpression:                 aws.String(claimCondition),
			ExpressionAttributeNames:            claimNames,
			ExpressionAttributeValues:           map[string]types.AttributeValue{":now": ms(req.Now)},
			ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
		})
		if err == nil {
			return driver.ClaimResult{Acquired: true, Record: fresh}, nil
		}
		old, found, err := s.existing(ctx, "claim", req.Key, req.Now, err)
		if err != nil {
			return driver.ClaimResult{}, err
		}
		// A reclaim that loses the race to another reclaimer gets the
		// winner's record back; when that record's lease has passed by
		// this claim's margin too, the claim must take it over as well
		// (found by the linearizability check: giving up there answered
		// "in progress" for a record this claim was entitled to).
		for found && req.Allows(old) && tries < maxReclaims {
			tries++
			var res driver.ClaimResult
			res, old, found, err = s.reclaim(ctx, req, old)
			if err != nil || res.Acquired {
				return res, err
			}
		}
		if !found {
			continue // deleted or expired between the write and the read: try again
		}
		if !req.Allows(old) {
			return driver.ClaimResult{Record: old}, nil // a duplicate: one round trip
		}
	}
	return driver.ClaimResult{}, driver.Unavailable("claim", errors.New("the key kept changing under the claim"))
}

// maxReclaims bounds the reclaim attempts of one claim: each lost race
// means another claimant took the key, so a few is plenty.
const maxReclaims = 8

// existing reads the item a failed conditional write returned (or, from a
// backend that returns none, reads it): found is false when there is no
// live record.
func (s *Store) existing(ctx context.Context, op, key string, now time.Time, err error) (driver.Record, bool, error) {
	var ccf *types.ConditionalCheckFailedException
	if !errors.As(err, &ccf) {
		return driver.Record{}, false, unavailable(op, err)
	}
	if len(ccf.Item) == 0 {
		rec, err := s.Get(ctx, key, now)
		if errors.Is(err, driver.ErrNotFound) {
			return driver.Record{}, false, nil
		}
		return rec, err == nil, err
	}
	rec, err := decode(ccf.Item)
	if err != nil {
		return driver.Record{}, false, err
	}
	return rec, !rec.Expired(now), nil
}

// reclaim takes over old, an IN_PROGRESS record whose lease passed or a
// WAITING one whose not-before did (req.Allows it). When the fenced write
// fails, it returns the record that stands now (found is
// false when there is none): another claimant's, or the owner's, moved on.
func (s *Store) reclaim(ctx context.Context, req driver.ClaimRequest, old driver.Record) (res driver.ClaimResult, now driver.Record, found bool, err error) {
	update, names := reclaimUpdate, reclaimNames
	values := map[string]types.AttributeValue{
		":ip": str(string(driver.StateInProgress)), ":seen": str(string(old.State)), ":prev": str(old.Token), ":token": str(req.Token),
		":lease": ms(req.LeaseUntil), ":expiredBy": ms(req.LeaseExpiredBy), ":now": ms(req.Now),
		":exp": ms(req.ExpiresAt), ":ttl": num(ttlSeconds(req.ExpiresAt)), ":one": num(1),
	}
	if req.Summary != "" {
		// A claim without a summary keeps the record's
		// (driver.ClaimRequest.SummaryOver: a reclaim never takes over a
		// record past its retention, the PutItem does).
		update, names = reclaimSummaryUpdate, reclaimSummaryNames
		values[":summary"] = str(req.Summary)
	}
	out, err := s.api.UpdateItem(ctx, s.updateAsRead(req.Key, reclaimCondition, update, names, values))
	if err == nil {
		rec, err := decode(out.Attributes)
		if err != nil {
			return driver.ClaimResult{}, driver.Record{}, false, err
		}
		return driver.ClaimResult{Acquired: true, Reclaimed: req.Reclaims(old), Record: rec}, rec, true, nil
	}
	now, found, err = s.existing(ctx, "claim", req.Key, req.Now, err)
	return driver.ClaimResult{}, now, found, err
}

// encode is a record as an item, the inverse of decode.
func encode(r driver.Record) map[string]types.AttributeValue {
	item := map[string]types.AttributeValue{
		attrKey: str(r.Key), attrState: str(string(r.State)), attrToken: str(r.Token), attrFingerprint: str(r.Fingerprint),
		attrAttempt: num(int64(r.Attempt)), attrLeaseUntil: ms(r.LeaseUntil), attrCreatedAt: ms(r.CreatedAt),
		attrUpdatedAt: ms(r.UpdatedAt), attrExpiresAt: ms(r.ExpiresAt), AttrTTL: num(ttlSeconds(r.ExpiresAt)),
	}
	if r.State != driver.StateInProgress {
		item[attrStatus], item[attrDetail] = str(r.Status), str(r.Detail)
	}
	if ls := listStateOf(r.State, r.Status); ls != "" {
		item[attrListState] = str(ls)
	}
	if r.Reopens > 0 {
		item[attrReopens], item[attrReopenedAt] = num(int64(r.Reopens)), ms(r.ReopenedAt)
		item[attrReopenWhy], item[attrPrevStatus], item[attrPrevDetail] = str(r.ReopenReason), str(r.PrevStatus), str(r.PrevDetail)
	}
	// Absent means generation 1 and no history: a first-generation item
	// costs no byte more.
	if r.Generation > 1 {
		item[attrGeneration] = num(int64(r.Generation))
	}
	if len(r.History) > 0 {
		item[attrHistory] = str(driver.JoinHistory(r.History))
	}
	if r.Summary != "" {
		item[attrSummary] = str(r.Summary)
	}
	return item
}

// Get implements driver.Store with a strongly consistent read.
func (s *Store) Get(ctx context.Context, key string, now time.Time) (driver.Record, error) {
	out, err := s.api.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: aws.String(s.table), Key: s.key(key), ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return driver.Record{}, unavailable("get", err)
	}
	if len(out.Item) == 0 {
		return driver.Record{}, driver.ErrNotFound
	}
	rec, err := decode(out.Item)
	if err != nil {
		return driver.Record{}, err
	}
	if rec.Expired(now) {
		return driver.Record{}, driver.ErrNotFound
	}
	return rec, nil
}

const heldCondition = `#state = :ip AND #token = :token`

// Finish implements driver.Store. With the claimed record (the Guard
// passes it) the finished record is written whole by one PutItem, on the
// same condition as the update: the item is IN_PROGRESS under our token, so
// it is the record our claim wrote, with at most its lease moved. The same
// capacity as an UpdateItem, and less work for the service to evaluate
// (moto's expression engine spends about six times as long on the update).
// To WAITING the lease is the not-before; the generation and the history
// are req's when it gives them.
func (s *Store) Finish(ctx context.Context, f driver.FinishRequest) error {
	if !f.Valid() {
		return fmt.Errorf("%w: finish to state %q (not-before %v)", driver.ErrInvalid, f.State, f.NotBefore)
	}
	var err error
	if c := f.Claimed; c != nil && c.Key == f.Key && c.Token == f.Token {
		done := *c
		done.State, done.Status, done.Detail, done.UpdatedAt, done.ExpiresAt = f.State, f.Status, f.Detail, f.Now, f.ExpiresAt
		if f.State == driver.StateWaiting {
			done.LeaseUntil = f.NotBefore
		}
		if f.Generation > 0 {
			done.Generation = f.Generation
		}
		if f.History != nil {
			done.History = f.History
		}
		_, err = s.api.PutItem(ctx, &dynamodb.PutItemInput{
			TableName:                aws.String(s.table),
			Item:                     encode(done),
			ConditionExpression:      aws.String(heldCondition),
			ExpressionAttributeNames: pick("#state", "#token"),
			ExpressionAttributeValues: map[string]types.AttributeValue{
				":ip": str(string(driver.StateInProgress)), ":token": str(f.Token),
			},
			ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
		})
	} else {
		err = s.update(ctx, f)
	}
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		// The SDK retried a finish whose first attempt landed (a 500 or a
		// dropped connection after the write): the item is already in the
		// target state under our token. Success, nothing to change. The
		// item comes back with the failure; a backend that does not return
		// it costs a strongly consistent read, as a claim does.
		old, found, rerr := s.existing(ctx, "finish", f.Key, f.Now, err)
		switch {
		case rerr != nil && !errors.Is(rerr, driver.ErrNotFound):
			return rerr
		case found && f.Landed(old):
			return nil
		}
	}
	return s.conditional("finish", err)
}

// update finishes in place, for a caller without the claimed record.
func (s *Store) update(ctx context.Context, f driver.FinishRequest) error {
	set := []string{"#state = :state", "#status = :status", "#detail = :detail", "#updated = :now", "#expires = :exp", "#ttl = :ttl"}
	var remove []string
	names := pick("#state", "#token", "#status", "#detail", "#updated", "#expires", "#ttl", "#ls")
	values := map[string]types.AttributeValue{
		":ip": str(string(driver.StateInProgress)), ":token": str(f.Token),
		":state": str(string(f.State)), ":status": str(f.Status), ":detail": str(f.Detail),
		":now": ms(f.Now), ":exp": ms(f.ExpiresAt), ":ttl": num(ttlSeconds(f.ExpiresAt)),
	}
	if ls := listStateOf(f.State, f.Status); ls != "" {
		set = append(set, "#ls = :ls")
		values[":ls"] = str(ls)
	} else {
		// Deliberate: a record an older version indexed as IN_PROGRESS
		// leaves the index here; on every other record listState is
		// absent, and removing an absent attribute writes no index.
		remove = append(remove, "#ls")
	}
	if f.State == driver.StateWaiting {
		set = append(set, "#lease = :notBefore")
		names["#lease"] = attrLeaseUntil
		values[":notBefore"] = ms(f.NotBefore)
	}
	if f.Generation > 0 {
		set = append(set, "#gen = :gen")
		names["#gen"] = attrGeneration
		values[":gen"] = num(int64(f.Generation))
	}
	if f.History != nil {
		names["#history"] = attrHistory
		if len(f.History) > 0 {
			set = append(set, "#history = :history")
			values[":history"] = str(driver.JoinHistory(f.History))
		} else {
			remove = append(remove, "#history")
		}
	}
	update := "SET " + strings.Join(set, ", ")
	if len(remove) > 0 {
		update += " REMOVE " + strings.Join(remove, ", ")
	}
	_, err := s.api.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                           aws.String(s.table),
		Key:                                 s.key(f.Key),
		ConditionExpression:                 aws.String(heldCondition),
		UpdateExpression:                    aws.String(update),
		ExpressionAttributeNames:            names,
		ExpressionAttributeValues:           values,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	return err
}

// Extend implements driver.Store. It never writes the index: a heartbeat
// is one table write, and an extended claim is found by Stuck's Scan like
// any other (IndexName).
func (s *Store) Extend(ctx context.Context, req driver.ExtendRequest) error {
	return s.held(ctx, "extend", req.Key, req.Token, `SET #lease = :lease, #updated = :now`,
		pick("#state", "#token", "#lease", "#updated"),
		map[string]types.AttributeValue{":lease": ms(req.LeaseUntil), ":now": ms(req.Now)})
}

// held runs an UpdateItem conditional on state IN_PROGRESS and token.
func (s *Store) held(ctx context.Context, op, key, token, update string, names map[string]string, values map[string]types.AttributeValue) error {
	values[":ip"] = str(string(driver.StateInProgress))
	values[":token"] = str(token)
	_, err := s.api.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 aws.String(s.table),
		Key:                       s.key(key),
		ConditionExpression:       aws.String(heldCondition),
		UpdateExpression:          aws.String(update),
		ExpressionAttributeNames:  names,
		ExpressionAttributeValues: values,
	})
	return s.conditional(op, err)
}

const reopenUpdate = `SET #state = :ip, #token = :token, #lease = :lease, #updated = :now, #expires = :exp, #ttl = :ttl, ` +
	`#prevStatus = if_not_exists(#status, :empty), #prevDetail = if_not_exists(#detail, :empty), ` +
	`#reopens = if_not_exists(#reopens, :zero) + :one, #reopenedAt = :now, #reopenWhy = :reason REMOVE #status, #detail, #ls`

// Reopen implements driver.Store with one UpdateItem conditional on
// state FAILED (and not past retention); on failure the existing item comes
// back with the error and says why.
func (s *Store) Reopen(ctx context.Context, r driver.ReopenRequest) (driver.Record, error) {
	if r.Key == "" || r.Token == "" {
		return driver.Record{}, fmt.Errorf("%w: reopen needs key and token", driver.ErrInvalid)
	}
	cond, update := `#state = :failed AND #expires > :now`, reopenUpdate
	names := pick("#state", "#token", "#lease", "#updated", "#expires", "#ttl", "#status", "#detail",
		"#prevStatus", "#prevDetail", "#reopens", "#reopenedAt", "#reopenWhy", "#ls")
	values := map[string]types.AttributeValue{
		":failed": str(string(driver.StateFailed)), ":ip": str(string(driver.StateInProgress)),
		":token": str(r.Token), ":now": ms(r.Now), ":lease": ms(r.LeaseUntil), ":exp": ms(r.ExpiresAt), ":ttl": num(ttlSeconds(r.ExpiresAt)),
		":empty": str(""), ":zero": num(0), ":one": num(1), ":reason": str(r.Reason),
	}
	if r.PrevToken != "" {
		cond += ` AND #token = :prev`
		values[":prev"] = str(r.PrevToken)
	}
	if r.Generation > 0 {
		// SET … REMOVE: the generation and history go in the SET clause,
		// before REMOVE.
		set, remove, _ := strings.Cut(update, " REMOVE ")
		set += `, #gen = :gen`
		names["#gen"] = attrGeneration
		values[":gen"] = num(int64(r.Generation))
		names["#history"] = attrHistory
		if len(r.History) > 0 {
			set += `, #history = :history`
			values[":history"] = str(driver.JoinHistory(r.History))
		} else {
			remove += `, #history`
		}
		update = set + " REMOVE " + remove
	}
	in := s.updateAsRead(r.Key, cond, update, names, values)
	for range maxReclaims {
		out, err := s.api.UpdateItem(ctx, in)
		if err == nil {
			return decode(out.Attributes)
		}
		var ccf *types.ConditionalCheckFailedException
		if !errors.As(err, &ccf) {
			return driver.Record{}, unavailable("reopen", err)
		}
		if len(ccf.Item) > 0 {
			rec, err := decode(ccf.Item)
			if err != nil {
				return driver.Record{}, err
			}
			if rec.Expired(r.Now) {
				return driver.Record{}, driver.ErrNotFound
			}
			return rec, driver.ErrNotFailed
		}
		// Missing, or a backend that does not return the item: read it.
		// The read comes after the failed write: when the record has become
		// one this reopen may take since (found by the linearizability
		// check: "not FAILED" with a FAILED record), write again.
		rec, err := s.Get(ctx, r.Key, r.Now)
		if err != nil {
			return driver.Record{}, err
		}
		if !r.Allows(rec) {
			return rec, driver.ErrNotFailed
		}
	}
	return driver.Record{}, driver.Unavailable("reopen", errors.New("the record kept changing under the reopen"))
}

// Amend implements driver.Amender with one UpdateItem conditional on
// the record as read (state DONE, token, status).
func (s *Store) Amend(ctx context.Context, a driver.AmendRequest) (driver.Record, error) {
	update := `SET #status = :status, #detail = :detail, #updated = :now`
	values := map[string]types.AttributeValue{
		":done": str(string(driver.StateDone)), ":token": str(a.Token), ":from": str(a.FromStatus),
		":status": str(a.Status), ":detail": str(a.Detail), ":now": ms(a.Now),
	}
	var remove []string
	if len(a.History) > 0 {
		update += `, #history = :history`
		values[":history"] = str(driver.JoinHistory(a.History))
	} else {
		remove = append(remove, "#history")
	}
	if ls := listStateOf(driver.StateDone, a.Status); ls != "" {
		update += `, #ls = :ls`
		values[":ls"] = str(ls)
	} else {
		remove = append(remove, "#ls")
	}
	if len(remove) > 0 {
		update += " REMOVE " + strings.Join(remove, ", ")
	}
	out, err := s.api.UpdateItem(ctx, s.updateAsRead(a.Key, `#state = :done AND #token = :token AND #status = :from AND #expires > :now`,
		update, pick("#state", "#token", "#status", "#detail", "#updated", "#history", "#expires", "#ls"), values))
	if err == nil {
		return decode(out.Attributes)
	}
	old, found, err := s.existing(ctx, "amend", a.Key, a.Now, err)
	switch {
	case err != nil && !errors.Is(err, driver.ErrNotFound):
		return driver.Record{}, err
	case !found:
		return driver.Record{}, driver.ErrNotFound
	}
	return old, driver.ErrStale
}

// Collect implements driver.Collector with one UpdateItem conditional on
// the record read (state, token, generation; for IN_PROGRESS its lease
// passed by LeaseExpiredBy; not past retention). The DONE record keeps
// the attribute rules of every DONE write: listState only for
// ListedResult (removed otherwise), the TTL with the retention. On
// failure the existing item comes back with the error and says why, or
// that the collect landed before (its answer lost).
func (s *Store) Collect(ctx context.Context, c driver.CollectRequest) (driver.Record, error) {
	if !c.Valid() {
		return driver.Record{}, fmt.Errorf("%w: collect needs key, the token read, a new token, a state it collects from and the posted generation", driver.ErrInvalid)
	}
	cond := `#state = :from AND #token = :token AND #expires > :now`
	names := pick("#state", "#token", "#expires", "#status", "#detail", "#updated", "#ttl", "#gen", "#history", "#ls")
	values := map[string]types.AttributeValue{
		":from": str(string(c.From)), ":token": str(c.Token), ":now": ms(c.Now), ":done": str(string(driver.StateDone)),
		":newToken": str(c.NewToken), ":posted": num(int64(c.PostedGeneration)), ":status": str(c.Status), ":detail": str(c.Detail),
		":exp": ms(c.ExpiresAt), ":ttl": num(ttlSeconds(c.ExpiresAt)), ":gen": num(int64(max(c.Generation, 1))),
	}
	if max(c.Generation, 1) == 1 {
		cond += ` AND (attribute_not_exists(#gen) OR #gen <= :gen)` // a record written before generations is generation 1
	} else {
		cond += ` AND #gen = :gen`
	}
	if c.From == driver.StateInProgress {
		cond += ` AND #lease <= :expiredBy`
		names["#lease"] = attrLeaseUntil
		values[":expiredBy"] = ms(c.LeaseExpiredBy)
	}
	set := []string{"#state = :done", "#token = :newToken", "#gen = :posted", "#status = :status", "#detail = :detail",
		"#updated = :now", "#expires = :exp", "#ttl = :ttl"}
	var remove []string
	if len(c.History) > 0 {
		set = append(set, "#history = :history")
		values[":history"] = str(driver.JoinHistory(c.History))
	} else {
		remove = append(remove, "#history")
	}
	if ls := listStateOf(driver.StateDone, c.Status); ls != "" {
		set = append(set, "#ls = :ls")
		values[":ls"] = str(ls)
	} else {
		remove = append(remove, "#ls")
	}
	update := "SET " + strings.Join(set, ", ")
	if len(remove) > 0 {
		update += " REMOVE " + strings.Join(remove, ", ")
	}
	in := s.updateAsRead(c.Key, cond, update, names, values)
	for range maxReclaims {
		out, err := s.api.UpdateItem(ctx, in)
		if err == nil {
			return decode(out.Attributes)
		}
		old, found, err := s.existing(ctx, "collect", c.Key, c.Now, err)
		switch {
		case err != nil && !errors.Is(err, driver.ErrNotFound):
			return driver.Record{}, err
		case !found:
			return driver.Record{}, driver.ErrNotFound
		case c.Landed(old):
			return old, nil
		case c.Allows(old):
			// A backend that returned no item, read after the failed
			// write: the record became collectable since (as Reopen).
			continue
		}
		return old, driver.ErrStale
	}
	return driver.Record{}, unavailable("collect", errors.New("the record kept changing under the collect"))
}

// ListByResult implements driver.ResultLister: a Query of IndexName for
// the results it holds, else (or on a table without it) a consistent Scan
// with a filter (an operator's tool: it reads the whole table).
func (s *Store) ListByResult(ctx context.Context, state driver.State, status string, now time.Time, limit int) ([]driver.Record, error) {
	if ls := listStateOf(state, status); ls != "" && (state != driver.StateDone || status == ListedResult) {
		// FAILED and WAITING are partitions of every status: the status is
		// a filter there (without it every FAILED charge was listed as
		// "DECLINED"). DONE's one partition is ListedResult's.
		var filter string
		var values map[string]types.AttributeValue
		if state != driver.StateDone {
			filter, values = `#status = :status`, map[string]types.AttributeValue{":status": str(status)}
		}
		out, err := s.queryAll(ctx, ls, now, filter, values)
		if err == nil {
			sort.Slice(out, func(i, j int) bool { return out[i].UpdatedAt.Before(out[j].UpdatedAt) })
			return out[:min(limit, len(out))], nil
		}
		if !errors.Is(err, driver.ErrNotIndexed) {
			return nil, err
		}
	}
	return s.listByResultScan(ctx, state, status, now, limit)
}

func (s *Store) listByResultScan(ctx context.Context, state driver.State, status string, now time.Time, limit int) ([]driver.Record, error) {
	scanner, ok := s.api.(interface {
		Scan(ctx context.Context, in *dynamodb.ScanInput, opts ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error)
	})
	if !ok {
		return nil, errors.New("dynamodb: the client cannot Scan")
	}
	var out []driver.Record
	p := dynamodb.NewScanPaginator(scanner, &dynamodb.ScanInput{
		TableName: aws.String(s.table), ConsistentRead: aws.Bool(true),
		FilterExpression:          aws.String(`#state = :state AND #status = :status AND #expires > :now`),
		ExpressionAttributeNames:  pick("#state", "#status", "#expires"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":state": str(string(state)), ":status": str(status), ":now": ms(now)},
	})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, unavailable("list", err)
		}
		for _, item := range page.Items {
			rec, err := decode(item)
			if err != nil {
				return nil, err
			}
			out = append(out, rec)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].UpdatedAt.Before(out[j].UpdatedAt) })
	return out[:min(limit, len(out))], nil
}

func (s *Store) conditional(op string, err error) error {
	if err == nil {
		return nil
	}
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		return driver.ErrLeaseLost
	}
	return unavailable(op, err)
}

// decode reads an item into a Record.
func decode(item map[string]types.AttributeValue) (driver.Record, error) {
	d := decoder{item: item}
	rec := driver.Record{
		Key:          d.s(attrKey),
		State:        driver.State(d.s(attrState)),
		Token:        d.s(attrToken),
		Fingerprint:  d.s(attrFingerprint),
		Attempt:      int(d.n(attrAttempt)),
		LeaseUntil:   d.t(attrLeaseUntil),
		CreatedAt:    d.t(attrCreatedAt),
		UpdatedAt:    d.t(attrUpdatedAt),
		ExpiresAt:    d.t(attrExpiresAt),
		Status:       d.s(attrStatus),
		Detail:       d.s(attrDetail),
		Reopens:      int(d.n(attrReopens)),
		ReopenReason: d.s(attrReopenWhy),
		PrevStatus:   d.s(attrPrevStatus),
		PrevDetail:   d.s(attrPrevDetail),
		Generation:   max(int(d.n(attrGeneration)), 1),
		History:      driver.SplitHistory(d.s(attrHistory)),
		Summary:      d.s(attrSummary),
	}
	if _, ok := item[attrReopenedAt]; ok {
		rec.ReopenedAt = d.t(attrReopenedAt)
	}
	if d.err != nil {
		return driver.Record{}, d.err
	}
	if rec.Key == "" || !rec.State.Valid() {
		return driver.Record{}, fmt.Errorf("dynamodb: item %q is not an idempotency record (state %q)", rec.Key, rec.State)
	}
	return rec, nil
}

type decoder struct {
	item map[string]types.AttributeValue
	err  error
}

func (d *decoder) s(name string) string {
	v, ok := d.item[name].(*types.AttributeValueMemberS)
	if !ok {
		return ""
	}
	return v.Value
}

func (d *decoder) n(name string) int64 {
	v, ok := d.item[name].(*types.AttributeValueMemberN)
	if !ok {
		return 0
	}
	n, err := strconv.ParseInt(v.Value, 10, 64)
	if err != nil && d.err == nil {
		d.err = fmt.Errorf("dynamodb: attribute %s = %q: %w", name, v.Value, err)
	}
	return n
}

func (d *decoder) t(name string) time.Time {
	if _, ok := d.item[name]; !ok {
		return time.Time{}
	}
	return time.UnixMilli(d.n(name)).UTC()
}

// ErrWrittenElsewhere: the write was rejected because another Region was
// writing the same item at that moment (ReplicatedWriteConflictException,
// only on a table with multi-Region strong consistency). For a claim it
// means "claimed elsewhere": this claim did not win. errors.Is(err,
// driver.ErrUnavailable) holds as well, and errors.As finds the SDK's
// *types.ReplicatedWriteConflictException.
var ErrWrittenElsewhere = errors.New("dynamodb: the item was being written in another Region")

// unavailable is where the store classifies an error of the DynamoDB
// client that is not a failed condition (conditional and existing handle
// those): every one is driver.ErrUnavailable, nothing was decided.
//
// A ReplicatedWriteConflictException is classified there too, as
// ErrWrittenElsewhere wrapping driver.ErrUnavailable — retryable, not a
// refusal. A refusal in the state machine (idempotency/driver/state.go) is
// a row whose answer is the record that stands: a claim answers "not
// acquired; the record" and the Guard tells busy, duplicate and conflict
// apart by that record, and a held write's refusal, ErrLeaseLost, says the
// claim was taken over or finished. The conflict gives neither: DynamoDB
// rejected this write because another Region's write to the item was in
// flight, and returns no item (the other write may yet fail its own
// condition, or be a heartbeat of this very claim's owner). So for a claim
// nothing of ours was written and nothing was decided — exactly
// ErrUnavailable's "back off and retry" — and the retry reads the record
// the other Region wrote and gets the row that fits it (busy or a
// duplicate), never a second win. For Finish and Extend, ErrLeaseLost
// would give up a lease that may still be ours; retrying is right there
// too. The call is never retried here: the Guard's caller owns the backoff.
func unavailable(op string, err error) error {
	var rwc *types.ReplicatedWriteConflictException
	if errors.As(err, &rwc) {
		return driver.Unavailable(op, fmt.Errorf("%w: %w", ErrWrittenElsewhere, err))
	}
	return driver.Unavailable(op, err)
}
