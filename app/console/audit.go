package console

import "github.com/finedge/idempotent-consumer/app/audit"

// AuditEntry is one line of the audit trail (the command line writes the
// same lines to the same file).
type AuditEntry = audit.Entry

// AuditLog is the audit trail: an append-only, hash-chained file of
// AuditEntry, one JSON line each, written and synced before the action's
// answer is sent (mode 0600), shared with the command line.
type AuditLog = audit.Trail

// OpenAuditLog opens (or creates, mode 0600) the audit file at path.
func OpenAuditLog(path string) (*AuditLog, error) { return audit.Open(path) }
