package main

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"github.com/finedge/idempotent-consumer/app/audit"
	"github.com/finedge/idempotent-consumer/app/console"
	"github.com/finedge/idempotent-consumer/app/service/cli"
	"github.com/finedge/idempotent-consumer/internal/secretfile"
)

// runKeygen writes a new Ed25519 key, owner-only, and prints its public
// key: the console's (--console-key-file) or an operator's
// (--operator-key-file, its public key on her line of the token file).
func runKeygen(_ context.Context, env *cli.Env, args []string) error {
	f := cli.NewFlagSet(env, "keygen", "keygen --out FILE")
	var out string
	f.String(&out, "out", "", "", "where the key goes (a new file, mode 0600, of the account that will use it)")
	if err := f.Parse(args, false); err != nil {
		return err
	}
	if out == "" {
		return cli.Usagef("give --out FILE")
	}
	if _, err := os.Lstat(out); !errors.Is(err, fs.ErrNotExist) {
		return cli.Usagef("--out %s exists: a key is never overwritten (its lines would vouch for nothing)", out)
	}
	pub, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return err
	}
	pemKey, err := audit.PrivateKeyPEM(key)
	if err != nil {
		return err
	}
	if err := secretfile.Write(out, pemKey); err != nil {
		return err
	}
	fmt.Fprintf(env.Stdout, "%s\n", audit.PublicKeyString(pub))
	fmt.Fprintf(env.Stderr, "wrote %s (key %s): keep it to its owner; the line above is its public key\n", out, audit.KeyID(pub))
	return nil
}

// runToken makes a console token for NAME: the token (shown once, to give
// to her) and her line of the token file, which keeps its hash only.
func runToken(_ context.Context, env *cli.Env, args []string) error {
	f := cli.NewFlagSet(env, "token", "token NAME ROLE [--key ed25519:PUBLIC]")
	var key string
	f.String(&key, "key", "", "", "her command-line public key (chargerecovery keygen prints it), for the line's fourth field")
	if err := f.Parse(args, true); err != nil {
		return err
	}
	if len(f.Args()) != 2 {
		return cli.Usagef("give NAME and ROLE (viewer or operator)")
	}
	name := strings.TrimSpace(f.Args()[0])
	role, err := console.ParseRole(f.Args()[1])
	if err != nil || name == "" || strings.ContainsAny(name, " \t") {
		return cli.Usagef("give a NAME without spaces and ROLE viewer or operator")
	}
	if key != "" {
		if _, err := audit.ParsePublicKey(key); err != nil {
			return cli.Usagef("--key: %v", err)
		}
	}
	var b [24]byte
	if _, err := rand.Read(b[:]); err != nil {
		return err
	}
	tok := base64.RawURLEncoding.EncodeToString(b[:])
	fmt.Fprintf(env.Stdout, "token for %s (give it to her; it is kept nowhere): %s\nher line of the console's token file:\n%s\n", name, tok, console.TokenLine(name, role, tok, key))
	return nil
}
