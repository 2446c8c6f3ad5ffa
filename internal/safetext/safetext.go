// Package safetext is the one rule for showing text that came from
// outside (a bank's reference, a charge id, an operator's reason or name,
// a record's detail) to a person: on a terminal (the command line's
// tables, the reconciliation report) or on a page of the console. A
// character that is not shown as itself — a control character (an escape
// sequence, a carriage return or a newline forging a line), a
// bidirectional override or isolate (which reorders what follows it, so
// that "reopen CHG-1 \u202e9-GHC" reads as another id), a zero-width or
// other invisible format character (two ids that look the same), a line
// or paragraph separator — is shown as an escape instead: \u202e (\U for
// one beyond U+FFFF), and a byte of invalid UTF-8 as \xNN. Everything else
// is kept as it is (a backslash too: the escapes are for reading, not for
// parsing back). It imports only the standard library.
package safetext

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Unsafe reports whether r is not shown as itself: a control character
// (C0, DEL, C1), a format character (Unicode category Cf: the
// bidirectional controls U+202A–U+202E, U+2066–U+2069, U+200E, U+200F,
// U+061C, the zero-width characters U+200B–U+200D, U+2060, U+FEFF, the
// soft hyphen, tag characters…), U+2028 and U+2029 (line and paragraph
// separators), and U+FFFD (what invalid UTF-8 decodes to).
func Unsafe(r rune) bool {
	return unicode.IsControl(r) || unicode.Is(unicode.Cf, r) || r == '\u2028' || r == '\u2029' || r == utf8.RuneError
}

// Text is s with every Unsafe rune escaped (\u202e) and every byte of
// invalid UTF-8 as \xNN: one line, every character visible. It returns s
// itself when there is nothing to escape.
func Text(s string) string {
	return escape(s, Unsafe)
}

// Page escapes, in an HTML page rendered by html/template, the Unsafe
// runes of its text between tags, where text from outside shows (\t, \n
// and \r are kept: they are the page's own layout, and HTML shows them as
// spaces). What is inside a tag is kept as it is: an attribute value is
// either escaped by html/template for its context (a URL's bidi
// characters are percent-encoded) or a value the page sends back (a
// hidden form field, a data- attribute) that must stay byte for byte the
// same. html/template writes '<' and '>' of a value as &lt; and &gt;, so a
// '<' in the output always opens a tag of the template.
func Page(html []byte) []byte {
	if !needs(html) {
		return html
	}
	inText := func(r rune) bool { return r != '\t' && r != '\n' && r != '\r' && Unsafe(r) }
	var b strings.Builder
	b.Grow(len(html) + 64)
	s := string(html)
	for len(s) > 0 {
		i := strings.IndexByte(s, '<')
		if i < 0 {
			i = len(s)
		}
		b.WriteString(escape(s[:i], inText))
		s = s[i:]
		if s == "" {
			break
		}
		j := strings.IndexByte(s, '>')
		if j < 0 {
			j = len(s) - 1
		}
		b.WriteString(s[:j+1])
		s = s[j+1:]
	}
	return []byte(b.String())
}

// needs reports whether html has any byte that may start an Unsafe rune
// (other than \t, \n, \r): a quick pass for the usual page with none.
func needs(html []byte) bool {
	for _, c := range html {
		if c < 0x20 && c != '\t' && c != '\n' && c != '\r' || c == 0x7f || c >= 0x80 {
			return true
		}
	}
	return false
}

func escape(s string, unsafe func(rune) bool) string {
	clean := true
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if unsafe(r) {
			clean = false
			break
		}
		i += n
	}
	if clean {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 16)
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case !unsafe(r):
			b.WriteString(s[i : i+n])
		case r > 0xffff:
			fmt.Fprintf(&b, `\U%08x`, r)
		default:
			fmt.Fprintf(&b, `\u%04x`, r)
		}
		i += n
	}
	return b.String()
}
