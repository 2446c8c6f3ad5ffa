package charge

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// HistoryKind is what a line of a charge's history records.
type HistoryKind int

// The kinds of history line.
const (
	// HistoryDeclined: a debit attempt declined, and what followed: a
	// retry scheduled, or why none was (retries exhausted, final).
	//   generation 1: declined INSUFFICIENT_FUNDS at 2026-12-01T10:00:00Z; retry 1 of 3 at 2026-12-02T10:00:00Z
	//   generation 4: declined INSUFFICIENT_FUNDS at 2026-12-04T10:00:00Z; retries exhausted: 4 of 4 debit attempts made
	//   generation 2: declined ACCOUNT_CLOSED at 2026-12-02T10:00:00Z; final: a hard decline (the account is closed)
	HistoryDeclined HistoryKind = iota + 1
	// HistoryDebited: the debit that posted, after earlier lines.
	//   generation 3: debited CBS0000000042 at 2026-12-03T10:00:00Z
	HistoryDebited
	// HistoryNotice: the advance notice sent (notice-first mode).
	//   notice CHG-1:advance-notice sent at 2026-11-30T09:00:00Z; debit on or after 2026-12-01T09:00:00Z
	HistoryNotice
	// HistoryReopened: an operator's reopening of a FAILED record
	// (idempotency.Guard.Reopen writes it); only its generation, and
	// whether it failed by a decline, are read.
	//   generation 1: FAILED debit declined: ACCOUNT_FROZEN (attempt 1); reopened 2026-12-05T11:00:00Z by asha: unfrozen; new generation 2
	HistoryReopened
)

// HistoryLine is one line of a charge's history, as the Service writes it
// (String) and reads it back (ParseHistoryLine): the one format of the
// recovery policy's lines. Times are UTC, to the second (RFC 3339).
type HistoryLine struct {
	Kind HistoryKind
	// Generation is the bank-key generation the line is about (not for
	// HistoryNotice).
	Generation int
	// At is when it happened: the decline, the debit, the notice.
	At time.Time
	// Code is the decline code (HistoryDeclined).
	Code string
	// Retry of Retries is the retry scheduled after the decline, by its
	// code's rule (HistoryDeclined; 0 when none was: see Outcome), at Next.
	Retry, Retries int
	// Next is the retry's time (HistoryDeclined), or the notice's "debit
	// on or after" (HistoryNotice).
	Next time.Time
	// Outcome is why no retry was scheduled (HistoryDeclined without a
	// retry): "retries exhausted: …" or "final: …".
	Outcome string
	// Reference is the bank's reference of the debit (HistoryDebited).
	Reference string
	// NoticeKey is the advance notice's idempotency key (HistoryNotice).
	NoticeKey string
	// Declined: a reopened generation had failed by the bank's decline
	// (HistoryReopened).
	Declined bool
}

// The beginnings of Outcome.
const (
	outcomeExhausted = "retries exhausted: "
	outcomeFinal     = "final: "
)

// String is the line.
func (l HistoryLine) String() string {
	switch l.Kind {
	case HistoryDeclined:
		s := fmt.Sprintf("generation %d: declined %s at %s; ", l.Generation, lineWord(l.Code), stamp(l.At))
		if l.Retry > 0 {
			return s + fmt.Sprintf("retry %d of %d at %s", l.Retry, l.Retries, stamp(l.Next))
		}
		return s + l.Outcome
	case HistoryDebited:
		return fmt.Sprintf("generation %d: debited %s at %s", l.Generation, lineWord(l.Reference), stamp(l.At))
	case HistoryNotice:
		return fmt.Sprintf("notice %s sent at %s; debit on or after %s", lineWord(l.NoticeKey), stamp(l.At), stamp(l.Next))
	}
	return fmt.Sprintf("history line of kind %d", int(l.Kind))
}

// stamp is t as a history line writes it.
func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }

// lineWord is s fit to stand as one word of a line: no spaces or ';'
// (a code or a reference from the bank; "-" when empty).
func lineWord(s string) string {
	if s == "" {
		return "-"
	}
	return strings.Map(func(r rune) rune {
		if r <= ' ' || r == ';' || r == 0x7f {
			return '_'
		}
		return r
	}, s)
}

