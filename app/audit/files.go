package audit

import (
	"fmt"
	"io"
	"os"
	"time"

	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/internal/safetext"
)

// VerifyFiles checks files, oldest first, as one chain, and that it holds
// each anchor (a head logged when its line was written): an anchor is
// checked in the file whose seq range holds it, one past the end against
// the last file; and, with keys, every line's signature (VerifyKeyed). It
// returns each file's report.
func VerifyFiles(files []string, anchors []Anchor, keys Keyring) ([]Report, error) {
	run := func(with func(i int, first, last int64) []Anchor, ranges [][2]int64) ([]Report, error) {
		var rep Report
		var reps []Report
		proposed := map[string]int64{} // one chain: a proposal is proposed once in all of it
		for i, path := range files {
			fh, err := os.Open(path)
			if err != nil {
				return nil, err
			}
			var use []Anchor
			if with != nil {
				use = with(i, ranges[i][0], ranges[i][1])
			}
			r, err := verifyKeyed(fh, path, rep, keys, use, proposed)
			fh.Close()
			if err != nil {
				return nil, err
			}
			reps = append(reps, r)
			rep = r
		}
		return reps, nil
	}
	// Each file's range of seq first, then each again with the anchors
	// that fall in it (and those past the end, with the last).
	reps, err := run(nil, nil)
	if err != nil || len(anchors) == 0 {
		return reps, err
	}
	var ranges [][2]int64
	prev := int64(0)
	for _, r := range reps {
		ranges = append(ranges, [2]int64{prev + 1, r.HeadSeq})
		prev = r.HeadSeq
	}
	return run(func(i int, first, last int64) []Anchor {
		var use []Anchor
		for _, a := range anchors {
			if (a.Seq >= first && a.Seq <= last) || (i == len(files)-1 && a.Seq > last) {
				use = append(use, a)
			}
		}
		return use
	}, ranges)
}

// PrintEntries shows entries one a line, every field as visible text
// (safetext.Text): a line's content never makes a row of its own, nor a
// terminal escape, nor reorders the row (a bidirectional override).
func PrintEntries(w io.Writer, es []Entry) {
	p := safetext.Text
	for _, e := range es {
		what := charge.ShowID(e.ChargeID) // as every view shows it; the trail keeps it as read
		if len(e.Charges) > 0 {
			what = fmt.Sprintf("%d charge(s)", len(e.Charges))
		}
		fmt.Fprintf(w, "%6d %s %-10s %-7s %-20s %-14s %-18s %-12s %s %s\n", e.Seq, e.At.Format(time.RFC3339), p(e.Operator), p(e.Via),
			p(e.Action), p(e.Proposal), p(what), p(e.Result), p(e.Reason), p(e.Detail))
	}
}
