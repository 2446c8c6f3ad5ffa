package foureyes_test

import (
	"crypto/ed25519"
	"errors"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/app/internal/apptest"
	"github.com/finedge/idempotent-consumer/app/service/foureyes"
	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
	"github.com/finedge/idempotent-consumer/memstore"
)

func key(t *testing.T) ed25519.PrivateKey { return apptest.Key(t) }

func pub(k ed25519.PrivateKey) ed25519.PublicKey { return k.Public().(ed25519.PublicKey) }

// kept is a backend with the console's settings, version 1 and 2.
func kept(t *testing.T) (*memstore.Store, *foureyes.Kept, ed25519.PrivateKey) {
	t.Helper()
	store := memstore.New()
	ks, err := foureyes.OpenKept(store, nil)
	if err != nil {
		t.Fatal(err)
	}
	console := key(t)
	for _, p := range []string{"bulk>5", "reopen-new-attempt"} {
		if _, changed, err := ks.Keep(t.Context(), console, foureyes.Settings{Policy: p, Trail: "/var/lib/ic/audit.jsonl", SignIn: "token"}); err != nil || !changed {
			t.Fatalf("keep %s: %v %v", p, changed, err)
		}
	}
	return store, ks, console
}

// claimSlot holds slot v unfinished, as a writer that died there (or a
// row put there in the database) leaves it.
func claimSlot(t *testing.T, store driver.Store, v string) {
	t.Helper()
	g, err := idempotency.NewGuard(store, idempotency.Options{Lease: 24 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.Claim(t.Context(), foureyes.SettingsPrefix+v, "x"); err != nil {
		t.Fatal(err)
	}
}

func TestTheSettingsAreReadAsTheConsoleKeptThem(t *testing.T) {
	ctx := t.Context()
	store, ks, console := kept(t)
	s, ok, err := ks.Load(ctx, pub(console))
	if err != nil || !ok || s.Version != 2 || s.Policy != "reopen-new-attempt" || !s.Requires("reopen-new-attempt") || s.Requires("redrive-force") {
		t.Fatalf("load under the pin: %+v %v %v", s, ok, err)
	}
	// A host pinning another key refuses them.
	if _, _, err := ks.Load(ctx, pub(key(t))); !errors.Is(err, foureyes.ErrSettings) {
		t.Fatalf("settings under another key than the pin: %v", err)
	}
	// A slot after the last, held unfinished: Load refuses (never "the one
	// before is the last"); the console's key writes past it.
	claimSlot(t, store, "00000003")
	if _, _, err := ks.Load(ctx, pub(console)); !errors.Is(err, foureyes.ErrUnfinished) {
		t.Fatalf("an unfinished version 3: %v", err)
	}
	s, changed, err := ks.Keep(ctx, console, foureyes.Settings{Policy: "all", Trail: "/var/lib/ic/audit.jsonl", SignIn: "token"})
	if err != nil || !changed || s.Version != 4 || s.Skips != 3 {
		t.Fatalf("keep past the unfinished slot: %+v %v %v", s, changed, err)
	}
	if s, _, err := ks.Load(ctx, pub(console)); err != nil || s.Version != 4 || s.Policy != "all" {
		t.Fatalf("load past the skipped slot: %+v %v", s, err)
	}
}

func TestUnderAPinNoSettingsIsNotFourEyesOff(t *testing.T) {
	ks, err := foureyes.OpenKept(memstore.New(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok, err := ks.Load(t.Context(), nil); ok || err != nil {
		t.Fatalf("no pin, nothing kept: %v %v", ok, err)
	}
	if _, _, err := ks.Load(t.Context(), pub(key(t))); !errors.Is(err, foureyes.ErrSettings) {
		t.Fatalf("a pin and nothing kept: %v", err)
	}
}

// foureyes.Load reads through any Getter: the Guard every reopen holds.
func TestLoadReadsThroughTheGuard(t *testing.T) {
	store, _, console := kept(t)
	g, err := idempotency.NewGuard(store, idempotency.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if s, ok, err := foureyes.Load(t.Context(), g, pub(console)); err != nil || !ok || s.Version != 2 {
		t.Fatalf("load through the guard: %+v %v %v", s, ok, err)
	}
}
