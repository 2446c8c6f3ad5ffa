package awsdynamodb

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/finedge/idempotent-consumer/idempotency/driver"
)

// CreateTable creates the idempotency table for development and tests:
// on-demand billing, partition key pk (S), TTL on AttrTTL. It waits until
// the table is active. A table that already exists is left as it is (its TTL
// is still switched on). Production tables belong in infrastructure code;
// this is the same shape.
func CreateTable(ctx context.Context, c *dynamodb.Client, table string) error {
	_, err := c.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName:   aws.String(table),
		BillingMode: types.BillingModePayPerRequest,
		AttributeDefinitions: []types.AttributeDefinition{
			{AttributeName: aws.String(attrKey), AttributeType: types.ScalarAttributeTypeS},
			{AttributeName: aws.String(attrListState), AttributeType: types.ScalarAttributeTypeS},
		},
		KeySchema:              []types.KeySchemaElement{{AttributeName: aws.String(attrKey), KeyType: types.KeyTypeHash}},
		GlobalSecondaryIndexes: []types.GlobalSecondaryIndex{listIndex()},
	})
	var inUse *types.ResourceInUseException
	if err != nil && !errors.As(err, &inUse) {
		return fmt.Errorf("dynamodb: create table %s: %w", table, err)
	}
	w := dynamodb.NewTableExistsWaiter(c, func(o *dynamodb.TableExistsWaiterOptions) {
		o.MinDelay = 100 * time.Millisecond
		o.MaxDelay = time.Second
	})
	if err := w.Wait(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(table)}, 2*time.Minute); err != nil {
		return fmt.Errorf("dynamodb: wait for table %s: %w", table, err)
	}
	if err := addIndex(ctx, c, table); err != nil {
		return err
	}
	_, err = c.UpdateTimeToLive(ctx, &dynamodb.UpdateTimeToLiveInput{
		TableName:               aws.String(table),
		TimeToLiveSpecification: &types.TimeToLiveSpecification{AttributeName: aws.String(AttrTTL), Enabled: aws.Bool(true)},
	})
	if err != nil && !isTTLAlreadyOn(err) {
		return fmt.Errorf("dynamodb: enable TTL on %s: %w", table, err)
	}
	return nil
}

// isTTLAlreadyOn: DynamoDB refuses to enable TTL that is already enabled.
func isTTLAlreadyOn(err error) bool {
	var ve interface{ ErrorMessage() string }
	if errors.As(err, &ve) {
		msg := ve.ErrorMessage()
		return strings.Contains(msg, "already enabled") || strings.Contains(msg, "TimeToLive is already")
	}
	return false
}

// DeleteTable drops the table and waits until it is gone (for a hermetic
// demo or test). A missing table is not an error.
func DeleteTable(ctx context.Context, c *dynamodb.Client, table string) error {
	_, err := c.DeleteTable(ctx, &dynamodb.DeleteTableInput{TableName: aws.String(table)})
	var nf *types.ResourceNotFoundException
	if errors.As(err, &nf) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("dynamodb: delete table %s: %w", table, err)
	}
	w := dynamodb.NewTableNotExistsWaiter(c, func(o *dynamodb.TableNotExistsWaiterOptions) {
		o.MinDelay = 100 * time.Millisecond
		o.MaxDelay = time.Second
	})
	return w.Wait(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(table)}, 2*time.Minute)
}

// Ping checks that the table exists and is reachable (readiness).
func Ping(ctx context.Context, c *dynamodb.Client, table string) error {
	out, err := c.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(table)})
	if err != nil {
		return fmt.Errorf("dynamodb: table %s: %w", table, err)
	}
	if out.Table == nil || out.Table.TableStatus != types.TableStatusActive {
		return fmt.Errorf("dynamodb: table %s is not active", table)
	}
	return nil
}

// listIndex is IndexName's definition (deploy/aws/stack.json has the same).
func listIndex() types.GlobalSecondaryIndex {
	return types.GlobalSecondaryIndex{
		IndexName: aws.String(IndexName),
		KeySchema: []types.KeySchemaElement{
			{AttributeName: aws.String(attrListState), KeyType: types.KeyTypeHash},
			{AttributeName: aws.String(attrKey), KeyType: types.KeyTypeRange},
		},
		Projection: &types.Projection{ProjectionType: types.ProjectionTypeAll},
	}
}

