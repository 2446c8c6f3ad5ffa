// Package foureyes keeps the installation's four-eyes settings in the
// backend, beside the records: the policy (as written; service/approval
// parses it), where the audit trail is, how people sign in, and the public
// keys that vouch for the trail's lines — versioned records signed by the
// console's key. It sits below service/approval and service/operate, so
// that the one function every reopen goes through reads them too.
package foureyes

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/finedge/idempotent-consumer/app/audit"
	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
)

// Settings are the installation's four-eyes settings: the policy, where
// the audit trail is, how people sign in, and the public keys that vouch
// for the trail's lines. They are kept in the backend itself, beside the
// charges' records (records of their own under SettingsPrefix), so that
// every process that can move money reads them from where the money's
// records are — whatever flags, environment or files it was given. A
// process started without --audit-file or --approval-required still finds
// the policy there.
//
// Each change is a new version, a record claimed once (two writers cannot
// both write version n), signed by the console's key (ConsoleKey of the
// version before: only its holder changes them, and a new console key is
// signed by the old one). The first version is trusted as found (it pins
// the console's key); every process checks the whole chain on reading.
type Settings struct {
	Version int    `json:"version"`
	Policy  string `json:"policy"`
	// MaxTTL bounds --approval-ttl (how long a proposal waits).
	MaxTTL string `json:"maxTTL"`
	// Trail is the audit trail's absolute path.
	Trail string `json:"trail"`
	// SignIn is the console's sign-in: "token" or "proxy". With proxy
	// sign-in the identity provider names the person, and the command
	// line does not act (nobody can prove who runs it).
	SignIn string `json:"signIn"`
	// ConsoleKey is the console's public key (audit.PublicKeyString): it
	// signs the console's audit lines and the next settings.
	ConsoleKey string `json:"consoleKey"`
	// Operators are the people who act on the command line: their public
	// keys (their private keys are files of their own). Retired are keys
	// that no longer act, kept to check the lines they signed (Until: the
	// trail's last seq when they were retired).
	Operators []Operator `json:"operators,omitempty"`
	Retired   []Operator `json:"retired,omitempty"`
	By        string     `json:"by"`
	Why       string     `json:"why"`
	At        time.Time  `json:"at"`
	// Skips is the version before this one that was left unfinished (a
	// writer that died in its slot, or a row put there in the database),
	// which this one writes past; 0: none.
	Skips int `json:"skips,omitempty"`
	// Sig is the signature (base64) of the version without Sig, by the
	// ConsoleKey of the version before (its own, for the first).
	Sig string `json:"sig,omitempty"`
}

// Operator is one person's public key.
type Operator struct {
	Name  string `json:"name"`
	Role  string `json:"role"`
	Key   string `json:"key"`
	Until int64  `json:"until,omitempty"`
}

// DefaultMaxTTL bounds --approval-ttl where the settings do not say.
const DefaultMaxTTL = 72 * time.Hour

// SettingsPrefix begins the keys of the settings' records.
const SettingsPrefix = driver.InternalKeyPrefix + "settings/v"

// settingsRetention keeps the settings' records for as long as there is
// a backend (a record's retention is counted from its last write).
const settingsRetention = 100 * 365 * 24 * time.Hour

// ErrSettings: the settings kept in the backend are not what their chain
// of signatures vouches for (edited in the database), or cannot be
// changed by this process (not the console's key).
var ErrSettings = errors.New("four-eyes settings")

// Requires says whether the kept policy names item (or "all", for the
// items it stands for): what service/operate asks before a reopen with a
// new attempt that no approval carries. service/approval parses the whole
// policy.
func (s Settings) Requires(item string) bool {
	for _, w := range strings.Split(s.Policy, ",") {
		w = strings.TrimSpace(w)
		if w == item || (w == "all" && item != "represent-hard-decline") {
			return true
		}
	}
	return false
}

// TTLBound is the longest --approval-ttl the settings allow.
func (s Settings) TTLBound() time.Duration {
	d, err := time.ParseDuration(s.MaxTTL)
	if err != nil || d <= 0 {
		return DefaultMaxTTL
	}
	return d
}

// Keyring is the public keys that vouch for the trail's lines: the
// console's, every operator's, every retired one's (to its Until).
func (s Settings) Keyring() (audit.Keyring, error) {
	r := audit.Keyring{}
	pub, err := audit.ParsePublicKey(s.ConsoleKey)
	if err != nil {
		return nil, fmt.Errorf("%w: the console key: %v", ErrSettings, err)
	}
	r.Add(audit.Key{Name: audit.ConsoleSigner, Pub: pub})
	for _, o := range slices.Concat(s.Retired, s.Operators) {
		pub, err := audit.ParsePublicKey(o.Key)
		if err != nil {
			return nil, fmt.Errorf("%w: %s's key: %v", ErrSettings, o.Name, err)
		}
		r.Add(audit.Key{Name: o.Name, Pub: pub, Until: o.Until})
	}
	return r, nil
}

