package banksim

// LedgerSynopsis is corebank ledger's help. corebank ledger rather than
// status --bank: the ledger is the simulator's admin API (GET /v1/ledger),
// which no real core-banking system offers; status reads our own backend,
// and should not seem to promise a bank's books.
const LedgerSynopsis = `corebank ledger [flags]

Reads the core-banking SIMULATOR's ledger (GET /v1/ledger: its admin API;
a real bank has none, hence here and not in status), one line per
posting: bank key, masked account, amount, posting time, reference. It
authenticates as serve does, with serve's own flags and IC_COREBANK_*
variables (mutual TLS files, the OAuth2 client; the token is fetched from
--corebank-oauth-token-url, by default the simulator's /oauth/token), so
no curl and no hand-minted token is needed.`

// StatementSynopsis is corebank statement's help.
const StatementSynopsis = `corebank statement --from D --to D [--format camt053|csv] [--collection-account ID] [--out FILE] [flags]

Exports the core-banking SIMULATOR's ledger as the bank statement of the
period [--from, --to) (GET /v1/statement: its admin API): camt.053 of the
fee collection account (--collection-account, default FEES-COLLECTION) or
CSV; each posting a credit, each reversal (corebank reverse) a debit with
RvslInd, a lost posting (corebank drop) left out. reconcile reads it
with the same --collection-account. --out writes the file owner-only
(0600), whole by rename; without it the statement goes to stdout. It
authenticates as corebank ledger does.`

// MarkSynopsis is the help of corebank reverse and corebank drop.
var MarkSynopsis = map[string]string{"reverse": `corebank reverse KEY [flags]

Has the core-banking SIMULATOR reverse the posting under bank key KEY
(POST /v1/ledger/KEY/reverse): a statement of a period holding now then
carries a reversal of it. The ledger keeps the posting (marked
reversedAt). For demos and drills of reconciliation. It authenticates as
corebank ledger does.`, "drop": `corebank drop KEY [flags]

Has the core-banking SIMULATOR lose the posting under bank key KEY
(POST /v1/ledger/KEY/drop): its statements leave it out, which
reconcile reports as a break. The ledger keeps the posting (marked
dropped). For demos and drills of reconciliation. It authenticates as
corebank ledger does.`}
