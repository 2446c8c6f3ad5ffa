package statement

import (
	"errors"
	"strings"
	"testing"
)

// An encoding the reader does not take is a *FormatError of the file at
// line 1 that says which encoding, wrapping the CharsetReader's error.
func TestUnsupportedEncodingFormatError(t *testing.T) {
	doc := strings.Replace(custDoc([]string{"DE89370400440532013000"}, []string{"CHG-1"}), `encoding="UTF-8"`, `encoding="windows-1252"`, 1)
	_, err := Read(strings.NewReader(doc), "enc.xml", Options{}, func(Posting) error { return nil })
	var fe *FormatError
	if !errors.As(err, &fe) {
		t.Fatalf("error %T %v, want a *FormatError", err, err)
	}
	if fe.File != "enc.xml" || fe.Line != 1 || fe.Err == nil || errors.Unwrap(fe.Err) == nil {
		t.Errorf("got %#v, want enc.xml line 1 wrapping the CharsetReader's error", fe)
	}
	if want := `encoding "windows-1252" is not read (UTF-8, ISO-8859-1 or US-ASCII)`; !strings.Contains(err.Error(), want) {
		t.Errorf("error %q does not say %q", err, want)
	}
}

// After </Document> only white space, comments and processing
// instructions may follow; a second document or text is a FormatError.
func TestContentAfterDocument(t *testing.T) {
	first := custDoc([]string{"DE89370400440532013000"}, []string{"CHG-1"})
	second := custDoc([]string{"GB29NWBK60161331926819"}, []string{"CHG-2"})
	for _, tt := range []struct {
		name, tail string
		ok         bool
	}{
		{"misc", "\n<!-- end -->\n<?bank trailer?>\n\n", true},
		{"second document", strings.TrimPrefix(second, `<?xml version="1.0" encoding="UTF-8"?>`), false},
		{"second document with its declaration", second, false},
		{"text", "trailing junk\n", false},
		{"element", "<x/>", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Read(strings.NewReader(first+tt.tail), "two.xml", Options{}, func(Posting) error { return nil })
			if tt.ok {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			var fe *FormatError
			if !errors.As(err, &fe) || fe.File != "two.xml" || fe.Line == 0 {
				t.Fatalf("error %v, want a *FormatError with its line", err)
			}
			t.Log(err)
		})
	}
}
