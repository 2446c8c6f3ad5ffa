package main

import (
	"context"
	"errors"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/finedge/idempotent-consumer/awsdynamodb"
)

// meter is the store's DynamoDB client, counting what each request costs by
// DynamoDB's rules: write units by the item written (a PutItem: the larger
// of the new item and the one a failed condition returned; an UpdateItem:
// the item after it, which the meter asks for with ALL_NEW — it changes no
// capacity — and our updates only add to an item), read units by the item
// read, and the write units of the sparse index (awsdynamodb.IndexWriteUnits:
// from the item before a write — a PutItem's ALL_OLD, or for an UpdateItem
// an uncounted consistent read first — and the item after it). It asks the
// server with ReturnConsumedCapacity=INDEXES and adds up the table's and
// the indexes' units it reports (the emulators report no index units).
type meter struct {
	api *dynamodb.Client
	// noReport leaves ReturnConsumedCapacity as the store sent it (the
	// reported units are then not known).
	noReport bool

	mu  sync.Mutex
	cur counts
}

type counts struct {
	wcu, rcu, reported float64
	// idx is the index's write units by DynamoDB's rules; reportedIdx the
	// index units the server reported.
	idx, reportedIdx float64
	calls            int
}

var _ awsdynamodb.API = (*meter)(nil)

func (m *meter) reset() counts {
	m.mu.Lock()
	defer m.mu.Unlock()
	c := m.cur
	m.cur = counts{}
	return c
}

func (m *meter) add(wcu, rcu, idx int, cc *types.ConsumedCapacity) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.cur.calls++
	m.cur.wcu += float64(wcu)
	m.cur.rcu += float64(rcu)
	m.cur.idx += float64(idx)
	if cc == nil {
		return
	}
	switch {
	case cc.Table != nil && cc.Table.CapacityUnits != nil: // INDEXES: the table's apart
		m.cur.reported += *cc.Table.CapacityUnits
	case cc.CapacityUnits != nil:
		m.cur.reported += *cc.CapacityUnits
	}
	for _, g := range cc.GlobalSecondaryIndexes {
		if g.CapacityUnits != nil {
			m.cur.reportedIdx += *g.CapacityUnits
		}
	}
}

// failedItem is the item a failed conditional write returned.
func failedItem(err error) map[string]types.AttributeValue {
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		return ccf.Item
	}
	return nil
}

func (m *meter) PutItem(ctx context.Context, in *dynamodb.PutItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	c := *in
	if !m.noReport {
		c.ReturnConsumedCapacity = types.ReturnConsumedCapacityIndexes
	}
	if c.ReturnValues == "" || c.ReturnValues == types.ReturnValueNone {
		c.ReturnValues = types.ReturnValueAllOld // the item replaced, for the index's units
	}
	out, err := m.api.PutItem(ctx, &c, opts...)
	size := awsdynamodb.ItemSize(in.Item)
	var ccf *types.ConditionalCheckFailedException
	switch {
	case err == nil:
		m.add(awsdynamodb.WriteUnits(max(size, awsdynamodb.ItemSize(out.Attributes))), 0,
			awsdynamodb.IndexWriteUnits(out.Attributes, in.Item), out.ConsumedCapacity)
		if in.ReturnValues == "" || in.ReturnValues == types.ReturnValueNone {
			out.Attributes = nil // what the store asked for
		}
	case errors.As(err, &ccf):
		// A failed condition is billed too: by the larger of the two items
		// where the server says what was there, else by ours (a server
		// that returns no item, whose caller then reads it: a request more).
		// Nothing is written, so no index.
		m.add(awsdynamodb.WriteUnits(max(size, awsdynamodb.ItemSize(ccf.Item))), 0, 0, nil)
	}
	return out, err
}

func (m *meter) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	c := *in
	if !m.noReport {
		c.ReturnConsumedCapacity = types.ReturnConsumedCapacityIndexes
	}
	if c.ReturnValues == "" || c.ReturnValues == types.ReturnValueNone {
		c.ReturnValues = types.ReturnValueAllNew
	}
	// The item before, for the index's units: read, not counted (the
	// bench's updates are the reclaim phase's, which is not timed, and no
	// two workers write one key).
	before, err := m.api.GetItem(ctx, &dynamodb.GetItemInput{TableName: in.TableName, Key: in.Key, ConsistentRead: aws.Bool(true)})
	if err != nil {
		return nil, err
	}
	out, err := m.api.UpdateItem(ctx, &c, opts...)
	if err == nil {
		m.add(awsdynamodb.WriteUnits(awsdynamodb.ItemSize(out.Attributes)), 0,
			awsdynamodb.IndexWriteUnits(before.Item, out.Attributes), out.ConsumedCapacity)
		if in.ReturnValues == "" || in.ReturnValues == types.ReturnValueNone {
			out.Attributes = nil // what the store asked for
		}
	} else if old := failedItem(err); old != nil {
		m.add(awsdynamodb.WriteUnits(awsdynamodb.ItemSize(old)), 0, 0, nil)
	}
	return out, err
}

func (m *meter) GetItem(ctx context.Context, in *dynamodb.GetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	c := *in
	if !m.noReport {
		c.ReturnConsumedCapacity = types.ReturnConsumedCapacityTotal
	}
	out, err := m.api.GetItem(ctx, &c, opts...)
	if err == nil {
		units := awsdynamodb.ReadUnits(awsdynamodb.ItemSize(out.Item))
		if !aws.ToBool(in.ConsistentRead) {
			units = (units + 1) / 2
		}
		m.add(0, units, 0, out.ConsumedCapacity)
	}
	return out, err
}

func (m *meter) DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error) {
	out, err := m.api.DeleteItem(ctx, in, opts...)
	if err == nil {
		m.add(1, 0, 0, out.ConsumedCapacity)
	}
	return out, err
}
