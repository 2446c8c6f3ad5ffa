// Package charge is the domain of pre-debit charge recovery: a bank is owed
// a fee (an SMS alert fee, a cheque-book fee, locker rent), the consumer
// debits the customer's account through the core-banking API and sends a
// pre-debit notification, exactly once per charge however often the queue
// delivers it.
//
// The package imports only the standard library and this module's
// idempotency package. It defines the ports it needs (Debiter, Notifier,
// and AdvanceNotifier for notice-first mode) and the Service that runs
// claim → debit → notify → done, with its recovery policy: retries of
// declines by code (RetryPolicy), each a new bank-key generation, and the
// advance notice before the debit (Options.NoticeLead), every step a line
// of the record's history (HistoryLine).
package charge

import (
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
)

// Type is the kind of fee.
type Type string

// The fee types the bank recovers.
const (
	SMSAlertFee   Type = "SMS_ALERT_FEE"
	ChequeBookFee Type = "CHEQUE_BOOK_FEE"
	LockerRent    Type = "LOCKER_RENT"
)

// Types lists every valid Type.
var Types = []Type{SMSAlertFee, ChequeBookFee, LockerRent}

// Valid reports whether t is a known fee type.
func (t Type) Valid() bool {
	for _, v := range Types {
		if t == v {
			return true
		}
	}
	return false
}

// Charge is one fee owed by one account. ID is the business key of the
// billing system: the idempotency key here and at the core-banking API.
type Charge struct {
	ID        string
	AccountID string
	Amount    Money
	Type      Type
	// DueDate is a calendar date, at midnight UTC.
	DueDate time.Time
}

// Fingerprint identifies the business payload under f's key: the same ID
// with another fingerprint is a different charge reusing an id, a
// conflict. A nil f gives the unkeyed fingerprint (tests; see
// idempotency.Fingerprinter for why production keys it).
func (c Charge) Fingerprint(f *idempotency.Fingerprinter) string {
	return f.Sum(c.FingerprintParts()...)
}

// FingerprintParts are what the fingerprint covers: account, amount,
// currency, type and due date.
func (c Charge) FingerprintParts() []string {
	return []string{c.AccountID, strconv.FormatInt(c.Amount.Minor, 10), string(c.Amount.Currency), string(c.Type), c.DueDate.Format(time.DateOnly)}
}

// DebitRequest is the request that debits c; every attempt sends the same
// one, keyed by the charge id.
func (c Charge) DebitRequest() DebitRequest {
	return c.DebitRequestFor(1)
}

// DebitRequestFor is the debit request of the charge's key generation gen
// (see BankKey).
func (c Charge) DebitRequestFor(gen int) DebitRequest {
	return DebitRequest{
		IdempotencyKey: BankKey(c.ID, gen),
		AccountID:      c.AccountID,
		Amount:         c.Amount,
		ChargeType:     c.Type,
		Narrative:      fmt.Sprintf("%s %s", c.Type, c.DueDate.Format(time.DateOnly)),
	}
}

// LogValue masks the account number so that no log line ever holds it
// whole, and shows the charge id as every view does (ShowID, with the
// charge's own account): an id holding the account is masked too.
func (c Charge) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("charge_id", ShowID(c.ID, c.AccountID)),
		slog.String("account", MaskAccount(c.AccountID)),
		slog.String("amount", c.Amount.String()),
		slog.String("type", string(c.Type)),
		slog.String("due_date", c.DueDate.Format(time.DateOnly)),
	)
}

// MaskAccount keeps the last four characters of an account number and
// masks the rest; an account of four characters or fewer is masked whole.
func MaskAccount(acct string) string {
	r := []rune(acct)
	if len(r) <= 4 {
		return "****"
	}
	out := make([]rune, len(r))
	for i := range r {
		if i < len(r)-4 {
			out[i] = '*'
		} else {
			out[i] = r[i]
		}
	}
	return string(out)
}

// Status is the recorded result of a charge.
type Status string

// The recorded results.
const (
	// Debited: the debit succeeded and the notification was sent.
	Debited Status = "DEBITED"
	// DebitedNotificationFailed: the debit succeeded and the notification
	// did not. Money moved; the debit is never retried or reversed for it.
	DebitedNotificationFailed Status = "DEBITED_NOTIFICATION_FAILED"
	// Failed: the core-banking system declined the debit permanently.
	Failed Status = "FAILED"
	// RetryScheduled: the debit was declined with a code the retry
	// schedule retries; the charge waits for its next attempt (WAITING).
	RetryScheduled Status = "RETRY_SCHEDULED"
	// NoticeSent: the advance notice went out; the charge waits for the
	// notice's lead to pass before the debit (WAITING).
	NoticeSent Status = "NOTICE_SENT"
)

