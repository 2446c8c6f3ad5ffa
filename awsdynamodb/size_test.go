package awsdynamodb_test

import (
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/finedge/idempotent-consumer/awsdynamodb"
)

func TestItemSize(t *testing.T) {
	for _, tc := range []struct {
		name string
		item map[string]types.AttributeValue
		want int
	}{
		{"string: name and value bytes", map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "CHG-1"}}, 2 + 5},
		{"multibyte string counts bytes", map[string]types.AttributeValue{"a": &types.AttributeValueMemberS{Value: "₹"}}, 1 + 3},
		{"number: 13 significant digits", map[string]types.AttributeValue{"t": &types.AttributeValueMemberN{Value: "1764460800123"}}, 1 + 8},
		{"number: zeros are not significant", map[string]types.AttributeValue{"n": &types.AttributeValueMemberN{Value: "1000"}}, 1 + 2},
		{"number: sign and point", map[string]types.AttributeValue{"n": &types.AttributeValueMemberN{Value: "-12.50"}}, 1 + 3},
		{"bool and null", map[string]types.AttributeValue{"b": &types.AttributeValueMemberBOOL{Value: true}, "z": &types.AttributeValueMemberNULL{Value: true}}, 2 + 2},
		{"map: overhead, keys and values", map[string]types.AttributeValue{"m": &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{
			"k": &types.AttributeValueMemberS{Value: "vv"}}}}, 1 + 3 + 1 + 1 + 2},
		{"sets", map[string]types.AttributeValue{
			"s": &types.AttributeValueMemberSS{Value: []string{"ab", "c"}},
			"n": &types.AttributeValueMemberNS{Value: []string{"12", "300"}},
			"b": &types.AttributeValueMemberBS{Value: [][]byte{{1, 2, 3}}}}, (1 + 3) + (1 + 2 + 2) + (1 + 3)},
		{"list", map[string]types.AttributeValue{"l": &types.AttributeValueMemberL{Value: []types.AttributeValue{
			&types.AttributeValueMemberS{Value: "ab"}, &types.AttributeValueMemberN{Value: "7"}}}}, 1 + 3 + (1 + 2) + (1 + 2)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := awsdynamodb.ItemSize(tc.item); got != tc.want {
				t.Fatalf("ItemSize = %d, want %d", got, tc.want)
			}
		})
	}
}

func TestCapacityUnits(t *testing.T) {
	for _, tc := range []struct{ size, write, read int }{
		{0, 1, 1}, {200, 1, 1}, {1024, 1, 1}, {1025, 2, 1}, {4096, 4, 1}, {4097, 5, 2},
	} {
		if w, r := awsdynamodb.WriteUnits(tc.size), awsdynamodb.ReadUnits(tc.size); w != tc.write || r != tc.read {
			t.Errorf("size %d: %d WCU %d RCU, want %d and %d", tc.size, w, r, tc.write, tc.read)
		}
	}
}

func TestIndexWriteUnits(t *testing.T) {
	item := func(ls string) map[string]types.AttributeValue {
		m := map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "CHG-1"}, "state": &types.AttributeValueMemberS{Value: "DONE"}}
		if ls != "" {
			m["listState"] = &types.AttributeValueMemberS{Value: ls}
		}
		return m
	}
	big := item("FAILED")
	big["detail"] = &types.AttributeValueMemberS{Value: string(make([]byte, 1500))}
	for _, tc := range []struct {
		name          string
		before, after map[string]types.AttributeValue
		want          int
	}{
		{"absent before and after (a fresh claim, its DONE)", nil, item(""), 0},
		{"not in the index before or after", item(""), item(""), 0},
		{"enters", item(""), item("FAILED"), 1},
		{"a new item that enters", nil, item("IN_PROGRESS"), 1},
		{"leaves", item("IN_PROGRESS"), item(""), 1},
		{"stays, same partition", item("FAILED"), item("FAILED"), 1},
		{"moves partition: delete and put", item("WAITING"), item("IN_PROGRESS"), 2},
		{"a 2 KB entry", item(""), big, 2},
	} {
		if got := awsdynamodb.IndexWriteUnits(tc.before, tc.after); got != tc.want {
			t.Errorf("%s: %d index write units, want %d", tc.name, got, tc.want)
		}
	}
}
