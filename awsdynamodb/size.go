package awsdynamodb

import (
	"strings"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// ItemSize is an item's size as DynamoDB bills it: each attribute's name
// plus its value (strings and binaries by their bytes; numbers by
// significant digits, two per byte plus one; booleans and nulls one byte;
// lists and maps three bytes plus one per element plus their contents).
// Write capacity is this in 1 KB units (at least one; the larger of the
// item before and after a write), strongly consistent reads in 4 KB units.
func ItemSize(item map[string]types.AttributeValue) int {
	n := 0
	for name, v := range item {
		n += len(name) + valueSize(v)
	}
	return n
}

func valueSize(v types.AttributeValue) int {
	switch v := v.(type) {
	case *types.AttributeValueMemberS:
		return len(v.Value)
	case *types.AttributeValueMemberN:
		return numberSize(v.Value)
	case *types.AttributeValueMemberB:
		return len(v.Value)
	case *types.AttributeValueMemberBOOL, *types.AttributeValueMemberNULL:
		return 1
	case *types.AttributeValueMemberSS:
		return sum(v.Value, func(s string) int { return len(s) })
	case *types.AttributeValueMemberNS:
		return sum(v.Value, numberSize)
	case *types.AttributeValueMemberBS:
		return sum(v.Value, func(b []byte) int { return len(b) })
	case *types.AttributeValueMemberL:
		n := 3
		for _, e := range v.Value {
			n += 1 + valueSize(e)
		}
		return n
	case *types.AttributeValueMemberM:
		n := 3
		for k, e := range v.Value {
			n += 1 + len(k) + valueSize(e)
		}
		return n
	}
	return 0
}

func sum[T any](vs []T, size func(T) int) int {
	n := 0
	for _, v := range vs {
		n += size(v)
	}
	return n
}

// numberSize: significant digits (leading and trailing zeros dropped), two
// per byte rounded up, plus one byte.
func numberSize(s string) int {
	s = strings.TrimLeft(s, "+-")
	if i := strings.IndexAny(s, "eE"); i >= 0 {
		s = s[:i]
	}
	s = strings.Replace(s, ".", "", 1)
	s = strings.Trim(s, "0")
	return (len(s)+1)/2 + 1
}

// WriteUnits is the write capacity a write of an item of size bytes costs
// (the larger of the item before and after it).
func WriteUnits(size int) int { return max(1, (size+1023)/1024) }

// ReadUnits is the read capacity a strongly consistent read of an item of
// size bytes costs (a missing item still costs one).
func ReadUnits(size int) int { return max(1, (size+4095)/4096) }

// IndexWriteUnits is the write capacity a write of the table costs in
// IndexName, given the item before and after it (nil: none), by
// DynamoDB's rules for a global secondary index: an item in the index
// neither before nor after costs nothing there (a REMOVE of an attribute
// it does not have included); one that enters it, one put; one that
// leaves it, one delete; one that stays with the same listState, one
// update of its projection (every attribute is projected); one whose
// listState changes, a delete and a put. Each is WriteUnits of the index
// entry (the item: every attribute is projected). The emulators report no
// index units (neither moto nor dynalite bills an index), so the tests
// count them from the items with this.
func IndexWriteUnits(before, after map[string]types.AttributeValue) int {
	in := func(item map[string]types.AttributeValue) (string, bool) {
		v, ok := item[attrListState].(*types.AttributeValueMemberS)
		if !ok {
			return "", false
		}
		return v.Value, true
	}
	was, inBefore := in(before)
	is, inAfter := in(after)
	switch {
	case inBefore && inAfter && was == is:
		return WriteUnits(max(ItemSize(before), ItemSize(after)))
	case inBefore && inAfter:
		return WriteUnits(ItemSize(before)) + WriteUnits(ItemSize(after))
	case inBefore:
		return WriteUnits(ItemSize(before))
	case inAfter:
		return WriteUnits(ItemSize(after))
	}
	return 0
}