// MaskText masks what may be an account number in text that came from
// outside (a bank's error message): every occurrence of the given account
// numbers, as written or in groups (joining characters '-', ' ', '.', '/',
// '_' and ':' skipped: "123-4567" for the account 1234567), and every
// number of 8 or more digits — also when written in groups joined by one
// separator, '-', ' ', '.', '/', '_' or ':' ("0012-3456-7890",
// "0012.3456.7890", "0012_3456_7890") — keeps its last four digits. A date
// (2026-11-30, 30/11/2026, 2026.11.30, 30.11.2026) is left alone. Our own
// references and ids are not passed through it.
//
// Digit groups joined by single separators form a cluster; within it each
// run of groups joined by the same separator is a number on its own, and
// runs that meet share their boundary group ("0012-3456 7890" is read as
// both 0012-3456 and 3456 7890, so "****-**** 7890"): no way of reading
// the cluster leaves 8 or more digits of one number in clear. A date's
// digits are masked only when another number of 8 or more digits runs
// through them ("2026-11-30 12345678" reads 30 12345678 too).
func MaskText(text string, accounts ...string) string {
	// A digit of another script (full-width ０-９, Arabic-Indic, …) is
	// read as a digit by whoever reads it: it is written as its ASCII
	// digit, so it is masked as one.
	text = asciiDigits(text)
	// Both are found in text as it came: an account masked first must not
	// break a longer number into pieces too short to mask (nor the other
	// way round).
	var mask []byte     // per byte of text: keep, star or drop
	var flatText string // text with joining characters left out (flattenAt)
	var flatAt []int    // where each byte of flatText is in text
	mark := func(at int, m byte) {
		if mask == nil {
			mask = make([]byte, len(text))
		}
		mask[at] = max(mask[at], m)
	}
	for _, a := range accounts {
		if len(a) < 4 {
			continue
		}
		n := max(utf8.RuneCountInString(a)-4, 0) // runes to mask
		if n == 0 {
			n = utf8.RuneCountInString(a) // four or fewer: all of it
		}
		for from := 0; ; {
			i := strings.Index(text[from:], a)
			if i < 0 {
				break
			}
			at := from + i
			for r := 0; r < n; r++ {
				_, w := utf8.DecodeRuneInString(text[at:])
				mark(at, maskStar)
				for k := 1; k < w; k++ {
					mark(at+k, maskDrop)
				}
				at += w
			}
			_, w := utf8.DecodeRuneInString(text[from+i:])
			from += i + w
		}
		// And written in groups ("0012-3456-7890", "123 4567",
		// "0012_3456_7890"): the account's characters found in text
		// with joining characters skipped, all but its last four masked.
		flatAccount := flatten(a)
		if len(flatAccount) < 4 {
			continue
		}
		if flatAt == nil {
			flatText, flatAt = flattenAt(text)
		}
		n = max(utf8.RuneCountInString(flatAccount)-4, 0)
		if n == 0 {
			n = utf8.RuneCountInString(flatAccount)
		}
		for from := 0; ; {
			i := strings.Index(flatText[from:], flatAccount)
			if i < 0 {
				break
			}
			at := from + i
			for r := 0; r < n; r++ {
				_, w := utf8.DecodeRuneInString(flatText[at:])
				mark(flatAt[at], maskStar)
				for k := 1; k < w; k++ {
					mark(flatAt[at+k], maskDrop)
				}
				at += w
			}
			_, w := utf8.DecodeRuneInString(flatText[from+i:])
			from += i + w
		}
	}
	for i := 0; i < len(text); {
		if !isDigit(text[i]) {
			i++
			continue
		}
		groups, seps := clusterAt(text, i)
		for _, at := range maskedDigits(groups, seps) {
			mark(at, maskStar)
		}
		i = groups[len(groups)-1].end
	}
	if mask == nil {
		return text
	}
	b := make([]byte, 0, len(text))
	for i := range len(text) {
		switch mask[i] {
		case maskKeep:
			b = append(b, text[i])
		case maskStar:
			b = append(b, '*')
		}
	}
	return string(b)
}

