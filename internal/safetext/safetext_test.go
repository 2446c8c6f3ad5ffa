package safetext_test

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/finedge/idempotent-consumer/internal/safetext"
)

func TestText(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"CHG-1 plain, ümlaut, हिन्दी", "CHG-1 plain, ümlaut, हिन्दी"},
		{"a\u202eb\u2066c", `a\u202eb\u2066c`},
		{"\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f\u061c", `\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f\u061c`},
		{"zero\u200bwidth\u2060joiner\ufeffbom\u00adsoft", `zero\u200bwidth\u2060joiner\ufeffbom\u00adsoft`},
		{"line\u2028para\u2029", `line\u2028para\u2029`},
		{"esc\x1b[2J\r\n\t\x7f\u0085", `esc\u001b[2J\u000d\u000a\u0009\u007f\u0085`},
		{"tag\U000E0041", `tag\U000e0041`},
		{"bad\xff\xfe utf8", `bad\xff\xfe utf8`},
		{"replacement \ufffd", `replacement \ufffd`},
		{`back\slash`, `back\slash`},
	} {
		got := safetext.Text(tt.in)
		if got != tt.want {
			t.Errorf("Text(%q) = %q, want %q", tt.in, got, tt.want)
		}
		if strings.IndexFunc(got, safetext.Unsafe) >= 0 || !utf8.ValidString(got) {
			t.Errorf("Text(%q) = %q still holds an unsafe rune", tt.in, got)
		}
	}
}

func TestPage(t *testing.T) {
	in := "<p class=\"x\">\n\t<a href=\"/charge?id=A%e2%80%aeB\">A\u202eB</a> <input type=\"hidden\" name=\"id\" value=\"A\u202eB\">x\u2066y\x1bz</p>\r\n"
	want := "<p class=\"x\">\n\t<a href=\"/charge?id=A%e2%80%aeB\">A\\u202eB</a> <input type=\"hidden\" name=\"id\" value=\"A\u202eB\">x\\u2066y\\u001bz</p>\r\n"
	if got := string(safetext.Page([]byte(in))); got != want {
		t.Fatalf("Page:\n got %q\nwant %q", got, want)
	}
	plain := []byte("<p>nothing to escape, ümlaut</p>\n")
	if got := safetext.Page(plain); string(got) != string(plain) {
		t.Fatalf("Page changed %q into %q", plain, got)
	}
}

func FuzzText(f *testing.F) {
	f.Add("a\u202eb\xff")
	f.Fuzz(func(t *testing.T, s string) {
		got := safetext.Text(s)
		if strings.IndexFunc(got, safetext.Unsafe) >= 0 || !utf8.ValidString(got) {
			t.Fatalf("Text(%q) = %q", s, got)
		}
		if strings.IndexFunc(s, safetext.Unsafe) < 0 && utf8.ValidString(s) && got != s {
			t.Fatalf("Text changed safe %q into %q", s, got)
		}
	})
}
