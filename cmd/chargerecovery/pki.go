package main

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"context"

	"github.com/finedge/idempotent-consumer/app/service/cli"
	"github.com/finedge/idempotent-consumer/internal/pki"
)

// The files chargerecovery pki writes, in the names the commands'
// flags are given in its output (and scripts/local-prod.sh uses).
const (
	pkiCA       = "ca.crt"              // the CA: corebank --client-ca, serve --corebank-ca
	pkiBank     = "bank"                // bank.crt, bank.key: corebank --tls-cert/--tls-key
	pkiConsumer = "consumer"            // consumer.crt, consumer.key: serve --corebank-client-cert/--corebank-client-key
	pkiSecret   = "oauth-client-secret" // corebank and serve --*oauth-client-secret-file
)

const pkiSynopsis = `pki --dir DIR [--host NAME]... [--force]

DEVELOPMENT ONLY: makes a private CA and, signed by it, a server certificate
for the core-banking simulator (SANs 127.0.0.1, localhost and every --host)
and a client certificate for the consumer, plus an OAuth2 client secret, so
that corebank, serve and corebank ledger run over mutual TLS and OAuth2
locally. The CA's key is not kept (nothing more can be signed with it);
keys and the secret are owner-only (0600). A real bank issues its own
certificates: never use these outside a developer's machine.
Existing files are left alone unless --force.

Files: ca.crt, bank.crt, bank.key, consumer.crt, consumer.key, oauth-client-secret`

func runPKI(_ context.Context, env *cli.Env, args []string) error {
	f := cli.NewFlagSet(env, "pki", pkiSynopsis)
	var (
		dir, clientID string
		force         bool
		valid         time.Duration
		hosts         = []string{"127.0.0.1", "localhost"}
	)
	f.String(&dir, "dir", "IC_PKI_DIR", "", "where to write the files (created owner-only if missing; required)")
	f.String(&clientID, "client-id", "IC_PKI_CLIENT_ID", "chargerecovery", "the consumer's name: its certificate's common name, and the OAuth2 client id printed for corebank and serve")
	f.Bool(&force, "force", "IC_PKI_FORCE", false, "replace files that exist (every certificate is then new: restart corebank and serve)")
	f.Duration(&valid, "valid", "IC_PKI_VALID", 30*24*time.Hour, "how long the certificates are valid")
	f.Flags().Func("host", "another name or IP address of the simulator in its certificate (repeat, or comma-separate)", func(v string) error {
		for _, h := range strings.Split(v, ",") {
			if h = strings.TrimSpace(h); h != "" {
				hosts = append(hosts, h)
			}
		}
		return nil
	})
	if err := f.Parse(args, false); err != nil {
		return err
	}
	var p cli.Problems
	if dir == "" {
		p.Add("--dir is required")
	}
	if valid < time.Hour || valid > 398*24*time.Hour {
		p.Add("--valid %s is outside 1h-398 days", valid)
	}
	if strings.TrimSpace(clientID) == "" {
		p.Add("--client-id must not be empty")
	}
	if err := p.Err(); err != nil {
		return err
	}
	files := []string{pkiCA, pkiBank + ".crt", pkiBank + ".key", pkiConsumer + ".crt", pkiConsumer + ".key", pkiSecret}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	st, err := os.Stat(dir)
	if err != nil {
		return err
	}
	if !st.IsDir() {
		return cli.Usagef("--dir %s is not a directory", dir)
	}
	if st.Mode().Perm()&0o022 != 0 {
		return cli.Usagef("--dir %s is writable by others (%s): anyone could replace a certificate; chmod go-w it or choose another", dir, st.Mode().Perm())
	}
	if !force {
		var there []string
		for _, name := range files {
			if _, err := os.Lstat(filepath.Join(dir, name)); err == nil {
				there = append(there, name)
			} else if !errors.Is(err, fs.ErrNotExist) {
				return err
			}
		}
		if len(there) > 0 {
			return cli.Usagef("%s already holds %s: nothing written (--force replaces them)", dir, strings.Join(there, ", "))
		}
	}
	now := time.Now()
	ca, err := pki.NewCAUntil("idempotent-consumer development CA", now.Add(valid))
	if err != nil {
		return err
	}
	server, err := ca.IssueServer("core-banking simulator", hosts, now.Add(-time.Hour), now.Add(valid))
	if err != nil {
		return err
	}
	client, err := ca.Issue(clientID, false, now.Add(-time.Hour), now.Add(valid))
	if err != nil {
		return err
	}
	var b [24]byte
	if _, err := rand.Read(b[:]); err != nil {
		return err
	}
	path := func(name string) string { return filepath.Join(dir, name) }
	if err := pki.WriteFile(path(pkiSecret), []byte(hex.EncodeToString(b[:])+"\n")); err != nil {
		return err
	}
	if _, _, err := server.Write(dir, pkiBank); err != nil {
		return err
	}
	if _, _, err := client.Write(dir, pkiConsumer); err != nil {
		return err
	}
	if err := pki.WriteFile(path(pkiCA), ca.PEM); err != nil {
		return err
	}
	w := env.Stdout
	fmt.Fprintf(w, "wrote %s: %s (development only; valid until %s)\n", dir, strings.Join(files, ", "), now.Add(valid).UTC().Format(time.RFC3339))
	fmt.Fprintf(w, "simulator certificate names: %s\n", strings.Join(hosts, ", "))
	fmt.Fprintf(w, "corebank flags: --tls-cert %s --tls-key %s --client-ca %s --oauth-client-id %s --oauth-client-secret-file %s\n",
		path(pkiBank+".crt"), path(pkiBank+".key"), path(pkiCA), clientID, path(pkiSecret))
	fmt.Fprintf(w, "serve and corebank ledger flags: --corebank-url https://127.0.0.1:8081 --corebank-ca %s --corebank-client-cert %s --corebank-client-key %s"+
		" --corebank-oauth-token-url https://127.0.0.1:8081/oauth/token --corebank-oauth-client-id %s --corebank-oauth-client-secret-file %s\n",
		path(pkiCA), path(pkiConsumer+".crt"), path(pkiConsumer+".key"), clientID, path(pkiSecret))
	return nil
}