// What MaskText does with a byte: keeps it, writes '*' for it (the first
// byte of a masked rune) or drops it (the rest of a masked rune).
const (
	maskKeep byte = iota
	maskStar
	maskDrop
)

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// asciiDigits is s with every decimal digit of another script written as
// the ASCII digit of its value.
func asciiDigits(s string) string {
	if !strings.ContainsFunc(s, otherDigit) {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		if otherDigit(r) {
			b.WriteByte('0' + byte(digitValue(r)))
		} else {
			b.WriteRune(r)
		}
	}
	return b.String()
}

func otherDigit(r rune) bool { return r > 0x7f && unicode.IsDigit(r) }

// digitValue is the value of r, a decimal digit (Unicode Nd): each range
// of the table runs from a zero in blocks of ten.
func digitValue(r rune) int {
	for _, g := range unicode.Nd.R16 {
		if rune(g.Lo) <= r && r <= rune(g.Hi) {
			return int(r-rune(g.Lo)) % 10
		}
	}
	for _, g := range unicode.Nd.R32 {
		if rune(g.Lo) <= r && r <= rune(g.Hi) {
			return int(r-rune(g.Lo)) % 10
		}
	}
	return 0
}

// isJoiner: a character that joins the groups of a number as written
// ("0012-3456-7890", "0012 3456 7890", "0012_3456_7890", "12:34:56:78"),
// skipped where an account is looked for.
func isJoiner(c byte) bool { return isSeparator(c) || c == '_' || c == ':' }

// flatten is s without its joining characters (isJoiner).
func flatten(s string) string {
	f, _ := flattenAt(s)
	return f
}

// flattenAt is s without its joining characters, and where each byte of
// the result is in s.
func flattenAt(s string) (string, []int) {
	b := make([]byte, 0, len(s))
	at := make([]int, 0, len(s))
	for i := 0; i < len(s); i++ {
		if !isJoiner(s[i]) {
			b = append(b, s[i])
			at = append(at, i)
		}
	}
	return string(b), at
}

// span is one group of digits, text[start:end].
type span struct{ start, end int }

func (g span) len() int { return g.end - g.start }

// clusterAt reads the digit groups starting at text[i], each joined to the
// next by exactly one separator (isSeparator, any mix of them);
// seps[k] joins groups[k] and groups[k+1].
func clusterAt(text string, i int) (groups []span, seps []byte) {
	for {
		start := i
		for i < len(text) && isDigit(text[i]) {
			i++
		}
		groups = append(groups, span{start, i})
		if i+1 >= len(text) || !isDigit(text[i+1]) || !isSeparator(text[i]) {
			return groups, seps
		}
		seps = append(seps, text[i])
		i++
	}
}

func isSeparator(c byte) bool {
	return c == '-' || c == ' ' || c == '.' || c == '/' || c == '_' || c == ':'
}

// maskedDigits are the offsets of the cluster's digits to mask: for each
// run of groups joined by the same separator (a lone group is a run) that
// has 8 or more digits and is not a date, every digit but its last four.
func maskedDigits(groups []span, seps []byte) []int {
	var masked []int
	for a := 0; a < len(groups); {
		b := a // the run is groups[a..b]
		for b < len(seps) && seps[b] == seps[a] {
			b++
		}
		run := groups[a : b+1]
		digits := 0
		for _, g := range run {
			digits += g.len()
		}
		if digits >= 8 && !isDate(run) {
			n := digits - 4
			for _, g := range run {
				for at := g.start; at < g.end && n > 0; at++ {
					masked = append(masked, at)
					n--
				}
			}
		}
		if b == a {
			break // a lone group: the cluster has no separator
		}
		a = b // the next run starts at this one's last group
		if a == len(groups)-1 {
			break
		}
	}
	return masked
}

// isDate: three groups shaped as yyyy-mm-dd or dd-mm-yyyy (with any one
// of the separators).
func isDate(run []span) bool {
	if len(run) != 3 || run[1].len() != 2 {
		return false
	}
	return run[0].len() == 4 && run[2].len() == 2 || run[0].len() == 2 && run[2].len() == 4
}

// MaxOutsideText bounds text from outside (a bank's or a notifier's
// answer) wherever it is kept or shown: records, DLQ reasons, logs.
const MaxOutsideText = 1024

// Untrusted makes text from outside fit to keep and to show: control
// characters (terminal escapes, line breaks) dropped, account numbers
// masked as MaskText does, and cut to MaxOutsideText bytes.
func Untrusted(text string, accounts ...string) string {
	return Clip(MaskText(Printable(text), accounts...), MaxOutsideText)
}

