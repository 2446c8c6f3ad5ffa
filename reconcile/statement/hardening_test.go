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
