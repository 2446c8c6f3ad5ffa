package session_test

import (
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/app/audit"
	"github.com/finedge/idempotent-consumer/app/service/approval"
	"github.com/finedge/idempotent-consumer/app/service/session"
	"github.com/finedge/idempotent-consumer/memstore"
)

// An operator's --operator-key-file names her, and signs her approvals:
// whoever can read it approves in her name. secretfile's rule lets a file
// owned by root be readable by its group (0640: a Kubernetes secret for a
// service's container) — and so the session took ivan's key from a
// root-owned 0640 file that every member of the operators' group reads:
// olga, his colleague, approves her own proposal as ivan. A person's key
// is hers alone: owned by her (the user acting) and owner-only.
//
// The test runs as root (the file root's) and opens the session in a
// child process of another user in the file's group.
func TestAttack53MovedOperatorKeyReadableByTheGroupIsRefused(t *testing.T) {
	if path := os.Getenv("ATTACK53_KEY_FILE"); path != "" {
		attack53Child(t, path)
		return
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root: a root-owned key file, read by a child of another user")
	}
	dir, err := os.MkdirTemp("", "attack53-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	ivan := newKey(t)
	pemKey, err := audit.PrivateKeyPEM(ivan)
	if err != nil {
		t.Fatal(err)
	}
	key := filepath.Join(dir, "ivan.key")
	if err := os.WriteFile(key, pemKey, 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(key, 0, 65534); err != nil { // root's, group nogroup (the operators)
		t.Fatal(err)
	}
	work := filepath.Join(dir, "work")
	if err := os.Mkdir(work, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(work, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "session.test")
	if err := copyFile(self, bin); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-test.run=^TestAttack53MovedOperatorKeyReadableByTheGroupIsRefused$", "-test.v")
	cmd.Env = append(os.Environ(), "ATTACK53_KEY_FILE="+key, "ATTACK53_WORK="+work, "ATTACK53_PUB="+audit.PublicKeyString(pubOf(ivan)))
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("as another member of the key file's group: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "refused:") {
		t.Fatalf("the child did not check: %s", out)
	}
}

// attack53Child opens a session as olga (uid 65534) with ivan's key, read
// through the group.
func attack53Child(t *testing.T, key string) {
	work := os.Getenv("ATTACK53_WORK")
	trail := filepath.Join(work, "audit.jsonl")
	store := memstore.New()
	ks, err := approval.OpenKept(store, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := ks.Keep(t.Context(), newKey(t), approval.Settings{Policy: "bulk>0", Trail: trail, SignIn: "token", Operators: []approval.Operator{
		{Name: "ivan", Role: "operator", Key: os.Getenv("ATTACK53_PUB")},
	}}); err != nil {
		t.Fatal(err)
	}
	s, err := session.Open(t.Context(), session.Options{KeyFile: key}, func(ctx context.Context) (approval.Settings, bool, error) {
		return session.LoadKept(ctx, store, nil)
	})
	if err == nil {
		s.Close()
		t.Fatalf("uid %d opened a session with %s, a root-owned key its group reads: it signs as ivan", os.Geteuid(), key)
	}
	t.Logf("refused: %v", err)
}

func copyFile(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// The host pins the console's public key in a file of root's: the
// settings in the backend must be signed by it. A pin the acting
// operator owns (0644, so "not writable by others") she can rewrite with
// a key of her own making, then sign settings of her own — four-eyes off
// — with it; the pin was taken all the same.
func TestAttack53MovedPinFileOwnedByTheOperatorIsRefused(t *testing.T) {
	dir := t.TempDir()
	pin := filepath.Join(dir, "console.pub")
	if err := os.WriteFile(pin, []byte(audit.PublicKeyString(pubOf(newKey(t)))), 0o644); err != nil {
		t.Fatal(err)
	}
	me := os.Geteuid()
	if me == 0 {
		// As root: the file is another user's, and the session acts as
		// that user.
		me = 65534
		if err := os.Chown(pin, me, me); err != nil {
			t.Fatal(err)
		}
	}
	defer session.SetEUID(func() int { return me })()
	if got, err := session.Pin(pin, func(string) string { return "" }); err == nil || !strings.Contains(err.Error(), "owned by you") {
		t.Fatalf("a pin of the operator's own: %v, %v; want it refused", got, err)
	}
	// Another's (root's, or a user she is not), not writable by her: taken.
	restore := session.SetEUID(func() int { return me + 1 })
	defer restore()
	if got, err := session.Pin(pin, func(string) string { return "" }); err != nil || got == nil {
		t.Fatalf("a pin of another's: %v, %v", got, err)
	}
}

// --approval-ttl -1h was taken as given and failed later, deep in the
// book, as an error of the program (exit 1): a bad value of a flag is a
// usage error (exit 2), said before the backend is read.
func TestAttack53MovedNegativeApprovalTTLIsAUsageError(t *testing.T) {
	read := false
	load := func(context.Context) (approval.Settings, bool, error) {
		read = true
		return approval.Settings{}, false, nil
	}
	_, err := session.Open(t.Context(), session.Options{File: filepath.Join(t.TempDir(), "audit.jsonl"), TTL: -time.Hour}, load)
	if !isUsage(err) || read {
		t.Fatalf("--approval-ttl -1h: %v (backend read %v); want a usage error first", err, read)
	}
}
