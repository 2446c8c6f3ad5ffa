package reconcile

import (
	"slices"
	"strings"
	"unicode"

	"github.com/finedge/idempotent-consumer/app/charge"
)

// ShowKey is a bank key (or the charge id a report files a posting under)
// as a report, the console and the command line show it, masked by value
// with the one rule for accounts (charge.MaskAccount: the last four kept).
// A key of the form the collector sends (ChargeOf: a charge id, alone or
// with a generation suffix, "CHG-1~2") names a charge, not a customer, and
// is shown as it is, unless its charge id looks like an account number (no
// letter, and 8 or more digits, plain or grouped as charge.MaskText reads
// them: a payer's account sent as the end-to-end id) or charge.ShowID, the
// rule of every view for a charge id, would mask it ("CHG-001234567890",
// "CHG-0012-3456-7890", the row's account grouped). Any other key — a
// foreign end-to-end id of another form, an internal key — is masked; and
// so is any key that is, or holds, one of accounts (the row's full
// accounts).
func ShowKey(key string, accounts ...string) string {
	if key == "" {
		return key
	}
	for _, a := range accounts {
		if a != "" && (key == a || len(a) >= 8 && strings.Contains(key, a)) {
			return charge.MaskAccount(key)
		}
	}
	id, _ := SplitBankKey(key)
	// Its charge id shown by the rule of every view (charge.ShowID, the
	// row's accounts): an id holding the account grouped ("CHG-123-4567")
	// or an account's digits ("CHG-001234567890") is masked, as dlq list
	// masks it.
	if _, ours := ChargeOf(key); ours && !accountLike(id) && charge.ShowID(id, accounts...) == id {
		return key
	}
	return charge.MaskAccount(key)
}

// accountLike: s has no letter, and charge.MaskText (the rule for text from
// outside) would mask some of it — a run of 8 or more digits, plain or
// grouped ("123456789012", "0012-3456-7890"). A charge id with a letter
// ("CHG-2026-11-000123") is read as an id.
func accountLike(s string) bool {
	return strings.IndexFunc(s, unicode.IsLetter) < 0 && charge.MaskText(s) != s
}

// masked reports whether id is a masked charge id (as ShowKey gives it): a
// charge id never holds '*'.
func masked(id string) bool { return strings.Contains(id, "*") }

// wants reports whether the run is for id's charge: every charge when no
// ChargeID is set; else the one named, as read or as shown masked (the id
// a report gave: then every charge shown so, which Resolve tells apart by
// break id).
func (o Options) wants(id string) bool {
	return o.ChargeID == "" || id == o.ChargeID || masked(o.ChargeID) && charge.MaskAccount(id) == o.ChargeID
}

// masked is b as it is shown: its charge id and bank keys by ShowKey, and
// wherever a value shown masked
// occurs in its texts (detail, action, the postings' references and where
// they were read) it is masked there too. Masking a break masked already
// changes nothing, so a report kept before keys were masked is masked when
// read (ReadReportFile). The break's id is not changed: it is the digest of
// the values as read.
func (b Break) masked() Break {
	shown := map[string]string{} // value as read → as shown, where they differ
	show := func(v string) string {
		s := ShowKey(v, b.accounts...)
		if s != v {
			shown[v] = s
		}
		return s
	}
	b.ChargeID = show(b.ChargeID)
	b.BankKeys = slices.Clone(b.BankKeys)
	for i := range b.BankKeys {
		b.BankKeys[i] = show(b.BankKeys[i])
	}
	b.Posted = slices.Clone(b.Posted)
	for i := range b.Posted {
		b.Posted[i].BankKey = show(b.Posted[i].BankKey)
	}
	for _, a := range b.accounts {
		if a != "" {
			shown[a] = charge.MaskAccount(a)
		}
	}
	// Longest first: a value inside a longer one is masked as part of it.
	// Values of fewer than 4 characters (a key "X1") are masked where they
	// stand, not searched for in prose.
	var raws []string
	for v := range shown {
		if len(v) >= 4 {
			raws = append(raws, v)
		}
	}
	if len(raws) == 0 {
		return b
	}
	slices.SortFunc(raws, func(x, y string) int {
		if d := len(y) - len(x); d != 0 {
			return d
		}
		return strings.Compare(x, y)
	})
	text := func(s string) string {
		for _, v := range raws {
			s = strings.ReplaceAll(s, v, shown[v])
		}
		return s
	}
	b.Detail, b.Action, b.Reference = text(b.Detail), text(b.Action), text(b.Reference)
	for i := range b.Posted {
		b.Posted[i].Reference, b.Posted[i].Where = text(b.Posted[i].Reference), text(b.Posted[i].Where)
	}
	return b
}

// Masked is r as it is shown: every break's charge id, bank keys and the
// values in its texts masked by value (ShowKey). A run's report is masked
// already; a report kept by an earlier version is masked by this (and
// ReadReportFile does it).
func (r Report) Masked() Report {
	r.Breaks = slices.Clone(r.Breaks)
	for i := range r.Breaks {
		r.Breaks[i] = r.Breaks[i].masked()
	}
	return r
}
