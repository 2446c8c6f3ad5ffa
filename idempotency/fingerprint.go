package idempotency

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash"
	"strings"
)

// fingerprintScheme prefixes a keyed fingerprint: "hs256:<key id>:<hex>".
const fingerprintScheme = "hs256:"

// Fingerprinter computes fingerprints under a secret key (HMAC-SHA-256),
// so that a fingerprint read from a store, a log or a terminal tells
// nothing about the payload to whoever does not hold the key: an unkeyed
// hash of a payload whose only unknown is an account number is reversed by
// trying every account number.
//
// A keyed fingerprint names the key that wrote it ("hs256:<key id>:<hex>",
// the key id a hash of the key, not the key). Keys are rotated without
// turning duplicates into conflicts: the previous keys stay known, and a
// stored fingerprint is compared under the key that wrote it (Match).
//
// A nil *Fingerprinter computes unkeyed fingerprints (Fingerprint): for
// tests, and records written before keys.
type Fingerprinter struct {
	current fingerprintKey
	known   map[string]fingerprintKey
}

type fingerprintKey struct {
	id  string
	key []byte
}

// NewFingerprinter returns a Fingerprinter that writes under current and
// also recognises fingerprints written under previous. Every key is at
// least MinFingerprintKey bytes.
func NewFingerprinter(current []byte, previous ...[]byte) (*Fingerprinter, error) {
	f := &Fingerprinter{known: map[string]fingerprintKey{}}
	for i, k := range append([][]byte{current}, previous...) {
		if len(k) < MinFingerprintKey {
			return nil, fmt.Errorf("%w: fingerprint key %d has %d bytes, want at least %d (e.g. openssl rand -base64 48)", ErrInvalid, i+1, len(k), MinFingerprintKey)
		}
		fk := fingerprintKey{id: keyID(k), key: append([]byte(nil), k...)}
		if i == 0 {
			f.current = fk
		}
		if _, dup := f.known[fk.id]; !dup {
			f.known[fk.id] = fk
		}
	}
	return f, nil
}

// keyID names a key without revealing it: the first 8 hex digits of a
// domain-separated SHA-256 of it.
func keyID(k []byte) string {
	h := sha256.New()
	h.Write([]byte("idempotent-consumer fingerprint key id\x00"))
	h.Write(k)
	return hex.EncodeToString(h.Sum(nil))[:8]
}

// KeyID is the id of the key fingerprints are written under ("" for a nil
// Fingerprinter: unkeyed).
func (f *Fingerprinter) KeyID() string {
	if f == nil {
		return ""
	}
	return f.current.id
}

// Sum is the fingerprint of a payload's parts under the current key.
func (f *Fingerprinter) Sum(parts ...string) string {
	if f == nil {
		return Fingerprint(parts...)
	}
	return f.sum(f.current, parts)
}

func (f *Fingerprinter) sum(k fingerprintKey, parts []string) string {
	return fingerprintScheme + k.id + ":" + hex.EncodeToString(digest(hmac.New(sha256.New, k.key), parts))
}

// Match reports whether stored is the fingerprint of parts under the key
// that wrote it: a previous key, or none for an unkeyed fingerprint
// written before keys. It returns ErrUnknownFingerprintKey for a key it
// does not hold.
func (f *Fingerprinter) Match(stored string, parts ...string) (bool, error) {
	id, keyed := fingerprintKeyID(stored)
	if !keyed {
		return hmac.Equal([]byte(stored), []byte(Fingerprint(parts...))), nil
	}
	if f == nil {
		return false, fmt.Errorf("%w: %s (no key configured)", ErrUnknownFingerprintKey, id)
	}
	k, ok := f.known[id]
	if !ok {
		return false, fmt.Errorf("%w: %s", ErrUnknownFingerprintKey, id)
	}
	return hmac.Equal([]byte(stored), []byte(f.sum(k, parts))), nil
}

// fingerprintKeyID is the id of the key a fingerprint was written under,
// and whether it was written under a key at all.
func fingerprintKeyID(fp string) (string, bool) {
	rest, ok := strings.CutPrefix(fp, fingerprintScheme)
	if !ok {
		return "", false
	}
	id, _, ok := strings.Cut(rest, ":")
	return id, ok
}

// Fingerprint hashes the parts of a business payload into a stable hex
// string without a key (SHA-256 over length-prefixed parts, so ("ab","c")
// and ("a","bc") differ). Anyone can compute it: where the payload holds
// something secret, use a Fingerprinter.
func Fingerprint(parts ...string) string {
	return hex.EncodeToString(digest(sha256.New(), parts))
}

func digest(h hash.Hash, parts []string) []byte {
	var n [8]byte
	for _, p := range parts {
		binary.BigEndian.PutUint64(n[:], uint64(len(p)))
		h.Write(n[:])
		h.Write([]byte(p))
	}
	return h.Sum(nil)
}
