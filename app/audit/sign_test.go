package audit

import (
	"bytes"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/finedge/idempotent-consumer/app/internal/apptest"
)

func newKey(t *testing.T) ed25519.PrivateKey { return apptest.Key(t) }

// chainLine is a line chained by hand to the file's last line, as an
// insider with write access to the file would write it.
func chainLine(t *testing.T, path string, e Entry) []byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tl, err := readTail(f)
	if err != nil {
		t.Fatal(err)
	}
	e.Seq, e.Prev = tl.seq+1, tl.hash
	b, err := json.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func appendRaw(t *testing.T, path string, line []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(append(line, '\n')); err != nil {
		t.Fatal(err)
	}
}

func TestSignedTrailRefusesWhatNoWriterVouchedFor(t *testing.T) {
	console, olga, ivan := newKey(t), newKey(t), newKey(t)
	ring := Keyring{}
	ring.Add(Key{Name: ConsoleSigner, Pub: console.Public().(ed25519.PublicKey)})
	ring.Add(Key{Name: "olga", Pub: olga.Public().(ed25519.PublicKey)})
	ring.Add(Key{Name: "ivan", Pub: ivan.Public().(ed25519.PublicKey)})

	cases := []struct {
		name  string
		forge func(t *testing.T, path string)
		want  string
	}{
		{"nothing forged", func(*testing.T, string) {}, ""},
		{"an approve line chained by hand, unsigned", func(t *testing.T, path string) {
			appendRaw(t, path, chainLine(t, path, Entry{Operator: "ivan", Action: "approve", Proposal: "P-1", Result: "approved"}))
		}, "not signed, after signed lines"},
		{"olga signs a line in ivan's name", func(t *testing.T, path string) {
			b := chainLine(t, path, Entry{Operator: "ivan", Action: "approve", Proposal: "P-1", Result: "approved", Signer: "olga", KeyID: KeyID(olga.Public().(ed25519.PublicKey))})
			appendRaw(t, path, signLine(b, &Signer{Name: "olga", Key: olga}))
		}, "in \"ivan\"'s name"},
		{"olga's key, claiming to be ivan's signature", func(t *testing.T, path string) {
			b := chainLine(t, path, Entry{Operator: "ivan", Action: "approve", Result: "approved", Signer: "ivan", KeyID: KeyID(olga.Public().(ed25519.PublicKey))})
			appendRaw(t, path, signLine(b, &Signer{Name: "olga", Key: olga}))
		}, "signed by olga's key but says"},
		{"ivan's key id, olga's signature", func(t *testing.T, path string) {
			b := chainLine(t, path, Entry{Operator: "ivan", Action: "approve", Result: "approved", Signer: "ivan", KeyID: KeyID(ivan.Public().(ed25519.PublicKey))})
			appendRaw(t, path, signLine(b, &Signer{Name: "olga", Key: olga}))
		}, "is not ivan's for this line"},
		{"a key the installation does not know", func(t *testing.T, path string) {
			mallory := newKey(t)
			b := chainLine(t, path, Entry{Operator: "ivan", Action: "approve", Result: "approved", Signer: "ivan", KeyID: KeyID(mallory.Public().(ed25519.PublicKey))})
			appendRaw(t, path, signLine(b, &Signer{Name: "ivan", Key: mallory}))
		}, "not a key of this installation"},
		{"a signed line edited, chain redone", func(t *testing.T, path string) {
			raw, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			lines := bytes.Split(bytes.TrimSuffix(raw, []byte("\n")), []byte("\n"))
			lines[1] = bytes.Replace(lines[1], []byte(`"moved"`), []byte(`"kept!"`), 1)
			// chained again from there: line 3 carries line 2's new hash
			var e map[string]any
			if err := json.Unmarshal(lines[2], &e); err != nil {
				t.Fatal(err)
			}
			lines[2] = bytes.Replace(lines[2], []byte(e["prev"].(string)), []byte(Hash(lines[1])), 1)
			if err := os.WriteFile(path, append(bytes.Join(lines, []byte("\n")), '\n'), 0o600); err != nil {
				t.Fatal(err)
			}
		}, "seq 2: no writer vouched"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "audit.jsonl")
			for i, s := range []*Signer{{Name: ConsoleSigner, Key: console}, {Name: "olga", Key: olga}, {Name: "ivan", Key: ivan}} {
				tr, err := Open(path)
				if err != nil {
					t.Fatal(err)
				}
				tr.Sign = s
				op := s.Name
				if i == 0 {
					op = "system"
				}
				if _, err := tr.Append(Entry{Operator: op, Action: "redrive", Result: "moved"}); err != nil {
					t.Fatal(err)
				}
				tr.Close()
			}
			c.forge(t, path)
			f, err := os.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			rep, err := VerifyKeyed(f, path, Report{}, ring)
			if c.want == "" {
				if err != nil || rep.Signed != 3 {
					t.Fatalf("a trail of three signed lines: %+v, %v", rep, err)
				}
				return
			}
			if !errors.Is(err, ErrNotVouched) || !errors.Is(err, ErrBroken) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("forged: err %v, want ErrNotVouched saying %q", err, c.want)
			}
			// Without the keyring only the chain is checked: the forgery is
			// what keys are for.
			if _, err := f.Seek(0, 0); err != nil {
				t.Fatal(err)
			}
			if c.name != "a signed line edited, chain redone" {
				if _, err := Verify(f, path, Report{}); err != nil {
					t.Fatalf("the chain alone: %v", err)
				}
			}
		})
	}
}

func TestVouchedNamesTheSigner(t *testing.T) {
	olga := newKey(t)
	ring := Keyring{}
	ring.Add(Key{Name: "olga", Pub: olga.Public().(ed25519.PublicKey), Until: 1})
	_, tr := openTrail(t)
	defer tr.Close()
	tr.Sign = &Signer{Name: "olga", Key: olga}
	for range 2 {
		if _, err := tr.Append(Entry{Operator: "olga", Action: "propose", Result: "pending"}); err != nil {
			t.Fatal(err)
		}
	}
	es, err := tr.All(Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if who, err := es[0].Vouched(ring); err != nil || who != "olga" {
		t.Fatalf("seq 1: %q, %v", who, err)
	}
	if _, err := es[1].Vouched(ring); !errors.Is(err, ErrNotVouched) || !strings.Contains(err.Error(), "retired at seq 1") {
		t.Fatalf("seq 2 after the key was retired at 1: %v", err)
	}
}

func TestWriteNewKeyWritesAKeyOnceOwnerOnly(t *testing.T) {
	path := filepath.Join(t.TempDir(), "operator.key")
	pub, err := WriteNewKey(path)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ParsePrivateKey(b)
	if err != nil || !pub.Equal(key.Public()) {
		t.Fatalf("the file holds %v, %v; want the key of %s", key, err, PublicKeyString(pub))
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %s, want 0600", fi.Mode().Perm())
	}
	for _, name := range []string{path, filepath.Join(t.TempDir(), "link")} {
		if name != path {
			if err := os.Symlink(filepath.Join(t.TempDir(), "nowhere"), name); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := WriteNewKey(name); !errors.Is(err, fs.ErrExist) {
			t.Fatalf("WriteNewKey over %s: %v, want fs.ErrExist", name, err)
		}
	}
	if after, _ := os.ReadFile(path); string(after) != string(b) {
		t.Fatal("the key was replaced")
	}
}
