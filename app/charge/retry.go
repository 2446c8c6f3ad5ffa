package charge

import (
	"cmp"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// The defaults of a RetryPolicy.
const (
	// DefaultMaxAttempts is how many debit attempts a charge gets in all,
	// across every decline code: the first and three retries.
	DefaultMaxAttempts = 4
	// DefaultRetryWindow is how long after the first attempt's decline a
	// retry may still be scheduled.
	DefaultRetryWindow = 30 * 24 * time.Hour
	// DefaultJitter lengthens each delay by up to 10%, at random, so that
	// the charges declined together at month-end are not all retried in
	// the same second.
	DefaultJitter = 0.1
	// NoJitter, as RetryPolicy.Jitter, keeps every delay exact.
	NoJitter = -1
	// MaxRetryAttempts bounds RetryPolicy.MaxAttempts: every attempt is a
	// line of the record's history (up to a few hundred bytes), and the
	// record must fit every store's item (DynamoDB's 400 KB) with room
	// for operators' reopenings; card schemes allow far fewer
	// re-presentations (Visa: 15 in 30 days).
	MaxRetryAttempts = 100
)

// RetryPolicy is the schedule of retries after the bank declines a debit:
// which decline codes are retried (Rules; every other code is final), after
// how long and how often, within a cap of attempts per charge and a window
// from the first attempt. Each retry is a new bank-key generation (the
// bank's answer under the old key is final, as for reopen --new-attempt),
// and every attempt's outcome is a line of the record's history
// (HistoryLine), from which the policy counts the attempts made.
//
// A hard decline (HardDecline: a closed or invalid account, a cancelled
// mandate…) is never retried: a policy that lists one is refused.
//
// Zero fields take the defaults.
type RetryPolicy struct {
	// Rules are the decline codes retried (DeclineError.Code, the bank's
	// "error" or "code" field), each with its delay and its number of
	// retries. At least one; a code at most once.
	Rules []RetryRule
	// MaxAttempts caps the debit attempts of one charge across all codes
	// (the first included): once made, a decline is final
	// (retries_exhausted) whatever its rule has left. Default
	// DefaultMaxAttempts (4); at least 2 when set, at most
	// MaxRetryAttempts.
	MaxAttempts int
	// Window is how long after the first attempt's decline a retry may be
	// scheduled: a retry whose time would fall past it is not scheduled
	// (retries_exhausted). Default DefaultRetryWindow (30 days).
	Window time.Duration
	// Jitter lengthens each delay by up to this fraction of it, at random
	// (0.1: up to +10%); never shortens it. Default DefaultJitter (0.1);
	// NoJitter for none; at most 1.
	Jitter float64
	// Rand is the random source of the jitter: a number in [0, 1). Default
	// math/rand/v2.Float64. Tests inject a fixed one.
	Rand func() float64
}

// RetryRule retries a decline code Retries times, each Delay after the
// decline (plus the jitter).
type RetryRule struct {
	Code    string
	Delay   time.Duration
	Retries int
}

// String is the rule in the flag syntax: INSUFFICIENT_FUNDS=24h×3.
func (r RetryRule) String() string {
	return fmt.Sprintf("%s=%s×%d", r.Code, FormatDelay(r.Delay), r.Retries)
}

// FormatDelay writes d as the flag syntax reads it: whole days as "3d",
// anything else as a Go duration without its zero tail ("90m", "1h30m").
func FormatDelay(d time.Duration) string {
	const day = 24 * time.Hour
	if d > 0 && d%day == 0 {
		return strconv.FormatInt(int64(d/day), 10) + "d"
	}
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// hardDeclines are the decline codes never retried, with why: a retry
// cannot succeed (the account is gone, the number is wrong), or the
// customer or the bank has said no to this debit (a cancelled mandate, a
// stop-payment, suspected fraud). Card schemes and direct-debit rules fine
// a collector that re-presents after one.
var hardDeclines = map[string]string{
	"ACCOUNT_CLOSED":    "the account is closed",
	"ACCOUNT_NOT_FOUND": "there is no such account",
	"INVALID_ACCOUNT":   "the account number is invalid",
	"CUSTOMER_DECEASED": "the account holder is deceased",
	"NO_MANDATE":        "there is no mandate for this debit",
	"MANDATE_CANCELLED": "the customer cancelled the mandate",
	"MANDATE_REVOKED":   "the customer revoked the mandate",
	"STOP_PAYMENT":      "the customer stopped this payment",
	"DEBIT_NOT_ALLOWED": "the account does not accept debits",
	"FRAUD_SUSPECTED":   "the bank suspects fraud",
}

// HardDecline reports whether code is a hard decline, never retried, and
// why.
func HardDecline(code string) (why string, ok bool) {
	// Banks spell codes as they like (account_closed, " Stop_Payment",
	// "Account Closed", "ACCOUNT-CLOSED"): a hard decline is one whatever
	// its case, and whatever runs of spaces, hyphens or underscores
	// separate its words.
	why, ok = hardDeclines[normalCode(code)]
	return why, ok
}

// NormalDeclineCode is a decline code as HardDecline compares it: upper
// case, its words (separated by spaces, hyphens or underscores) joined by
// one underscore ("account closed", "Account-Closed" → ACCOUNT_CLOSED).
func NormalDeclineCode(code string) string { return normalCode(code) }

// normalCode is code in upper case, its words joined by one underscore.
func normalCode(code string) string {
	words := strings.FieldsFunc(strings.ToUpper(code), func(r rune) bool { return r == ' ' || r == '-' || r == '_' || unicode.IsSpace(r) })
	return strings.Join(words, "_")
}

// HardDeclineCodes lists the hard declines, sorted.
func HardDeclineCodes() []string {
	codes := make([]string, 0, len(hardDeclines))
	for c := range hardDeclines {
		codes = append(codes, c)
	}
	slices.Sort(codes)
	return codes
}

// ErrRetrySchedule marks a retry schedule that cannot be used
// (RetryScheduleError).
var ErrRetrySchedule = errors.New("bad retry schedule")

// RetryScheduleError says which part of a retry schedule is wrong, and why.
type RetryScheduleError struct {
	// Entry is the entry at fault, as written (a rule's String when the
	// policy was built in code); empty for the schedule as a whole.
	Entry   string
	Problem string
}

func (e *RetryScheduleError) Error() string {
	if e.Entry == "" {
		return "retry schedule: " + e.Problem
	}
	return fmt.Sprintf("retry schedule entry %q: %s", e.Entry, e.Problem)
}

// Is makes errors.Is(err, ErrRetrySchedule) hold.
func (e *RetryScheduleError) Is(target error) bool { return target == ErrRetrySchedule }

// retrySyntax is what an entry looks like.
const retrySyntax = "want CODE=DELAY×N (e.g. INSUFFICIENT_FUNDS=24h×3)"

// ParseRetryRules reads the --retry-declines syntax: comma-separated
// CODE=DELAY×N entries, such as "INSUFFICIENT_FUNDS=24h×3,ACCOUNT_FROZEN=72h×1"
// (× or x; DELAY a Go duration, or whole days as "3d" or "1d12h"; N
// retries, 1 or more). A blank s is no schedule (nil, nil). A hard decline,
// a code listed twice, and every malformed entry are refused with a
// *RetryScheduleError naming the entry.
func ParseRetryRules(s string) ([]RetryRule, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var rules []RetryRule
	for i, entry := range strings.Split(s, ",") {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			return nil, &RetryScheduleError{Problem: fmt.Sprintf("entry %d is empty: %s, comma-separated", i+1, retrySyntax)}
		}
		r, err := parseRetryRule(entry)
		if err == nil {
			err = checkRules(append(rules, r), len(rules), entry)
		}
		if err != nil {
			return nil, err
		}
		rules = append(rules, r)
	}
	return rules, nil
}

// parseRetryRule reads one CODE=DELAY×N.
func parseRetryRule(entry string) (RetryRule, error) {
	bad := func(problem string) (RetryRule, error) {
		return RetryRule{}, &RetryScheduleError{Entry: entry, Problem: problem}
	}
	code, spec, ok := strings.Cut(entry, "=")
	code, spec = strings.TrimSpace(code), strings.TrimSpace(spec)
	if !ok || code == "" || spec == "" {
		return bad(retrySyntax)
	}
	at := strings.LastIndexAny(spec, "×x")
	if at < 0 {
		return bad(fmt.Sprintf("no ×N after the delay %q: %s", spec, retrySyntax))
	}
	_, w := utf8.DecodeRuneInString(spec[at:])
	delay, count := strings.TrimSpace(spec[:at]), strings.TrimSpace(spec[at+w:])
	d, err := parseDelay(delay)
	if err != nil {
		return bad(err.Error())
	}
	n, err := strconv.Atoi(count)
	if err != nil || n < 1 || strings.ContainsAny(count, "+-") {
		return bad(fmt.Sprintf("count %q must be a whole number of retries, 1 or more", count))
	}
	return RetryRule{Code: code, Delay: d, Retries: n}, nil
}

// parseDelay reads a Go duration, or whole days with an optional Go
// duration after them ("3d", "1d12h").
func parseDelay(s string) (time.Duration, error) {
	badDelay := fmt.Errorf("delay %q: want a Go duration (90m, 24h) or days (3d, 1d12h)", s)
	var d time.Duration
	rest := s
	if days, after, ok := strings.Cut(s, "d"); ok {
		n, err := strconv.Atoi(days)
		if err != nil || n < 0 || strings.ContainsAny(days, "+-") || n > 3650 {
			return 0, badDelay
		}
		d, rest = time.Duration(n)*24*time.Hour, after
	}
	if rest != "" {
		more, err := time.ParseDuration(rest)
		if err != nil || strings.ContainsAny(rest, "+-") {
			return 0, badDelay
		}
		d += more
	}
	if d <= 0 {
		return 0, fmt.Errorf("delay %q must be more than zero", s)
	}
	return d, nil
}

// checkRules checks rules[i] (written as entry) against the rules before
// it: its code, its delay and count, not a hard decline, not a repeat.
func checkRules(rules []RetryRule, i int, entry string) error {
	r := rules[i]
	bad := func(problem string) error { return &RetryScheduleError{Entry: entry, Problem: problem} }
	switch {
	case !codeWord(r.Code):
		return bad(fmt.Sprintf("code %q must be upper-case letters, digits and _ (the bank's decline code)", r.Code))
	case r.Delay <= 0:
		return bad(fmt.Sprintf("delay %s must be more than zero", r.Delay))
	case r.Retries < 1:
		return bad(fmt.Sprintf("count %d must be a whole number of retries, 1 or more", r.Retries))
	}
	if why, hard := HardDecline(r.Code); hard {
		return bad(fmt.Sprintf("%s is a hard decline (%s): it is never retried", r.Code, why))
	}
	for _, before := range rules[:i] {
		if before.Code == r.Code {
			return bad(fmt.Sprintf("code %s is listed twice", r.Code))
		}
	}
	return nil
}

// codeWord reports whether s is a decline code as a schedule lists it:
// upper-case letters, digits and '_'.
func codeWord(s string) bool {
	return s != "" && strings.Trim(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_") == ""
}

// Validate says what is wrong with p, if anything (a *RetryScheduleError):
// its rules as ParseRetryRules checks them, MaxAttempts, Window and
// Jitter, and a delay longer than the window (a retry it could never
// schedule).
func (p *RetryPolicy) Validate() error {
	if len(p.Rules) == 0 {
		return &RetryScheduleError{Problem: "no rules: " + retrySyntax}
	}
	for i, r := range p.Rules {
		if err := checkRules(p.Rules, i, r.String()); err != nil {
			return err
		}
	}
	switch {
	case p.MaxAttempts < 0 || p.MaxAttempts == 1 || p.MaxAttempts > MaxRetryAttempts:
		return &RetryScheduleError{Problem: fmt.Sprintf("at most %d debit attempts per charge: want 2 or more, and no more than %d (0: the default, %d)", p.MaxAttempts, MaxRetryAttempts, DefaultMaxAttempts)}
	case p.Window < 0:
		return &RetryScheduleError{Problem: fmt.Sprintf("window %s must not be negative (0: the default, %s)", p.Window, FormatDelay(DefaultRetryWindow))}
	case p.Jitter != NoJitter && (p.Jitter < 0 || p.Jitter > 1):
		return &RetryScheduleError{Problem: fmt.Sprintf("jitter %v must be a fraction from 0 to 1 (0: the default, %v; NoJitter: none)", p.Jitter, DefaultJitter)}
	}
	window := p.Window
	if window == 0 {
		window = DefaultRetryWindow
	}
	jitter := p.Jitter
	switch jitter {
	case 0:
		jitter = DefaultJitter
	case NoJitter:
		jitter = 0
	}
	for _, r := range p.Rules {
		if r.Delay > window {
			return &RetryScheduleError{Entry: r.String(), Problem: fmt.Sprintf("delay %s is longer than the %s window from the first attempt: no retry could be scheduled", FormatDelay(r.Delay), FormatDelay(window))}
		}
		// The jitter lengthens a delay; one that can lengthen it past the
		// window would decide at random, charge by charge, whether the
		// first retry happens at all.
		if longest := r.Delay + time.Duration(float64(r.Delay)*jitter); longest > window {
			fits := time.Duration(float64(window) / (1 + jitter)).Truncate(time.Second)
			if fits > time.Hour {
				fits = fits.Truncate(time.Hour)
			}
			return &RetryScheduleError{Entry: r.String(), Problem: fmt.Sprintf("delay %s with its jitter of up to %v%% (%s) can fall past the %s window from the first attempt, so that the retry would happen for some charges and not others: shorten the delay to %s or widen the window to %s",
				FormatDelay(r.Delay), jitter*100, FormatDelay(ceilDuration(longest)), FormatDelay(window), FormatDelay(fits), FormatDelay(ceilDuration(longest)))}
		}
	}
	return nil
}

// withDefaults is a checked copy of p with its defaults filled in.
func (p *RetryPolicy) withDefaults() (*RetryPolicy, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	q := *p
	q.Rules = slices.Clone(p.Rules)
	if q.MaxAttempts == 0 {
		q.MaxAttempts = DefaultMaxAttempts
	}
	if q.Window == 0 {
		q.Window = DefaultRetryWindow
	}
	switch q.Jitter {
	case 0:
		q.Jitter = DefaultJitter
	case NoJitter:
		q.Jitter = 0
	}
	if q.Rand == nil {
		q.Rand = rand.Float64
	}
	return &q, nil
}

// rule is the rule of code, if it has one.
func (p *RetryPolicy) rule(code string) (RetryRule, bool) {
	for _, r := range p.Rules {
		if r.Code == code {
			return r, true
		}
	}
	return RetryRule{}, false
}

// jittered is d lengthened by up to p.Jitter of it, from p.Rand (a value
// outside [0, 1] is taken as the nearest end).
func (p *RetryPolicy) jittered(d time.Duration) time.Duration {
	r := min(max(p.Rand(), 0), 1)
	return d + time.Duration(float64(d)*p.Jitter*r)
}

// ceilDuration is d, or the next whole second above it.
func ceilDuration(d time.Duration) time.Duration {
	if s := d.Truncate(time.Second); s < d {
		return s + time.Second
	}
	return d
}

// ceilSecond is t, or the next whole second after it: a time a history
// line writes exactly, never earlier than t.
func ceilSecond(t time.Time) time.Time {
	if s := t.Truncate(time.Second); s.Before(t) {
		return s.Add(time.Second)
	}
	return t
}

// retryPlan is what the policy makes of a decline: its history line (a
// retry scheduled at Line.Next, or why none is), and for a retry the
// number of the next attempt and the most there can be.
type retryPlan struct {
	Line        HistoryLine
	Attempt, Of int
	// Exhausted: the code is retried, but the schedule has run out (its
	// retries, the attempts per charge, or the window).
	Exhausted bool
}

// plan decides what follows generation gen's decline with code at at (a
// whole second), given the attempts the history records (a nil p retries
// nothing). The retry's time is the delay and its jitter after the
// decline, up to the next whole second.
func (p *RetryPolicy) plan(code string, gen int, a attempts, at time.Time) retryPlan {
	line := HistoryLine{Kind: HistoryDeclined, Generation: gen, Code: code, At: at}
	final := func(why string) retryPlan {
		line.Outcome = outcomeFinal + why
		return retryPlan{Line: line}
	}
	exhausted := func(why string) retryPlan {
		line.Outcome = outcomeExhausted + why
		return retryPlan{Line: line, Exhausted: true}
	}
	if why, hard := HardDecline(code); hard {
		return final(fmt.Sprintf("a hard decline (%s)", why))
	}
	if p == nil {
		return final("no retry schedule")
	}
	rule, ok := p.rule(code)
	if !ok {
		return final("not in the retry schedule")
	}
	made, used := a.made(gen), a.retries[code]
	first := a.first
	if first.IsZero() || at.Before(first) {
		first = at
	}
	next, end := ceilSecond(at.Add(p.jittered(rule.Delay))), first.Add(p.Window)
	switch {
	case used >= rule.Retries:
		return exhausted(fmt.Sprintf("%d of %d retries after %s made", used, rule.Retries, code))
	case made >= p.MaxAttempts:
		return exhausted(fmt.Sprintf("%d of %d debit attempts made", made, p.MaxAttempts))
	case next.After(end):
		return exhausted(fmt.Sprintf("the next attempt at %s would be past the %s window that ends at %s", stamp(next), FormatDelay(p.Window), stamp(end)))
	}
	line.Retry, line.Retries, line.Next = used+1, rule.Retries, next
	return retryPlan{Line: line, Attempt: made + 1, Of: min(p.MaxAttempts, made+rule.Retries-used)}
}

// LongestWaits are the waits of the longest schedule p can give one
// charge, one per retry, from its first decline: the longest delays first
// (each with its greatest jitter, and the second a retry's time is
// rounded up to), as many as MaxAttempts and each rule's retries allow,
// in all no longer than the Window. What a consumer that keeps a waiting
// charge's message (a Lambda) checks against the queue
// (queue.CheckWaitWithinQueue). A policy Validate refuses has none.
func (p *RetryPolicy) LongestWaits() []time.Duration {
	if p == nil {
		return nil
	}
	q, err := p.withDefaults()
	if err != nil {
		return nil
	}
	var all []time.Duration
	for _, r := range q.Rules {
		d := ceilDuration(r.Delay+time.Duration(float64(r.Delay)*q.Jitter)) + time.Second
		for range r.Retries {
			all = append(all, d)
		}
	}
	slices.SortFunc(all, func(a, b time.Duration) int { return cmp.Compare(b, a) })
	all = all[:min(len(all), q.MaxAttempts-1)]
	var out []time.Duration
	left := q.Window
	for _, d := range all {
		if left <= 0 {
			break
		}
		d = min(d, left)
		out = append(out, d)
		left -= d
	}
	return out
}
