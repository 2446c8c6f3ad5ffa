package console_test

import (
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	auditpkg "github.com/finedge/idempotent-consumer/app/audit"
	"github.com/finedge/idempotent-consumer/internal/safetext"
)

// textOf is what a page shows: its HTML without the tags.
func textOf(page string) string { return regexp.MustCompile(`<[^>]*>`).ReplaceAllString(page, " ") }

// Issue 51: html/template escapes markup but passes bidirectional
// overrides and isolates (U+202E, U+2066) through, and they reorder what
// the operator reads. Every page shows them escaped: here the audit page
// (a reason, an operator, a charge id, a detail from the trail) and a
// charge's page (the bank's decline text and the charge id).
func TestPagesEscapeBidirectionalControls(t *testing.T) {
	w := newWorld(t)
	trail, err := auditpkg.Open(w.audit)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := trail.Append(auditpkg.Entry{Operator: "olga\u202e", Via: "cli", Action: "reopen", ChargeID: "CHG-\u20661",
		Reason: "INC-9 \u202e1-GHC\u2066 approved", Detail: "zero\u200bwidth", Result: "reopened"}); err != nil {
		t.Fatal(err)
	}
	trail.Close()
	bidi := w.failedWith(t, "CHG-BIDI\u20661", "debit declined: \u202eNEZORF_TNUOCCA")
	srv := w.console(t, proxyAuth())

	_, page := as(t, "olga", "GET", srv.URL+"/audit", nil)
	for _, want := range []string{`olga\u202e`, `CHG-\u20661`, `INC-9 \u202e1-GHC\u2066 approved`, `zero\u200bwidth`} {
		if !strings.Contains(page, want) {
			t.Errorf("the audit page does not show %s escaped:\n%s", want, page)
		}
	}
	if strings.IndexFunc(textOf(page), unsafeInText) >= 0 {
		t.Errorf("the audit page shows a bidirectional or invisible character raw:\n%q", textOf(page))
	}

	_, page = as(t, "olga", "GET", srv.URL+"/charge?id="+url.QueryEscape(bidi), nil)
	for _, want := range []string{`CHG-BIDI\u20661`, `debit declined: \u202eNEZORF_TNUOCCA`} {
		if !strings.Contains(page, want) {
			t.Errorf("the charge page does not show %s escaped:\n%s", want, page)
		}
	}
	if strings.IndexFunc(textOf(page), unsafeInText) >= 0 {
		t.Errorf("the charge page shows a bidirectional or invisible character raw:\n%q", textOf(page))
	}
}

func unsafeInText(r rune) bool { return r != '\t' && r != '\n' && r != '\r' && safetext.Unsafe(r) }

// The templates themselves hold no character the page escaping would
// rewrite: what it escapes came from outside.
func TestTemplatesHoldNoUnsafeCharacters(t *testing.T) {
	files, err := filepath.Glob("templates/*.html")
	if err != nil || len(files) == 0 {
		t.Fatalf("templates: %v %v", files, err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if i := strings.IndexFunc(string(b), unsafeInText); i >= 0 {
			t.Errorf("%s holds %U at byte %d", f, []rune(string(b[i:]))[0], i)
		}
	}
}
