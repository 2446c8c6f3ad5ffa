package approval

import (
	"github.com/finedge/idempotent-consumer/app/service/foureyes"
	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
)

// The four-eyes settings kept in the backend (service/foureyes), under the
// names the command line and the console use.
type (
	Settings = foureyes.Settings
	Operator = foureyes.Operator
	Kept     = foureyes.Kept
)

// DefaultMaxTTL bounds --approval-ttl where the settings do not say.
const DefaultMaxTTL = foureyes.DefaultMaxTTL

// SettingsPrefix begins the keys of the settings' records.
const SettingsPrefix = foureyes.SettingsPrefix

// ErrSettings: see foureyes.ErrSettings.
var ErrSettings = foureyes.ErrSettings

// OpenKept reads and writes the settings kept in store.
func OpenKept(store driver.Store, clock idempotency.Clock) (*Kept, error) {
	return foureyes.OpenKept(store, clock)
}

// PolicyOf is the policy s keeps.
func PolicyOf(s Settings) (Policy, error) { return ParsePolicy(s.Policy) }