// addIndex adds IndexName to a table made before it, and waits until it is
// active (DynamoDB fills it from the items that have listState: records
// written since this version; backfill sets it on the older ones, once:
// fill).
func addIndex(ctx context.Context, c *dynamodb.Client, table string) error {
	out, err := c.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(table)})
	if err != nil {
		return fmt.Errorf("dynamodb: describe table %s: %w", table, err)
	}
	if indexStatus(out.Table) == "" {
		ix := listIndex()
		_, err := c.UpdateTable(ctx, &dynamodb.UpdateTableInput{
			TableName:            aws.String(table),
			AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String(attrListState), AttributeType: types.ScalarAttributeTypeS}},
			GlobalSecondaryIndexUpdates: []types.GlobalSecondaryIndexUpdate{{Create: &types.CreateGlobalSecondaryIndexAction{
				IndexName: ix.IndexName, KeySchema: ix.KeySchema, Projection: ix.Projection}}},
		})
		if err != nil {
			return fmt.Errorf("dynamodb: add index %s to table %s: %w", IndexName, table, err)
		}
	}
	deadline := time.Now().Add(30 * time.Minute) // a large table's index fills for a while
	for {
		out, err := c.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(table)})
		if err != nil {
			return fmt.Errorf("dynamodb: describe table %s: %w", table, err)
		}
		if indexStatus(out.Table) == types.IndexStatusActive {
			return fill(ctx, c, table)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("dynamodb: index %s of table %s is not active after 30 minutes (it fills from the table): run setup again later", IndexName, table)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// filledKey is the item that says backfill ran to its end on the table:
// an internal key with no state, so that no listing, count or Scan of
// records sees it. Not "the index was added by this run": a setup stopped
// after its UpdateTable (the index still filling at the deadline, whose
// error says to run setup again, or a Ctrl-C) found the index on the next
// run and never filled, and the older FAILED and WAITING records stayed
// out of every listing.
const filledKey = driver.InternalKeyPrefix + "awsdynamodb/listState-filled"

// fill runs backfill unless a run of it ended before (filledKey), and
// then marks the table. A table that had the index from the start is read
// once, by the first setup that finds no mark.
func fill(ctx context.Context, c *dynamodb.Client, table string) error {
	key := map[string]types.AttributeValue{attrKey: str(filledKey)}
	out, err := c.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(table), Key: key, ConsistentRead: aws.Bool(true)})
	if err != nil {
		return fmt.Errorf("dynamodb: read %s of table %s: %w", filledKey, table, err)
	}
	if len(out.Item) > 0 {
		return nil
	}
	if err := backfill(ctx, c, table); err != nil {
		return err
	}
	_, err = c.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(table), Item: map[string]types.AttributeValue{
		attrKey: str(filledKey), "filledAt": str(time.Now().UTC().Format(time.RFC3339))}})
	if err != nil {
		return fmt.Errorf("dynamodb: mark table %s filled: %w", table, err)
	}
	return nil
}

// indexStatus is IndexName's status on t ("" absent).
func indexStatus(t *types.TableDescription) types.IndexStatus {
	if t == nil {
		return ""
	}
	for _, g := range t.GlobalSecondaryIndexes {
		if aws.ToString(g.IndexName) == IndexName {
			return cmp.Or(g.IndexStatus, types.IndexStatusActive)
		}
	}
	return ""
}

// backfill sets listState on the records written before the index (by an
// older version), in the states it holds: one Scan of the table, once,
// when setup adds the index. Each write is conditional on the record as
// scanned (state, token, status, no listState yet): a record written since
// has its listState from that write.
func backfill(ctx context.Context, c *dynamodb.Client, table string) error {
	p := dynamodb.NewScanPaginator(c, &dynamodb.ScanInput{
		TableName:                aws.String(table),
		FilterExpression:         aws.String(`attribute_not_exists(#ls) AND (#state IN (:failed, :waiting) OR (#state = :done AND #status = :listed))`),
		ExpressionAttributeNames: pick("#ls", "#state", "#status"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":failed": str(string(driver.StateFailed)),
			":waiting": str(string(driver.StateWaiting)), ":done": str(string(driver.StateDone)), ":listed": str(ListedResult)},
	})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return fmt.Errorf("dynamodb: fill index %s of table %s: %w", IndexName, table, err)
		}
		for _, item := range page.Items {
			rec, err := decode(item)
			if err != nil {
				continue // not a record of ours
			}
			cond := `#state = :state AND #token = :token AND attribute_not_exists(#ls)`
			values := map[string]types.AttributeValue{":state": str(string(rec.State)), ":token": str(rec.Token), ":ls": str(listStateOf(rec.State, rec.Status))}
			names := pick("#state", "#token", "#ls")
			if rec.State == driver.StateDone {
				cond += ` AND #status = :status`
				values[":status"] = str(rec.Status)
				names["#status"] = attrStatus
			}
			_, err = c.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: aws.String(table), Key: map[string]types.AttributeValue{attrKey: str(rec.Key)},
				ConditionExpression: aws.String(cond), UpdateExpression: aws.String(`SET #ls = :ls`),
				ExpressionAttributeNames: names, ExpressionAttributeValues: values})
			var ccf *types.ConditionalCheckFailedException
			if err != nil && !errors.As(err, &ccf) {
				return fmt.Errorf("dynamodb: fill index %s of table %s: %w", IndexName, table, err)
			}
		}
	}
	return nil
}