// OperatorByKey is the operator whose public key pub is.
func (s Settings) OperatorByKey(pub ed25519.PublicKey) (Operator, bool) {
	want := audit.PublicKeyString(pub)
	for _, o := range s.Operators {
		if o.Key == want {
			return o, true
		}
	}
	return Operator{}, false
}

func (s Settings) signed() []byte {
	s.Sig = ""
	b, _ := json.Marshal(s)
	return b
}

// same says whether s and o keep the same settings (not counting who
// kept them, when and why).
func (s Settings) same(o Settings) bool {
	s.Version, s.Skips, s.By, s.Why, s.At, s.Sig = 0, 0, "", "", time.Time{}, ""
	o.Version, o.Skips, o.By, o.Why, o.At, o.Sig = 0, 0, "", "", time.Time{}, ""
	return bytes.Equal(s.signed(), o.signed())
}

// Kept is the settings kept in a backend.
type Kept struct {
	g *idempotency.Guard
}

// Getter reads a record (idempotency.Guard's Get).
type Getter interface {
	Get(ctx context.Context, key string) (driver.Record, error)
}

// Load reads the settings kept where g reads records (Kept.Load).
func Load(ctx context.Context, g Getter, pin ed25519.PublicKey) (Settings, bool, error) {
	return load(ctx, g, pin)
}

// OpenKept reads and writes the settings kept in store.
func OpenKept(store driver.Store, clock idempotency.Clock) (*Kept, error) {
	g, err := idempotency.NewGuard(store, idempotency.Options{Retention: settingsRetention, Clock: clock})
	if err != nil {
		return nil, err
	}
	return &Kept{g: g}, nil
}

func settingsKey(v int) string { return fmt.Sprintf("%s%08d", SettingsPrefix, v) }

// Load reads the kept settings, checking every version's signature
// against the key of the one before (and, with pin, that the console's
// key is the pinned one: this host's own word, out of the database's
// reach); ok is false where none were ever kept — an error under a pin.
func (k *Kept) Load(ctx context.Context, pin ed25519.PublicKey) (s Settings, ok bool, err error) {
	return load(ctx, k.g, pin)
}

// ErrUnfinished: a version of the settings is being written now, or was
// left unfinished (in the database): the settings cannot be told.
var ErrUnfinished = errors.New("four-eyes settings: a version is unfinished")

func load(ctx context.Context, g Getter, pin ed25519.PublicKey) (Settings, bool, error) {
	var prev *Settings
	for v := 1; ; v++ {
		rec, err := g.Get(ctx, settingsKey(v))
		if errors.Is(err, driver.ErrNotFound) {
			break
		}
		if err != nil {
			return Settings{}, false, fmt.Errorf("four-eyes settings in the backend: %w", err)
		}
		if rec.State != driver.StateDone {
			// Never "the one before is the last": a version hidden so
			// would roll the settings back. Only a later version that says
			// it skips this one (the console's, past a slot left
			// unfinished) goes on.
			next, err := g.Get(ctx, settingsKey(v+1))
			var after Settings
			if err != nil || next.State != driver.StateDone || json.Unmarshal([]byte(next.Detail), &after) != nil || after.Skips != v {
				return Settings{}, false, fmt.Errorf("%w: version %d is %s (being written now — try again — or left so in the database; the console's next start writes past it)", ErrUnfinished, v, rec.State)
			}
			continue
		}
		var cur Settings
		if err := json.Unmarshal([]byte(rec.Detail), &cur); err != nil {
			return Settings{}, false, fmt.Errorf("%w: version %d in the backend is not settings: %v", ErrSettings, v, err)
		}
		if cur.Version != v {
			return Settings{}, false, fmt.Errorf("%w: the record of version %d says it is version %d: edited in the database", ErrSettings, v, cur.Version)
		}
		by := cur.ConsoleKey
		if prev != nil {
			by = prev.ConsoleKey
		}
		pub, err := audit.ParsePublicKey(by)
		if err != nil {
			return Settings{}, false, fmt.Errorf("%w: version %d: the console key: %v", ErrSettings, v, err)
		}
		if pin != nil && (!pub.Equal(pin) || cur.ConsoleKey != audit.PublicKeyString(pin)) {
			return Settings{}, false, fmt.Errorf("%w: version %d is kept under the console key %s, and this host pins %s: the settings were replaced in the database, not by the console", ErrSettings, v, audit.KeyID(pub), audit.KeyID(pin))
		}
		sig, err := base64.StdEncoding.DecodeString(cur.Sig)
		if err != nil || !ed25519.Verify(pub, cur.signed(), sig) {
			return Settings{}, false, fmt.Errorf("%w: version %d is not signed by the console's key (%s): the settings were changed in the database, not by the console; restore them from the trail's settings lines", ErrSettings, v, audit.KeyID(pub))
		}
		if prev != nil && cur.Skips != 0 && cur.Skips != v-1 {
			return Settings{}, false, fmt.Errorf("%w: version %d says it skips version %d", ErrSettings, v, cur.Skips)
		}
		prev = &cur
	}
	if prev == nil {
		if pin != nil {
			return Settings{}, false, fmt.Errorf("%w: this host pins the console's key %s, so the backend must keep four-eyes settings signed by it, and it keeps none (deleted in the database?): nothing is done until the console's start keeps them again", ErrSettings, audit.KeyID(pin))
		}
		return Settings{}, false, nil
	}
	return *prev, true, nil
}