// ShowID is an identifier from outside — a charge id, a bank's reference
// — as every view shows it (a list, its detail, a body, a report): whole
// when it has an id's form (1-128 characters of A-Z a-z 0-9 . _ : / -)
// and carries no account-like run; otherwise masked as MaskText masks text
// and cut to 128 bytes. An account-like run is one of the given accounts,
// or digits that read as an account once a leading date of their group
// (2026-11 or 2026-11-30) is left out (accountLikeRun: 8 or more in a row,
// or grouped as accounts are). So "CHG-2026-11-000123",
// "CHG-2026-11-30-0001" and "CHG-adc04251-033" are shown as they are
// everywhere, and "CHG-0012-3456-7890", "CHG-001234567890" or
// "445566778899 INR" keep only their last four digits everywhere.
//
// In an id '_' and ':' join digit groups as '-' does: "CHG_0012_3456_7890"
// and "CHG:0012:3456:7890" are masked as "CHG-0012-3456-7890" is (the
// joining characters kept), and "CHG_2026_11_30_0001" is shown whole.
func ShowID(id string, accounts ...string) string {
	id = Printable(id)
	if !chargeIDPattern.MatchString(id) {
		return Clip(MaskText(id, accounts...), 128)
	}
	joined := strings.NewReplacer("_", "-", ":", "-").Replace(id)
	if !holdsAny(id, accounts) && !accountLikeRun(joined) {
		return id
	}
	// An id's form is ASCII: MaskText writes one byte for each byte.
	m := MaskText(joined, accounts...)
	if len(m) != len(id) {
		return Clip(MaskText(id, accounts...), 128)
	}
	b := []byte(id)
	for i := range b {
		if m[i] == '*' {
			b[i] = '*'
		}
	}
	return string(b)
}

// ShowBankKey is a bank key (BankKey: a charge id, with "~n" from the
// second generation on) as every view shows it: its charge id as ShowID
// shows it, its generation as it is.
func ShowBankKey(key string, accounts ...string) string {
	if i := strings.LastIndexByte(key, '~'); i > 0 {
		if gen := key[i+1:]; gen != "" && len(gen) <= 9 && strings.Trim(gen, "0123456789") == "" {
			return ShowID(key[:i], accounts...) + key[i:]
		}
	}
	return ShowID(key, accounts...)
}

// ShowRef is a bank's reference (a posting's, a record's) as every view
// shows it: as ShowID shows an id, but a long run of digits is not read as
// an account — a core-banking or clearing reference (CBS0000000003,
// UTR20261130000123456) is its digits, and it is what the bank is asked
// about. It is masked where it holds one of the given accounts (the
// posting's own) or has no reference's form (MaskText then).
func ShowRef(ref string, accounts ...string) string {
	ref = Printable(ref)
	if chargeIDPattern.MatchString(ref) && !holdsAny(ref, accounts) {
		return ref
	}
	return Clip(MaskText(ref, accounts...), 128)
}

// holdsAny reports whether s holds one of the accounts (of 4 characters
// or more: MaskText's own floor), as written or in groups: joining
// characters ('-', ' ', '.', '/', '_', ':') skipped in both.
func holdsAny(s string, accounts []string) bool {
	flat := flatten(s)
	for _, a := range accounts {
		if len(a) >= 4 && strings.Contains(s, a) {
			return true
		}
		if fa := flatten(a); len(fa) >= 4 && strings.Contains(flat, fa) {
			return true
		}
	}
	return false
}

// accountLikeRun reports whether a digit cluster of id reads as an
// account, its leading date (datePrefix) left out: a group of 8 or more
// digits, or groups in an account's grouping (two of one length, or three
// or more all but the last of one length, 2 to 6, the last no longer; 8
// or more digits in all: 0012-3456, 0012-3456-7890, 001 234 567 890).
// Groups of differing lengths are an id's parts (CHG-adc04251-033).
func accountLikeRun(id string) bool {
	for i := 0; i < len(id); {
		if !isDigit(id[i]) {
			i++
			continue
		}
		groups, seps := clusterAt(id, i)
		i = groups[len(groups)-1].end
		rest := groups[datePrefix(id, groups, seps):]
		digits, grouped := 0, len(rest) >= 2
		for k, g := range rest {
			if g.len() >= 8 {
				return true
			}
			digits += g.len()
			// All but the last of one length; the last no longer, and of
			// the same length too where there are only two.
			last := k == len(rest)-1
			if l := rest[0].len(); (!last || len(rest) == 2) && g.len() != l || l < 2 || l > 6 || g.len() > l {
				grouped = false
			}
		}
		if grouped && digits >= 8 {
			return true
		}
	}
	return false
}

