package statement

import (
	"bufio"
	"fmt"
	"io"
	"strings"
)

// The limits on what the camt reader keeps, so that one huge element (or
// a file that is one long text) cannot blow memory.
const (
	// maxText bounds the text of an element kept as a posting's narrative
	// (each of Ustrd, AddtlTxInf, AddtlNtryInf; and the Ustrd of a
	// transaction together), after decoding.
	maxText = 64 << 10
	// maxShort bounds the text of every other element read: ids,
	// references, amounts, dates, codes.
	maxShort = 1 << 10
	// maxToken bounds, in the file's bytes, any single piece of XML the
	// decoder buffers whole: a run of text (between two markups), a tag
	// with its attributes, a comment, a CDATA section, a processing
	// instruction or a directive — read or skipped. encoding/xml reads
	// each of them whole before handing it over.
	maxToken = 1 << 20
	// maxDepth bounds the nesting of elements (the decoder keeps a stack
	// of them).
	maxDepth = 256
)

// The lexical states of xmlGuard.
const (
	gText    = iota
	gLt      // after '<'
	gTag     // in a start or end tag
	gQuote   // in a quoted attribute value
	gPI      // <? … ?>
	gBang    // after "<!", deciding
	gComment // <!-- … -->
	gCDATA   // <![CDATA[ … ]]>
	gDecl    // <!DOCTYPE …> and the like
	gDQuote  // in a quoted string of a directive
)

// xmlGuard sits between the file and the XML decoder and refuses, as the
// bytes go by, a piece of XML longer than maxToken or elements nested
// deeper than maxDepth: encoding/xml has no such limits, and would buffer
// a text of any length whole. It follows XML's lexical structure only as
// far as needed to tell where each piece starts and ends.
type xmlGuard struct {
	r     *bufio.Reader
	err   error
	state int
	n     int  // bytes of the current piece
	end   bool // the tag is an end tag
	slash bool // the tag's last byte before '>' was '/'
	quote byte
	bang  []byte // after "<!", up to "[CDATA["
	tail  [2]byte
	depth int // elements open
	decl  int // '<' nesting in a directive
}

func newXMLGuard(r *bufio.Reader) *xmlGuard { return &xmlGuard{r: r, bang: make([]byte, 0, 7)} }

func (g *xmlGuard) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		b, err := g.ReadByte()
		if err != nil {
			if n > 0 {
				return n, nil
			}
			return 0, err
		}
		p[n] = b
		n++
		if g.r.Buffered() == 0 {
			break
		}
	}
	return n, nil
}

func (g *xmlGuard) ReadByte() (byte, error) {
	if g.err != nil {
		return 0, g.err
	}
	b, err := g.r.ReadByte()
	if err != nil {
		return 0, err
	}
	if err := g.step(b); err != nil {
		g.err = err
		return 0, err
	}
	return b, nil
}

var pieceName = [...]string{
	gText: "a text", gLt: "a tag", gTag: "a tag", gQuote: "a tag",
	gPI: "a processing instruction", gBang: "a directive", gComment: "a comment",
	gCDATA: "a CDATA section", gDecl: "a directive", gDQuote: "a directive",
}

func (g *xmlGuard) step(b byte) error {
	g.n++
	switch g.state {
	case gText:
		if b == '<' {
			g.state, g.n = gLt, 1
		}
	case gLt:
		switch b {
		case '?':
			g.state, g.tail = gPI, [2]byte{}
		case '!':
			g.state, g.bang = gBang, g.bang[:0]
		default:
			g.state, g.end, g.slash = gTag, b == '/', false
		}
	case gTag:
		switch b {
		case '"', '\'':
			g.state, g.quote = gQuote, b
		case '>':
			switch {
			case g.end:
				if g.depth > 0 {
					g.depth--
				}
			case !g.slash:
				if g.depth++; g.depth > maxDepth {
					return fmt.Errorf("elements nested deeper than %d", maxDepth)
				}
			}
			g.state, g.n = gText, 0
			return nil
		}
		g.slash = b == '/'
	case gQuote:
		if b == g.quote {
			g.state = gTag
		}
	case gPI:
		if b == '>' && g.tail[1] == '?' {
			g.state, g.n = gText, 0
			return nil
		}
		g.tail = [2]byte{g.tail[1], b}
	case gBang:
		g.bang = append(g.bang, b)
		switch s := string(g.bang); {
		case s == "--":
			g.state, g.tail = gComment, [2]byte{}
		case s == "[CDATA[":
			g.state, g.tail = gCDATA, [2]byte{}
		case strings.HasPrefix("--", s) || strings.HasPrefix("[CDATA[", s):
		default: // DOCTYPE and the like: to the '>' closing the '<'
			g.state, g.decl = gDecl, 1
			return g.stepDecl(b)
		}
	case gComment:
		if b == '>' && g.tail == [2]byte{'-', '-'} {
			g.state, g.n = gText, 0
			return nil
		}
		g.tail = [2]byte{g.tail[1], b}
	case gCDATA:
		if b == '>' && g.tail == [2]byte{']', ']'} {
			g.state, g.n = gText, 0
			return nil
		}
		g.tail = [2]byte{g.tail[1], b}
	case gDecl:
		return g.stepDecl(b)
	case gDQuote:
		if b == g.quote {
			g.state = gDecl
		}
	}
	if g.n > maxToken {
		return fmt.Errorf("%s longer than %d bytes", pieceName[g.state], maxToken)
	}
	return nil
}

func (g *xmlGuard) stepDecl(b byte) error {
	switch b {
	case '"', '\'':
		g.state, g.quote = gDQuote, b
	case '<':
		g.decl++
	case '>':
		if g.decl--; g.decl == 0 {
			g.state, g.n = gText, 0
			return nil
		}
	}
	if g.n > maxToken {
		return fmt.Errorf("%s longer than %d bytes", pieceName[g.state], maxToken)
	}
	return nil
}

var _ io.ByteReader = (*xmlGuard)(nil)

// maxRecord bounds, in the file's bytes, a record of the CSV export
// (encoding/csv reads a record whole).
const maxRecord = 1 << 20

// recordTooLong is csvGuard's refusal, at a line of the file.
type recordTooLong struct{ line int }

func (e *recordTooLong) Error() string {
	return fmt.Sprintf("a record longer than %d bytes", maxRecord)
}

// csvGuard sits between the file and encoding/csv and refuses a record
// longer than maxRecord as the bytes go by. A record ends at a newline
// outside double quotes (RFC 4180: a doubled quote inside a quoted field
// toggles twice).
type csvGuard struct {
	r       io.Reader
	err     error
	n, line int
	quoted  bool
}

func newCSVGuard(r io.Reader) *csvGuard { return &csvGuard{r: r, line: 1} }

func (g *csvGuard) Read(p []byte) (int, error) {
	if g.err != nil {
		return 0, g.err
	}
	n, err := g.r.Read(p)
	for i, b := range p[:n] {
		g.n++
		switch b {
		case '"':
			g.quoted = !g.quoted
		case '\n':
			if !g.quoted {
				g.n = 0
			}
			g.line++
		}
		if g.n > maxRecord {
			g.err = &recordTooLong{line: g.line}
			if i == 0 {
				return 0, g.err
			}
			return i, nil
		}
	}
	return n, err
}
