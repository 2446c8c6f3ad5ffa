package audit

import (
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strconv"
	"strings"
)

// ParseAnchors reads heads as audit verify --head gives them, each
// SEQ:SHA256 (a seq and the 64 hex digits logged with it).
func ParseAnchors(heads []string) ([]Anchor, error) {
	var anchors []Anchor
	for _, h := range heads {
		seq, hash, ok := strings.Cut(h, ":")
		n, err := strconv.ParseInt(seq, 10, 64)
		raw, herr := hex.DecodeString(hash)
		if !ok || err != nil || n < 1 || strings.HasPrefix(seq, "+") || herr != nil || len(raw) != 32 {
			return nil, fmt.Errorf("--head %q: want SEQ:SHA256 (a seq and the 64 hex digits logged with it)", h)
		}
		anchors = append(anchors, Anchor{Seq: n, Hash: strings.ToLower(hash)})
	}
	return anchors, nil
}

// CheckOptions say what Check checks.
type CheckOptions struct {
	// Files are the trail's files, oldest first, checked as one chain.
	Files []string
	// Anchors are heads logged when lines were written: the trail must
	// hold each (none: not checked).
	Anchors []Anchor
	// Keys vouch for the lines' signatures (nil: signatures not checked).
	Keys Keyring
	// KeptVersion is the four-eyes settings version the backend keeps
	// (0: none): a line written under a later one is a rollback.
	KeptVersion int
	// ChainOnly says the keys were left out on purpose (--chain-only), for
	// Checked.Print.
	ChainOnly bool
}

// Checked is what Check found, each file's report beside its name.
type Checked struct {
	CheckOptions
	Reports []Report
}

// Check verifies the trail's files as one chain (VerifyFiles) and, with
// keys, that no line was written under four-eyes settings later than the
// ones the backend keeps. A file that cannot be read is its *fs.PathError
// as it is; a broken trail is an error saying so.
func Check(o CheckOptions) (Checked, error) {
	if len(o.Files) == 0 {
		return Checked{}, errors.New("no file of the audit trail given")
	}
	reps, err := VerifyFiles(o.Files, o.Anchors, o.Keys)
	if err != nil {
		if pe := (*fs.PathError)(nil); errors.As(err, &pe) {
			return Checked{}, err
		}
		return Checked{}, fmt.Errorf("the audit trail is broken: %w", err)
	}
	if last := reps[len(reps)-1]; o.Keys != nil && last.Settings > o.KeptVersion {
		return Checked{}, fmt.Errorf("the audit trail is broken: seq %d was written under four-eyes settings version %d, and the backend keeps version %d: the settings were rolled back in the database, or the line's signer stamped a version that was never kept", last.SettingsSeq, last.Settings, o.KeptVersion)
	}
	return Checked{CheckOptions: o, Reports: reps}, nil
}

// Print writes what was checked, a line per file, then the head to
// compare with the last one logged.
func (c Checked) Print(w io.Writer) {
	var rep Report
	for i, path := range c.Files {
		r := c.Reports[i]
		torn := ""
		if len(r.Torn) > 0 {
			torn = fmt.Sprintf("; %d fragment(s) of writes cut short skipped (lines %v), the chain whole around them", len(r.Torn), r.Torn)
		}
		legacy := ""
		if r.Legacy > 0 {
			legacy = fmt.Sprintf("; %d line(s) from before the chain, not protected", r.Legacy)
		}
		signed := ""
		switch {
		case c.Keys != nil:
			signed = fmt.Sprintf("; %d signed, each vouched for by its writer's key", r.Signed)
			if r.Unsigned > 0 {
				signed += fmt.Sprintf(", %d unsigned from before the backend kept keys", r.Unsigned)
			}
		case c.ChainOnly:
			signed = "; signatures not checked (--chain-only)"
		default:
			signed = "; signatures not checked: the backend keeps no four-eyes settings"
		}
		fmt.Fprintf(w, "%s: %d line(s), chain whole%s%s%s\n", path, r.Lines, signed, legacy, torn)
		rep = r
	}
	if len(c.Anchors) > 0 {
		fmt.Fprintf(w, "holds the %d logged head(s) given\n", len(c.Anchors))
	}
	fmt.Fprintf(w, "head: seq %d sha256 %s (give the last \"audit head\" the processes logged as --head SEQ:SHA256: a line cut from the end, or a trail edited and chained again, shows there)\n", rep.HeadSeq, rep.HeadHash)
}

// RecentIn is Trail.Recent of the trail at path; a path where no file is
// is an error (a *fs.PathError matching fs.ErrNotExist), never a new
// empty trail: a reader creates nothing.
func RecentIn(path string, n int, f Filter) ([]Entry, error) {
	if _, err := os.Stat(path); err != nil {
		return nil, err
	}
	t, err := Open(path)
	if err != nil {
		return nil, err
	}
	defer t.Close()
	return t.Recent(n, f)
}
