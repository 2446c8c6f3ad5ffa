// Package statement reads and writes the bank's own account statements for
// reconciliation: ISO 20022 camt.053 (BankToCustomerStatement, versions
// .001.02 to .001.13) and camt.054 (BankToCustomerDebitCreditNotification),
// and a documented CSV export. Reading is streamed: memory stays bounded
// whatever the number of entries (an entry's transactions are decoded one
// at a time, and at most 1,000 of them are held until the entry's end) and
// whatever the length of an element: the text of an element kept is at
// most 64 KiB for a narrative (Ustrd — all of a transaction's together —,
// AddtlTxInf, AddtlNtryInf) and 1 KiB for the rest (ids, references,
// amounts, dates, codes); any single piece of XML (a text, a tag, a
// comment, a CDATA section) at most 1 MiB of the file, skipped or not;
// elements nested at most 256 deep. Past a limit the file is refused with
// a *FormatError naming the element. (The 1 MiB guard follows XML's
// lexical structure ahead of encoding/xml, which has no limits of its own;
// inside a DOCTYPE, which a camt message never has, it is approximate.)
// Amounts are decimal text turned into integer minor units of
// the currency, never a float.
//
// A statement is read from one of two sides (Options.CollectionAccount):
//   - the fee collection account's statement: each posting of ours is a
//     credit (CRDT) entry on that account whose debtor account
//     (RltdPties/DbtrAcct/Id/IBAN or /Othr/Id) is the customer's;
//   - the customers' own accounts (one Stmt or Ntfctn per account): each
//     posting of ours is a debit (DBIT) entry on that Acct.
//
// The CSV export holds only the customers' debits and their reversals:
// every row is a posting, whichever side is asked for.
//
// Read detects the format from the content and hands each posting to a
// callback; a malformed file gives a *FormatError naming the file, the line
// and the element. WriteCamt053 and WriteCSV write postings back (the bank
// simulator's export of its ledger).
//
// Only booked entries (status BOOK) are postings. A reversal (RvslInd true)
// carries the indicator opposite to what it reverses (ISO 20022's rule)
// and cancels that posting; so does a return: a transaction in the other
// direction with return information (TxDtls/RtrInf/Rsn/Cd, the reason
// code: AC04, AM04, MD06, …), kept in Posting.ReturnReason, or — as many
// banks book a return, without RtrInf — whose bank transaction code
// (TxDtls/BkTxCd, else Ntry/BkTxCd: Domn PMNT, Fmly IDDT or RDDT,
// SubFmlyCd UPDD, PRDD or RCDD) is a direct debit's return, its reason
// code then read from the narrative when one stands there as a word. Any
// other entry in the other direction is not ours and is skipped. A
// reversal without a bank key (EndToEndId NOTPROVIDED: a bank's own
// storno) is handed over with an empty BankKey only with
// Options.UnkeyedReversals.
//
// A file whose statements are all of one account that holds only credits
// from other accounts (each naming its debtor's account), read without
// Options.CollectionAccount, is refused with a *CollectionSideError: it is
// a collection account's statement, and read as the customers' own it
// would have no posting at all.
package statement

import (
	"time"

	"github.com/finedge/idempotent-consumer/app/charge"
)

// Posting is one transaction of ours read from a statement: a debit of a
// customer's account under a bank key, or the reversal of one.
type Posting struct {
	// BankKey is the core-banking idempotency key the debit was sent
	// under (TxDtls/Refs/EndToEndId): the charge id, or "<id>~N" for
	// generation N (charge.BankKey). Empty only for a reversal read with
	// Options.UnkeyedReversals.
	BankKey string
	// Account is the customer's account: the IBAN in its electronic form
	// (spaces removed, upper case), or Othr/Id as written.
	Account string
	// Amount is the transaction's amount (TxDtls/Amt or
	// AmtDtls/TxAmt/Amt; a single-transaction entry's is the entry's Amt).
	Amount charge.Money
	// Reversal: this transaction cancels an earlier posting of BankKey:
	// a reversal (RvslInd true), or a return (Return).
	Reversal bool
	// Return: the reversal is a return (TxDtls/RtrInf): the debit came
	// back, in the direction opposite to it, with or without RvslInd.
	// ReturnReason is its ISO 20022 return reason code (RtrInf/Rsn/Cd,
	// else /Prtry: "AC04", "AM04", "MD06"); empty when the bank gave none.
	Return       bool
	ReturnReason string
	// BookingDate is the entry's BookgDt (Dt, or the date of DtTm), at
	// midnight UTC.
	BookingDate time.Time
	// Reference is the bank's own reference: the transaction's
	// Refs/AcctSvcrRef, else the entry's AcctSvcrRef.
	Reference string
	// Narrative is the remittance text (RmtInf/Ustrd, several joined by
	// a space, else AddtlTxInf, else — for an entry of one transaction —
	// the entry's AddtlNtryInf): where the bank echoes the debit's
	// narrative ("SMS_ALERT_FEE 2026-12-01"). May be empty.
	Narrative string
	// File names the statement file it was read from (reconcile.ReadFiles
	// sets it: the file's place in the list and its name): two postings of
	// one file are two postings, whatever their references say; the same
	// posting read from two files (a camt.054 beside the camt.053) is one.
	File string
	// Where names the posting in its file for a person: "FILE:41: entry
	// 12, transaction 2" (the line of the TxDtls; entries counted from 1
	// in the statements read) or "FILE: line 7".
	Where string
}

