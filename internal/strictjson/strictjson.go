// Package strictjson checks the field names of JSON objects the way a
// case-sensitive reader sees them, before encoding/json (which matches names
// case-insensitively and keeps the last of a repeated name) decodes them:
// every name spelt exactly as the schema has it, none repeated. A body that
// passes is read the same by every reader.
//
// CheckKeys walks the body's structure by hand, allocating only for an
// object's key set (json.Decoder.Token cost about half of all allocations
// per message). At the first malformed byte it stops and says nothing:
// syntax errors are the real decoder's to report. FuzzCheckKeys holds it to
// a reader built on encoding/json's tokenizer.
//
// The package imports only the standard library.
package strictjson

import (
	"bytes"
	"encoding/json"
	"unicode/utf8"
)

// Object is the schema of a JSON object: the field names it may have,
// spelt exactly, and the schema of the objects nested under some of them.
// Objects the schema does not describe (deeper, in arrays, or under a
// field without a Nested entry) are checked for repeated names only.
type Object struct {
	Fields map[string]bool
	Nested map[string]*Object
}

// KeyError is a field name the schema refuses.
type KeyError struct {
	// Path is the field, dotted from the top object ("amount.minor");
	// in an object the schema does not describe, the name alone.
	Path string
	// Repeated: the name appears twice in one object; otherwise it is not
	// one of the schema's names (in any other spelling, or not at all).
	Repeated bool
}

func (e *KeyError) Error() string {
	if e.Repeated {
		return "strictjson: field " + e.Path + " appears more than once"
	}
	return "strictjson: unknown field " + e.Path + " (field names are case-sensitive)"
}

// CheckKeys checks every top-level value of body (each is held to top) and
// returns the first *KeyError, or nil — also for a body that is not valid
// JSON, whose syntax error the decoder reports.
func CheckKeys(body []byte, top *Object) error {
	w := walker{b: body}
	for {
		w.space()
		if w.i >= len(w.b) {
			return nil
		}
		// Each top-level value of a stream is checked the same way (a
		// decoder that wants one value refuses the second itself).
		ok, err := w.value(0, top, "")
		if err != nil || !ok {
			return err
		}
	}
}

// walker is CheckKeys' scanner over one body.
type walker struct {
	b []byte
	i int
}

// maxDepth stops the walk where encoding/json stops decoding.
const maxDepth = 10000

func (w *walker) space() {
	for w.i < len(w.b) {
		switch w.b[w.i] {
		case ' ', '\t', '\n', '\r':
			w.i++
		default:
			return
		}
	}
}

// value walks one JSON value; schema and path apply when it is an object
// (schema nil: names not checked, only repeats). ok is false at a syntax
// error.
func (w *walker) value(depth int, schema *Object, path string) (ok bool, err error) {
	if depth > maxDepth {
		return false, nil
	}
	w.space()
	if w.i >= len(w.b) {
		return false, nil
	}
	switch c := w.b[w.i]; {
	case c == '{':
		return w.object(depth, schema, path)
	case c == '[':
		w.i++
		w.space()
		if w.i < len(w.b) && w.b[w.i] == ']' {
			w.i++
			return true, nil
		}
		for {
			if ok, err := w.value(depth+1, nil, ""); err != nil || !ok {
				return false, err
			}
			if more, ok := w.after(']'); !more {
				return ok, nil
			}
		}
	case c == '"':
		_, ok := w.str()
		return ok, nil
	case c == '-' || (c >= '0' && c <= '9'):
		return w.number(), nil
	default:
		for _, lit := range []string{"true", "false", "null"} {
			if bytes.HasPrefix(w.b[w.i:], []byte(lit)) {
				w.i += len(lit)
				return true, nil
			}
		}
		return false, nil
	}
}

func (w *walker) object(depth int, schema *Object, path string) (bool, error) {
	w.i++ // '{'
	w.space()
	if w.i < len(w.b) && w.b[w.i] == '}' {
		w.i++
		return true, nil
	}
	var seen []string // objects here have a handful of keys: a slice beats a map
	for {
		w.space()
		if w.i >= len(w.b) || w.b[w.i] != '"' {
			return false, nil
		}
		raw, ok := w.str()
		if !ok {
			return false, nil
		}
		key, ok := keyName(raw)
		if !ok {
			return false, nil
		}
		name := key
		if path != "" {
			name = path + "." + key
		}
		if schema != nil && !schema.Fields[key] {
			return false, &KeyError{Path: name}
		}
		for _, k := range seen {
			if k == key {
				return false, &KeyError{Path: name, Repeated: true}
			}
		}
		seen = append(seen, key)
		w.space()
		if w.i >= len(w.b) || w.b[w.i] != ':' {
			return false, nil
		}
		w.i++
		var child *Object
		childPath := ""
		if schema != nil && schema.Nested[key] != nil {
			child, childPath = schema.Nested[key], name
		}
		if ok, err := w.value(depth+1, child, childPath); err != nil || !ok {
			return false, err
		}
		if more, ok := w.after('}'); !more {
			return ok, nil
		}
	}
}

// after reads what follows an element of an array or object: a comma
// (more: another element) or the closing byte (ok: the container ended);
// anything else is a syntax error (neither).
func (w *walker) after(closing byte) (more, ok bool) {
	w.space()
	if w.i >= len(w.b) {
		return false, false
	}
	switch w.b[w.i] {
	case ',':
		w.i++
		return true, false
	case closing:
		w.i++
		return false, true
	}
	return false, false
}

// str walks a string and returns it with its quotes, undecoded.
func (w *walker) str() ([]byte, bool) {
	start := w.i
	w.i++ // opening quote
	for w.i < len(w.b) {
		switch c := w.b[w.i]; {
		case c == '"':
			w.i++
			return w.b[start:w.i], true
		case c == '\\':
			w.i += 2
		case c < 0x20:
			return nil, false
		default:
			w.i++
		}
	}
	return nil, false
}

// keyName decodes a key as encoding/json does: escapes resolved, invalid
// UTF-8 replaced; the common plain ASCII key costs one small string.
func keyName(quoted []byte) (string, bool) {
	inner := quoted[1 : len(quoted)-1]
	plain := true
	for _, c := range inner {
		if c == '\\' || c >= utf8.RuneSelf {
			plain = false
			break
		}
	}
	if plain {
		return string(inner), true
	}
	var k string
	if err := json.Unmarshal(quoted, &k); err != nil {
		return "", false
	}
	return k, true
}

// number walks a JSON number: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?
func (w *walker) number() bool {
	digits := func() int {
		n := 0
		for w.i < len(w.b) && w.b[w.i] >= '0' && w.b[w.i] <= '9' {
			w.i++
			n++
		}
		return n
	}
	if w.b[w.i] == '-' {
		w.i++
	}
	if w.i < len(w.b) && w.b[w.i] == '0' {
		w.i++
	} else if digits() == 0 {
		return false
	}
	if w.i < len(w.b) && w.b[w.i] == '.' {
		w.i++
		if digits() == 0 {
			return false
		}
	}
	if w.i < len(w.b) && (w.b[w.i] == 'e' || w.b[w.i] == 'E') {
		w.i++
		if w.i < len(w.b) && (w.b[w.i] == '+' || w.b[w.i] == '-') {
			w.i++
		}
		if digits() == 0 {
			return false
		}
	}
	return true
}
