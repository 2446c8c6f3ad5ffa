package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/finedge/idempotent-consumer/app/service/cli"
	"github.com/finedge/idempotent-consumer/internal/pki"
)

func runPKI(_ context.Context, env *cli.Env, args []string) error {
	f := cli.NewFlagSet(env, "pki", pki.DevSynopsis)
	o := pki.DevOptions{Hosts: []string{"127.0.0.1", "localhost"}}
	f.String(&o.Dir, "dir", "IC_PKI_DIR", "", "where to write the files (created owner-only if missing; required)")
	f.String(&o.ClientID, "client-id", "IC_PKI_CLIENT_ID", "chargerecovery", "the consumer's name: its certificate's common name, and the OAuth2 client id printed for corebank and serve")
	f.Bool(&o.Force, "force", "IC_PKI_FORCE", false, "replace files that exist (every certificate is then new: restart corebank and serve)")
	f.Duration(&o.Valid, "valid", "IC_PKI_VALID", 30*24*time.Hour, "how long the certificates are valid")
	f.Flags().Func("host", "another name or IP address of the simulator in its certificate (repeat, or comma-separate)", func(v string) error {
		for _, h := range strings.Split(v, ",") {
			if h = strings.TrimSpace(h); h != "" {
				o.Hosts = append(o.Hosts, h)
			}
		}
		return nil
	})
	if err := f.Parse(args, false); err != nil {
		return err
	}
	var p cli.Problems
	if o.Dir == "" {
		p.Add("--dir is required")
	}
	if o.Valid < time.Hour || o.Valid > 398*24*time.Hour {
		p.Add("--valid %s is outside 1h-398 days", o.Valid)
	}
	if strings.TrimSpace(o.ClientID) == "" {
		p.Add("--client-id must not be empty")
	}
	if err := p.Err(); err != nil {
		return err
	}
	set, err := pki.WriteDev(o)
	if r := (*pki.Refusal)(nil); errors.As(err, &r) {
		return cli.Usagef("%w", err)
	} else if err != nil {
		return err
	}
	w := env.Stdout
	fmt.Fprintf(w, "wrote %s: %s (development only; valid until %s)\n", o.Dir, strings.Join(pki.DevFiles, ", "), set.Until.UTC().Format(time.RFC3339))
	fmt.Fprintf(w, "simulator certificate names: %s\n", strings.Join(o.Hosts, ", "))
	fmt.Fprintf(w, "corebank flags: --tls-cert %s --tls-key %s --client-ca %s --oauth-client-id %s --oauth-client-secret-file %s\n",
		set.BankCert, set.BankKey, set.CA, o.ClientID, set.Secret)
	fmt.Fprintf(w, "serve and corebank ledger flags: --corebank-url https://127.0.0.1:8081 --corebank-ca %s --corebank-client-cert %s --corebank-client-key %s"+
		" --corebank-oauth-token-url https://127.0.0.1:8081/oauth/token --corebank-oauth-client-id %s --corebank-oauth-client-secret-file %s\n",
		set.CA, set.ConsumerCert, set.ConsumerKey, o.ClientID, set.Secret)
	return nil
}
