package reconcile

// BreakForTest is a break of kind whose record is open to a debit (open)
// and whose posting is not the charge's (mismatch), for tests of Collects.
func BreakForTest(kind Kind, open, mismatch bool) Break {
	return Break{Kind: kind, open: open, mismatch: mismatch}
}
