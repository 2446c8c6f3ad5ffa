package audit

import (
	"bufio"
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/finedge/idempotent-consumer/internal/secretfile"
)

// A line of the trail is vouched for by whoever wrote it: the console
// (its own key, held by the console's account alone) or the operator who
// acted on the command line (her own key, an owner-only file of hers).
// The writer signs the line as written, without its signature, with
// Ed25519; the signature is the line's last field ("sig"). A verifier
// holds only public keys (Keyring), so a leaked keyring signs nothing, and
// nobody can write a line in another's name: an approval the proposer
// appends by hand, chained correctly, carries no approver's signature.

// Signer is the key a process signs its lines with, and the name it
// vouches as: "console", or the operator the key belongs to.
type Signer struct {
	Name string
	Key  ed25519.PrivateKey
}

// KeyID is the short name of a public key in lines and keyrings: the
// first 16 hex digits of its SHA-256.
func KeyID(pub ed25519.PublicKey) string {
	s := sha256.Sum256(pub)
	return hex.EncodeToString(s[:8])
}

// ConsoleSigner is the signer name of the console's own lines: it vouches
// for the person its sign-in named (Operator), any name.
const ConsoleSigner = "console"

// Key is one public key of a Keyring: whose it is, and the last seq it
// may sign (0: no end; a key retired at seq N vouches for no later line).
type Key struct {
	Name  string
	Pub   ed25519.PublicKey
	Until int64
}

// Keyring is the public keys a verifier accepts, by KeyID.
type Keyring map[string]Key

// Add puts k in r under its KeyID.
func (r Keyring) Add(k Key) { r[KeyID(k.Pub)] = k }

const sigField = `,"sig":"`

// signLine appends the signature field to the marshalled line b (a JSON
// object with no sig field).
func signLine(b []byte, s *Signer) []byte {
	sig := ed25519.Sign(s.Key, b)
	out := make([]byte, 0, len(b)+len(sigField)+90)
	out = append(out, b[:len(b)-1]...)
	out = append(out, sigField...)
	out = append(out, base64.RawStdEncoding.EncodeToString(sig)...)
	return append(out, '"', '}')
}

// ErrNotVouched is matched by a line no known key signed: unsigned where
// the trail is signed, signed by a key the keyring does not hold, a
// signature that does not match the line, or a key's holder writing in
// another's name.
var ErrNotVouched = errors.New("no writer vouched for the line")

// checkLine checks the signature of line (as in the file, without its
// newline) against r: it returns whom it vouches for ("" for an unsigned
// line: the caller decides whether one may be there).
func checkLine(line []byte, r Keyring) (string, error) {
	i := bytes.LastIndex(line, []byte(sigField))
	if i < 0 {
		return "", nil
	}
	if !bytes.HasSuffix(line, []byte(`"}`)) {
		return "", fmt.Errorf("%w: the signature is not the line's last field", ErrNotVouched)
	}
	sig, err := base64.RawStdEncoding.DecodeString(string(line[i+len(sigField) : len(line)-2]))
	if err != nil || len(sig) != ed25519.SignatureSize {
		return "", fmt.Errorf("%w: the signature is not one", ErrNotVouched)
	}
	signed := append(append([]byte(nil), line[:i]...), '}')
	var e struct {
		Seq      int64  `json:"seq"`
		Operator string `json:"operator"`
		Signer   string `json:"signer"`
		KeyID    string `json:"keyId"`
	}
	if err := json.Unmarshal(signed, &e); err != nil {
		return "", fmt.Errorf("%w: %v", ErrNotVouched, err)
	}
	k, ok := r[e.KeyID]
	switch {
	case !ok:
		return "", fmt.Errorf("%w: signed by key %q, which is not a key of this installation", ErrNotVouched, e.KeyID)
	case k.Name != e.Signer:
		return "", fmt.Errorf("%w: signed by %s's key but says it is %q's", ErrNotVouched, k.Name, e.Signer)
	case !ed25519.Verify(k.Pub, signed, sig):
		return "", fmt.Errorf("%w: the signature is not %s's for this line (written by another, or edited)", ErrNotVouched, k.Name)
	case k.Until > 0 && e.Seq > k.Until:
		return "", fmt.Errorf("%w: %s's key was retired at seq %d", ErrNotVouched, k.Name, k.Until)
	case e.Signer != ConsoleSigner && !strings.EqualFold(strings.TrimSpace(e.Operator), e.Signer):
		return "", fmt.Errorf("%w: %s's key signed a line in %q's name (only the console vouches for another)", ErrNotVouched, e.Signer, e.Operator)
	}
	return e.Signer, nil
}

