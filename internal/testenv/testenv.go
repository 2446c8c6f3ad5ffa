// Package testenv holds the one rule for tests that need a server: when it
// cannot be reached, the test fails in CI (CI=true) and skips elsewhere,
// saying how to start it.
package testenv

import (
	"os"
	"testing"
)

// Unreachable ends the test because a server it needs is not there.
func Unreachable(t testing.TB, msg string) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}