// Period is a statement's period (camt's FrToDt), half-open [From, To).
// Zero when the file does not say.
type Period struct {
	From, To time.Time
}

// Header is what a file said about itself.
type Header struct {
	// Format names the file's message: "camt.053.001.08",
	// "camt.054.001.02", "csv".
	Format string
	// Period covers every Stmt/Ntfctn of the file that was read (the
	// earliest From, the latest To); zero when none said.
	Period Period
	// Entries counts the booked entries read (of any direction), and
	// Postings the postings of ours handed to the callback.
	Entries, Postings int
	// Unkeyed counts the booked transactions in the direction of ours
	// that have no bank key (an entry without TxDtls, an EndToEndId
	// missing or NOTPROVIDED): not postings of ours, skipped.
	Unkeyed int
}

// Options says how to read a statement.
type Options struct {
	// CollectionAccount, when set, reads the statement as the fee
	// collection account's: only its Stmt/Ntfctn (matched by IBAN or
	// Othr/Id) is read; postings are its CRDT entries. Empty: the
	// customers' own accounts; postings are DBIT entries.
	CollectionAccount string
	// Location is the bank's time zone, where a camt FrToDt written
	// without an offset is read: FrDtTm/ToDtTm without Z or ±hh:mm are
	// its wall-clock times, FrDt/ToDt its days (midnight to midnight
	// there). Nil: UTC (as before). A time with an offset keeps its own.
	// It does not move BookingDate: that is the day as the bank wrote it
	// (BookgDt/Dt, or the date of BookgDt/DtTm as written), whatever
	// the zone.
	Location *time.Location
	// UnkeyedReversals hands fn, with an empty BankKey, each booked
	// reversal or return (camt) that has no bank key (EndToEndId missing
	// or NOTPROVIDED, or an entry without TxDtls): a bank's own storno
	// names the posting it reverses by its bank reference (Refs/AcctSvcrRef,
	// else the entry's AcctSvcrRef), and the caller pairs it by that
	// reference (reconcile.Run does) or says it could not. Without it they
	// are counted in Header.Unkeyed and skipped.
	UnkeyedReversals bool
}

// returnReasons are the ISO 20022 return reason codes
// (ExternalReturnReason1Code) a debit most often comes back with.
var returnReasons = map[string]string{
	"AC01": "incorrect account number",
	"AC04": "closed account number",
	"AC06": "blocked account",
	"AC13": "invalid debtor account type",
	"AG01": "transaction forbidden on this account",
	"AG02": "invalid bank operation code",
	"AM04": "insufficient funds",
	"AM05": "duplication",
	"BE05": "unrecognised initiating party",
	"CNOR": "creditor bank is not registered",
	"DNOR": "debtor bank is not registered",
	"FF01": "invalid file format",
	"MD01": "no mandate",
	"MD02": "missing mandatory information in mandate",
	"MD06": "refund request by end customer",
	"MD07": "end customer deceased",
	"MS02": "reason not specified, customer generated",
	"MS03": "reason not specified, agent generated",
	"NARR": "reason given as narrative",
	"RC01": "bank identifier incorrect",
	"RR01": "missing debtor account or identification",
	"RR02": "missing debtor name or address",
	"RR03": "missing creditor name or address",
	"RR04": "regulatory reason",
	"SL01": "specific service offered by debtor agent",
}

// ReturnReasonText names a return reason code for a person: "AC04 (closed
// account number)", the code alone when it is not one of the common ones,
// "no reason code" when empty.
func ReturnReasonText(code string) string {
	if code == "" {
		return "no reason code"
	}
	if t, ok := returnReasons[code]; ok {
		return code + " (" + t + ")"
	}
	return code
}