// Keep writes next as the next version, signed with key (the console's:
// the kept ConsoleKey, or any for the first version). It returns what was
// kept (Version, Sig set). Nothing is written if next keeps what is kept.
// A slot left unfinished (a writer that died, or a row put there in the
// database) is written past: the version after it says it skips it.
func (k *Kept) Keep(ctx context.Context, key ed25519.PrivateKey, next Settings) (Settings, bool, error) {
	pub := key.Public().(ed25519.PublicKey)
	cur, ok, err := k.Load(ctx, nil)
	var skip int
	if errors.Is(err, ErrUnfinished) {
		// Read what is kept up to the unfinished slot: the console's key
		// writes past it.
		if cur, ok, skip, err = k.upTo(ctx); err != nil {
			return Settings{}, false, err
		}
	}
	if err != nil {
		return Settings{}, false, err
	}
	if ok && cur.ConsoleKey != audit.PublicKeyString(pub) {
		return Settings{}, false, fmt.Errorf("%w: they are kept under the console key %s, and this key is %s: only the console's key changes them", ErrSettings, keyIDOf(cur.ConsoleKey), audit.KeyID(pub))
	}
	if next.ConsoleKey == "" {
		next.ConsoleKey = audit.PublicKeyString(pub)
	}
	if ok && skip == 0 && cur.same(next) {
		return cur, false, nil
	}
	for attempt := 0; attempt < 3; attempt++ {
		next.Version, next.Skips = cur.Version+1, 0
		if skip > 0 {
			next.Version, next.Skips = skip+1, skip
		}
		next.At = k.g.Now().UTC()
		next.Sig = base64.StdEncoding.EncodeToString(ed25519.Sign(key, next.signed()))
		res, err := idempotency.DoTyped(ctx, k.g, settingsKey(next.Version), "settings", func(context.Context, idempotency.Run) (Settings, error) {
			return next, nil
		}, idempotency.DoOptions{})
		var notRun *idempotency.NotRunError // the slot is another's: decided below
		if err != nil && !errors.As(err, &notRun) {
			return Settings{}, false, fmt.Errorf("four-eyes settings: %w", err)
		}
		if res.Outcome.Owned() && res.Value.Sig == next.Sig {
			return next, true, nil
		}
		if res.Record.State == driver.StateDone {
			return Settings{}, false, fmt.Errorf("%w: another process kept version %d at the same time: start again", ErrSettings, next.Version)
		}
		skip = next.Version // held by another's claim: write past it
	}
	return Settings{}, false, fmt.Errorf("%w: versions %d and on are held unfinished: look at the backend's %s records", ErrSettings, cur.Version+1, SettingsPrefix)
}

// Settled is what is kept before the first unfinished slot, if any (what
// Keep writes after): for the console's start, which writes past a slot
// left unfinished where Load refuses.
func (k *Kept) Settled(ctx context.Context) (Settings, bool, error) {
	s, ok, _, err := k.upTo(ctx)
	return s, ok, err
}

// upTo is what is kept before the first unfinished slot, and that slot
// (0: none).
func (k *Kept) upTo(ctx context.Context) (Settings, bool, int, error) {
	for v := 1; ; v++ {
		rec, err := k.g.Get(ctx, settingsKey(v))
		if errors.Is(err, driver.ErrNotFound) {
			s, ok, err := load(ctx, k.g, nil)
			return s, ok, 0, err
		}
		if err != nil {
			return Settings{}, false, 0, err
		}
		if rec.State != driver.StateDone {
			// Checked as Load checks it, up to the slot.
			s, ok, err := load(ctx, prefixGetter{k.g, v - 1}, nil)
			return s, ok, v, err
		}
	}
}

// prefixGetter reads versions up to (and not past) max.
type prefixGetter struct {
	g   Getter
	max int
}

func (p prefixGetter) Get(ctx context.Context, key string) (driver.Record, error) {
	if p.max < 1 || key > settingsKey(p.max) {
		return driver.Record{}, driver.ErrNotFound
	}
	return p.g.Get(ctx, key)
}

func keyIDOf(s string) string {
	pub, err := audit.ParsePublicKey(s)
	if err != nil {
		return "(unreadable)"
	}
	return audit.KeyID(pub)
}

// Describe is the settings in one line, for the trail and the console.
func (s Settings) Describe() string {
	var names []string
	for _, o := range s.Operators {
		names = append(names, o.Name)
	}
	ops := "none"
	if len(names) > 0 {
		ops = strings.Join(names, ",")
	}
	return fmt.Sprintf("policy %s; approvals wait at most %s; trail %s; sign-in %s; console key %s; command-line keys: %s",
		s.Policy, s.TTLBound(), s.Trail, s.SignIn, keyIDOf(s.ConsoleKey), ops)
}
