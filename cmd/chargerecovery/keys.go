package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strings"

	"github.com/finedge/idempotent-consumer/app/audit"
	"github.com/finedge/idempotent-consumer/app/console"
	"github.com/finedge/idempotent-consumer/app/service/cli"
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
	pub, err := audit.WriteNewKey(out)
	if errors.Is(err, fs.ErrExist) {
		return cli.Usagef("--out %s exists: a key is never overwritten (its lines would vouch for nothing)", out)
	} else if err != nil {
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
	tok, line, err := console.NewToken(f.Args()[0], f.Args()[1], key)
	if err != nil {
		return err
	}
	fmt.Fprintf(env.Stdout, "token for %s (give it to her; it is kept nowhere): %s\nher line of the console's token file:\n%s\n", strings.TrimSpace(f.Args()[0]), tok, line)
	return nil
}
