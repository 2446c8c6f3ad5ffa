package awsdynamodb

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// CreateTable creates the idempotency table for development and tests:
// on-demand billing, partition key pk (S), TTL on AttrTTL. It waits until
// the table is active. A table that already exists is left as it is (its TTL
// is still switched on). Production tables belong in infrastructure code;
// this is the same shape.
func CreateTable(ctx context.Context, c *dynamodb.Client, table string) error {
	_, err := c.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName:            aws.String(table),
		BillingMode:          types.BillingModePayPerRequest,
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String(attrKey), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String(attrKey), KeyType: types.KeyTypeHash}},
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
