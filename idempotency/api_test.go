package idempotency_test

import (
	"go/ast"
	"go/doc"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"

	"github.com/finedge/idempotent-consumer/idempotency"
)

// maxEntries bounds what `go doc -short ./idempotency` lists: the user API
// (Guard and Do, the options, the results and outcomes, the
// Fingerprinter, the errors a user checks). What only stores, queues or
// the runtime need lives in package idempotency/driver. Typed results add
// DoTyped, TypedResult and Codec only (their options are DoOptions'). An
// issue set it at 25; only an issue raises it.
const maxEntries = 25

// apiEntries are the package's top-level entries as `go doc -short` lists
// them, one line each: every const or var group with an exported name,
// every exported func and type, and under each type the funcs (its
// constructors) and the const and var groups of its type.
func apiEntries(t *testing.T) []string {
	t.Helper()
	fset := token.NewFileSet()
	names, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	var files []*ast.File
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	d, err := doc.NewFromFiles(fset, files, "github.com/finedge/idempotent-consumer/idempotency")
	if err != nil {
		t.Fatal(err)
	}
	var entries []string
	values := func(kind string, vs []*doc.Value) {
		for _, v := range vs {
			entries = append(entries, kind+" "+strings.Join(v.Names, ", "))
		}
	}
	funcs := func(fs []*doc.Func) {
		for _, f := range fs {
			entries = append(entries, "func "+f.Name)
		}
	}
	values("const", d.Consts)
	values("var", d.Vars)
	funcs(d.Funcs)
	for _, ty := range d.Types {
		if !ast.IsExported(ty.Name) {
			continue
		}
		entries = append(entries, "type "+ty.Name)
		values("const", ty.Consts)
		values("var", ty.Vars)
		funcs(ty.Funcs)
	}
	return entries
}

// The package shows its users their API and little else: `go doc
// ./idempotency` lists at most maxEntries entries.
func TestTheUserAPIIsSmall(t *testing.T) {
	entries := apiEntries(t)
	if len(entries) > maxEntries {
		t.Errorf("go doc ./idempotency lists %d entries, want at most %d (what only a store, a queue or the runtime needs belongs in idempotency/driver):\n\t%s",
			len(entries), maxEntries, strings.Join(entries, "\n\t"))
	}
}

// The zero Outcome (a call refused before any claim) prints as "none",
// not "outcome(0)", in a newcomer's log line; an unknown one keeps its
// number.
func TestTheZeroOutcomeIsNone(t *testing.T) {
	if got := idempotency.Outcome(0).String(); got != "none" {
		t.Errorf("Outcome(0) = %q, want none", got)
	}
	if got := idempotency.Outcome(99).String(); got != "outcome(99)" {
		t.Errorf("Outcome(99) = %q", got)
	}
}
