package audit

import (
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/finedge/idempotent-consumer/internal/secretfile"
)

// WriteNewKey makes an Ed25519 key and writes it to path, owner-only
// (PEM, PKCS #8): the console's or an operator's. A file already there is
// never replaced (its lines would vouch for nothing): the error then
// wraps fs.ErrExist.
func WriteNewKey(path string) (ed25519.PublicKey, error) {
	if _, err := os.Lstat(path); !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%s: %w", path, fs.ErrExist)
	}
	pub, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	pemKey, err := PrivateKeyPEM(key)
	if err != nil {
		return nil, err
	}
	if err := secretfile.Write(path, pemKey); err != nil {
		return nil, err
	}
	return pub, nil
}