// ParseHistoryLine reads a line of a charge's history: ok is false for a
// line of another kind (HistoryLine's kinds only are read).
func ParseHistoryLine(s string) (l HistoryLine, ok bool) {
	if rest, found := strings.CutPrefix(s, "notice "); found {
		key, rest, found := strings.Cut(rest, " sent at ")
		at, next, found2 := strings.Cut(rest, "; debit on or after ")
		l = HistoryLine{Kind: HistoryNotice, NoticeKey: key}
		return l, found && found2 && key != "" && parseStamp(at, &l.At) && parseStamp(next, &l.Next)
	}
	rest, found := strings.CutPrefix(s, "generation ")
	if !found {
		return HistoryLine{}, false
	}
	num, rest, found := strings.Cut(rest, ": ")
	gen, err := strconv.Atoi(num)
	if !found || err != nil || gen < 1 || strconv.Itoa(gen) != num {
		return HistoryLine{}, false
	}
	switch {
	case strings.HasPrefix(rest, "declined "):
		code, rest, found := strings.Cut(strings.TrimPrefix(rest, "declined "), " at ")
		at, outcome, found2 := strings.Cut(rest, "; ")
		l = HistoryLine{Kind: HistoryDeclined, Generation: gen, Code: code}
		if !found || !found2 || code == "" || !parseStamp(at, &l.At) {
			return HistoryLine{}, false
		}
		if retry, found := strings.CutPrefix(outcome, "retry "); found {
			k, rest, found := strings.Cut(retry, " of ")
			n, next, found2 := strings.Cut(rest, " at ")
			var err1, err2 error
			l.Retry, err1 = strconv.Atoi(k)
			l.Retries, err2 = strconv.Atoi(n)
			return l, found && found2 && err1 == nil && err2 == nil && l.Retry >= 1 && l.Retries >= l.Retry && parseStamp(next, &l.Next)
		}
		l.Outcome = outcome
		return l, strings.HasPrefix(outcome, outcomeExhausted) || strings.HasPrefix(outcome, outcomeFinal)
	case strings.HasPrefix(rest, "debited "):
		ref, at, found := cutLast(strings.TrimPrefix(rest, "debited "), " at ")
		l = HistoryLine{Kind: HistoryDebited, Generation: gen, Reference: ref}
		return l, found && parseStamp(at, &l.At)
	case strings.Contains(rest, "; reopened "):
		detail, _, _ := strings.Cut(rest, " (attempt ")
		failed, found := strings.CutPrefix(detail, string(Failed)+" ")
		return HistoryLine{Kind: HistoryReopened, Generation: gen, Declined: found && DeclinedDetail(failed)}, true
	}
	return HistoryLine{}, false
}

// parseStamp reads a line's time into t.
func parseStamp(s string, t *time.Time) bool {
	v, err := time.Parse(time.RFC3339, s)
	*t = v
	return err == nil
}

// cutLast is strings.Cut at the last sep.
func cutLast(s, sep string) (before, after string, found bool) {
	if i := strings.LastIndex(s, sep); i >= 0 {
		return s[:i], s[i+len(sep):], true
	}
	return s, "", false
}

// attempts is what a charge's history says of its debit attempts so far.
type attempts struct {
	// generations attempted: declined (a line of ours), or reopened after
	// a decline (the operator's line).
	generations map[int]bool
	// first is the earliest decline (zero: none).
	first time.Time
	// retries scheduled, by decline code.
	retries map[string]int
	// notice is the advance notice's line, when one was sent.
	notice *HistoryLine
}

// readHistory reads a record's history, oldest first.
func readHistory(history []string) attempts {
	a := attempts{generations: map[int]bool{}, retries: map[string]int{}}
	for _, s := range history {
		l, ok := ParseHistoryLine(s)
		if !ok {
			continue
		}
		switch l.Kind {
		case HistoryDeclined:
			a.generations[l.Generation] = true
			if a.first.IsZero() || l.At.Before(a.first) {
				a.first = l.At
			}
			if l.Retry > 0 {
				a.retries[l.Code]++
			}
		case HistoryReopened:
			if l.Declined {
				a.generations[l.Generation] = true
			}
		case HistoryNotice:
			if a.notice == nil {
				a.notice = &l
			}
		}
	}
	return a
}

// made is the number of debit attempts made when generation gen's has
// been: every generation the history names as attempted, and gen, and no
// fewer than gen (each generation is one debit at the bank: a repeat under
// the same key is the same debit).
func (a attempts) made(gen int) int {
	n := len(a.generations)
	if !a.generations[gen] {
		n++
	}
	return max(n, gen)
}