// datePrefix is how many of the cluster's first groups are a date: 2 for
// yyyy-mm, 3 for yyyy-mm-dd (joined by the same separator), 0 for none. A
// run of digits with no separator is never read as a date: 202611301234
// is an account's length.
func datePrefix(s string, groups []span, seps []byte) int {
	num := func(g span) int {
		n, _ := strconv.Atoi(s[g.start:g.end])
		return n
	}
	if len(groups) < 2 || groups[0].len() != 4 || groups[1].len() != 2 {
		return 0
	}
	if y, m := num(groups[0]), num(groups[1]); y < 1900 || y > 2199 || m < 1 || m > 12 {
		return 0
	}
	if len(groups) > 2 && seps[1] == seps[0] && groups[2].len() == 2 && num(groups[2]) >= 1 && num(groups[2]) <= 31 {
		return 3
	}
	return 2
}

// Printable drops control characters and invalid UTF-8: an escape
// sequence in an answer must not reach a log line or a terminal.
func Printable(s string) string {
	clean := true
	for _, r := range s {
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) || r == utf8.RuneError {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		switch {
		case r == '\t' || r == '\n' || r == '\r':
			b.WriteByte(' ')
		case r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) || r == utf8.RuneError:
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// Clip shortens text from outside to at most n bytes, cut on a rune
// boundary, marking a cut with "…".
func Clip(text string, n int) string {
	if len(text) <= n {
		return text
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(text[cut]) {
		cut--
	}
	return text[:cut] + "…"
}

// GenerationSeparator joins a charge id and its key generation. Charge ids
// cannot contain it (see ParseEvent), so no generation's key can equal
// another charge's id.
const GenerationSeparator = "~"

// BankKey is the core-banking idempotency key of generation gen of the
// charge: the charge id itself for the first, "<id>~<gen>" for the ones
// an operator opened after an explicit decline (whose answer is final at
// the bank under the old key).
func BankKey(chargeID string, gen int) string {
	if gen <= 1 {
		return chargeID
	}
	return chargeID + GenerationSeparator + strconv.Itoa(gen)
}

// DeclinedDetail reports whether a FAILED record's detail is an explicit
// decline by the bank (what the Service records for a *DeclineError, and
// for the last one of a retry schedule that ran out: "retries_exhausted: "
// and the decline), the only failure that may be retried under a new key
// generation.
func DeclinedDetail(detail string) bool {
	return strings.HasPrefix(strings.TrimPrefix(detail, RetriesExhaustedPrefix), declinedPrefix)
}

// EligibleForNewGeneration is the rule for idempotency.ReopenOptions: only
// a FAILED record whose failure was an explicit decline gets a new bank
// key; an ambiguous outcome never does (it is never FAILED in the first
// place, and a FAILED record of any other cause keeps its key).
//
// A hard decline (HardDecline: a closed or invalid account, a cancelled
// mandate…) is never presented again under a new key either, as the
// retry schedule never retries one: card and mandate schemes fine a
// re-presentment after it, and the account will not pay.
func EligibleForNewGeneration(r driver.Record) error {
	if r.State != driver.StateFailed || !DeclinedDetail(r.Detail) {
		return fmt.Errorf("%s failed with %q, not an explicit decline by the bank: a new key is only for a decline, whose answer is final under the old one", r.Key, Clip(r.Detail, 120))
	}
	if code := DeclineCode(r.Detail); code != "" {
		if why, hard := HardDecline(code); hard {
			return fmt.Errorf("%w: %s was declined %s (%s); it is never presented again under a new key", ErrHardDecline, r.Key, code, why)
		}
	}
	return nil
}

// ErrHardDecline: a new attempt refused because the bank's decline was a
// hard one (HardDecline).
var ErrHardDecline = errors.New("a hard decline")

// DeclineCode is the bank's decline code in a FAILED record's detail (a
// decline's text, or a retry schedule's last one), "" when the detail is
// not a decline.
func DeclineCode(detail string) string {
	rest, ok := strings.CutPrefix(strings.TrimPrefix(detail, RetriesExhaustedPrefix), declinedPrefix)
	if !ok {
		return ""
	}
	code, _, _ := strings.Cut(rest, ":")
	return strings.TrimSpace(code)
}