// Vouched checks e's signature (e as read from a trail: Recent, All)
// against r and returns whom it vouches for; an unsigned line is
// ErrNotVouched.
func (e Entry) Vouched(r Keyring) (string, error) {
	if len(e.raw) == 0 {
		return "", fmt.Errorf("%w: seq %d was not read from a trail", ErrNotVouched, e.Seq)
	}
	who, err := checkLine(e.raw, r)
	if err == nil && who == "" {
		err = fmt.Errorf("%w: seq %d is not signed", ErrNotVouched, e.Seq)
	}
	return who, err
}

// PrivateKeyPEM is k as a PEM "PRIVATE KEY" (PKCS #8), for a key file.
func PrivateKeyPEM(k ed25519.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// ReadPrivateKeyFile reads an Ed25519 private key (ParsePrivateKey) from
// an owner-only file (secretfile's rule): the console's key, an operator's.
func ReadPrivateKeyFile(path string) (ed25519.PrivateKey, error) {
	return readKeyFile(path, secretfile.Read)
}

// ReadOwnPrivateKeyFile is ReadPrivateKeyFile of a person's own key (an
// operator's, which names her): the file must be hers, owner-only
// (secretfile.ReadOwn) — not root's that a group reads.
func ReadOwnPrivateKeyFile(path string) (ed25519.PrivateKey, error) {
	return readKeyFile(path, secretfile.ReadOwn)
}

// readKeyFile is the key in path, read by read (which checks the file).
func readKeyFile(path string, read func(string) ([]byte, error)) (ed25519.PrivateKey, error) {
	b, err := read(path)
	if err != nil {
		return nil, err
	}
	k, err := ParsePrivateKey(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	return k, nil
}

// ParsePrivateKey reads an Ed25519 key from PEM (PKCS #8); an error never
// quotes the file.
func ParsePrivateKey(b []byte) (ed25519.PrivateKey, error) {
	blk, _ := pem.Decode(b)
	if blk == nil || blk.Type != "PRIVATE KEY" {
		return nil, errors.New("not a PEM PRIVATE KEY (chargerecovery keygen writes one)")
	}
	k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
	if err != nil {
		return nil, errors.New("not a PKCS #8 private key")
	}
	ek, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, errors.New("not an Ed25519 key")
	}
	return ek, nil
}

// PublicKeyString is pub as written in files and settings: "ed25519:"
// and its standard base64.
func PublicKeyString(pub ed25519.PublicKey) string {
	return "ed25519:" + base64.StdEncoding.EncodeToString(pub)
}

// ParsePublicKey reads a PublicKeyString.
func ParsePublicKey(s string) (ed25519.PublicKey, error) {
	b64, ok := strings.CutPrefix(strings.TrimSpace(s), "ed25519:")
	if !ok {
		return nil, errors.New(`a public key starts "ed25519:"`)
	}
	b, err := base64.StdEncoding.DecodeString(b64)
	if err != nil || len(b) != ed25519.PublicKeySize {
		return nil, errors.New("not an Ed25519 public key (32 bytes, base64)")
	}
	return ed25519.PublicKey(b), nil
}

// ConsoleSettings is the highest settings version a line the console
// signed (checked against keys) carries in the trail's current file: the
// settings the console kept, as its own lines remember them. Lines an
// operator signed do not count (she could stamp any number on her own).
func (a *Trail) ConsoleSettings(keys Keyring) (int, error) {
	f, err := os.Open(a.path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), MaxLine)
	top := 0
	for sc.Scan() {
		line := sc.Bytes()
		if !bytes.Contains(line, []byte(`"signer":"`+ConsoleSigner+`"`)) {
			continue
		}
		if who, err := checkLine(line, keys); err != nil || who != ConsoleSigner {
			continue
		}
		var e struct {
			Settings int `json:"settings"`
		}
		if json.Unmarshal(line, &e) == nil {
			top = max(top, e.Settings)
		}
	}
	return top, sc.Err()
}
