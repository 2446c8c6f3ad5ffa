package strictjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
)

var charge = &Object{
	Fields: map[string]bool{"chargeId": true, "accountId": true, "amount": true},
	Nested: map[string]*Object{"amount": {Fields: map[string]bool{"minor": true, "currency": true}}},
}

func TestCheckKeys(t *testing.T) {
	tests := []struct {
		name string
		body string
		want *KeyError // nil: accepted
	}{
		{"exact names", `{"chargeId":"C-1","accountId":"0012","amount":{"minor":1,"currency":"INR"}}`, nil},
		{"empty object", `{}`, nil},
		{"whitespace everywhere", " {\n\t\"chargeId\" :\r\"C-1\" , \"amount\" : { \"minor\" : -1.5e+3 } } ", nil},
		{"other spelling at the top", `{"chargeId":"C-1","ACCOUNTID":"0099"}`, &KeyError{Path: "ACCOUNTID"}},
		{"other spelling nested", `{"amount":{"Minor":1}}`, &KeyError{Path: "amount.Minor"}},
		{"unknown name", `{"chargeId":"C-1","debitTwice":true}`, &KeyError{Path: "debitTwice"}},
		{"repeated at the top", `{"amount":{"minor":1},"chargeId":"a","chargeId":"b"}`, &KeyError{Path: "chargeId", Repeated: true}},
		{"repeated nested", `{"amount":{"minor":1,"minor":2}}`, &KeyError{Path: "amount.minor", Repeated: true}},
		{"escape spells a known name", `{"charge\u0049d":"C-1"}`, nil},
		{"escape repeats a name", `{"chargeId":"a","charge\u0049d":"b"}`, &KeyError{Path: "chargeId", Repeated: true}},
		{"repeat below the schema (path from the last schema object)", `{"chargeId":[{"x":1,"y":{"z":1,"z":2}}]}`, &KeyError{Path: "z", Repeated: true}},
		{"unknown below the schema is not checked", `{"chargeId":{"anything":1}}`, nil},
		{"invalid UTF-8 keys read alike", "{\"chargeId\":{\"\xff\":1,\"\xfe\":2}}", &KeyError{Path: "\ufffd", Repeated: true}},
		{"second value of a stream is checked", `{"chargeId":"a"} {"CHARGEID":"b"}`, &KeyError{Path: "CHARGEID"}},
		{"first error wins", `{"x":1,"chargeId":1,"chargeId":2}`, &KeyError{Path: "x"}},
		{"syntax error is the decoder's", `{"chargeId":"a",}`, nil},
		{"truncated", `{"chargeId":"a","amount":{"minor":`, nil},
		{"bad number", `{"chargeId":01}`, nil},
		{"key error before a syntax error", `{"X":1,,}`, &KeyError{Path: "X"}},
		{"top-level array", `[{"a":1,"a":2}]`, &KeyError{Path: "a", Repeated: true}},
		{"literals", `{"chargeId":true,"accountId":null,"amount":false}`, nil},
		{"control character in a string", "{\"chargeId\":\"a\x01\"}", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckKeys([]byte(tt.body), charge)
			if tt.want == nil {
				if err != nil {
					t.Fatalf("CheckKeys(%s) = %v, want accepted", tt.body, err)
				}
				return
			}
			var ke *KeyError
			if !errors.As(err, &ke) {
				t.Fatalf("CheckKeys(%s) = %v, want %+v", tt.body, err, tt.want)
			}
			if *ke != *tt.want {
				t.Fatalf("CheckKeys(%s) = %+v, want %+v", tt.body, *ke, *tt.want)
			}
		})
	}
}

func TestKeyErrorSaysWhatToFix(t *testing.T) {
	for _, tt := range []struct {
		err  KeyError
		want string
	}{
		{KeyError{Path: "amount.Minor"}, "unknown field amount.Minor (field names are case-sensitive)"},
		{KeyError{Path: "chargeId", Repeated: true}, "field chargeId appears more than once"},
	} {
		if got := tt.err.Error(); !strings.Contains(got, tt.want) {
			t.Errorf("%+v.Error() = %q, want it to say %q", tt.err, got, tt.want)
		}
	}
}

