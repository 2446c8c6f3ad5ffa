// Package corebank is the client of the bank's core-banking debit API: the
// charge.Debiter and charge.Enquirer adapters (Client), the API's wire
// format (wire.go), and the one table that classifies the bank's answers.
// It holds nothing simulated: the bank simulator is package corebanksim.
package corebank