// A nesting deeper than encoding/json decodes is left to the decoder, not
// walked into a stack overflow.
func TestCheckKeysStopsAtTheDecodersDepth(t *testing.T) {
	deep := strings.Repeat("[", 2*maxDepth) + strings.Repeat("]", 2*maxDepth)
	if err := CheckKeys([]byte(deep), charge); err != nil {
		t.Fatalf("CheckKeys(deep) = %v", err)
	}
}

// referenceCheck is an independent reader built on encoding/json's
// tokenizer: it reads every value of a stream and reports the first name
// (in document order) that the schema refuses, or that repeats within its
// object. ok is false for input that is not a valid stream of JSON values.
func referenceCheck(body []byte, top *Object) (first *KeyError, ok bool) {
	dec := json.NewDecoder(bytes.NewReader(body))
	var walk func(schema *Object, path string) bool
	walk = func(schema *Object, path string) bool {
		tok, err := dec.Token()
		if err != nil {
			return false
		}
		switch tok {
		case json.Delim('['):
			for dec.More() {
				if !walk(nil, "") {
					return false
				}
			}
			_, err := dec.Token()
			return err == nil
		case json.Delim('{'):
			seen := map[string]bool{}
			for dec.More() {
				tok, err := dec.Token()
				if err != nil {
					return false
				}
				key := tok.(string)
				name := key
				if path != "" {
					name = path + "." + key
				}
				if first == nil {
					if schema != nil && !schema.Fields[key] {
						first = &KeyError{Path: name}
					} else if seen[key] {
						first = &KeyError{Path: name, Repeated: true}
					}
				}
				seen[key] = true
				var child *Object
				childPath := ""
				if schema != nil && schema.Nested[key] != nil {
					child, childPath = schema.Nested[key], name
				}
				if !walk(child, childPath) {
					return false
				}
			}
			_, err := dec.Token()
			return err == nil
		}
		return true
	}
	for {
		if !dec.More() {
			_, err := dec.Token()
			return first, errors.Is(err, io.EOF)
		}
		if !walk(top, "") {
			return first, false
		}
	}
}

// FuzzCheckKeys: on every valid stream of JSON values, CheckKeys and the
// tokenizer-based reference agree on the first refused name; on any other
// input CheckKeys returns nil or a *KeyError and never panics.
func FuzzCheckKeys(f *testing.F) {
	for _, s := range []string{
		`{"chargeId":"C-1","accountId":"0012","amount":{"minor":2500,"currency":"INR"}}`,
		`{"chargeId":"C-1","AMOUNT":{"minor":999999}}`,
		`{"amount":{"minor":1,"minor":2}}`,
		`{"charge\u0049d":"a","chargeId":"b"}`,
		"{\"chargeId\":{\"\xff\":1,\"\xfe\":2}}",
		`{"chargeId":"a"} {"chargeId":"b","chargeId":"c"}`,
		`[{"amount":{"MINOR":1}},null,false,"s\"]",-1E9,0.5e-3]`,
		`{"chargeId":[{"x":{"y":1,"y":2}}]}`,
		`{"chargeId":"a",}`,
		`{"x":01}`,
		`  `,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		err := CheckKeys(body, charge)
		var got *KeyError
		if err != nil && !errors.As(err, &got) {
			t.Fatalf("CheckKeys(%q) = %v, not a *KeyError", body, err)
		}
		want, valid := referenceCheck(body, charge)
		if !valid {
			return
		}
		switch {
		case got == nil && want != nil:
			t.Fatalf("CheckKeys(%q) accepted; a case-sensitive reader refuses %+v", body, *want)
		case got != nil && want == nil:
			t.Fatalf("CheckKeys(%q) refused %+v; a case-sensitive reader accepts", body, *got)
		case got != nil && *got != *want:
			t.Fatalf("CheckKeys(%q) refused %+v; a case-sensitive reader refuses %+v first", body, *got, *want)
		}
	})
}
