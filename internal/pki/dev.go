package pki

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
)

// The files WriteDev writes, in the names the commands' flags are given in
// chargerecovery pki's output (and scripts/local-prod.sh uses).
var DevFiles = []string{"ca.crt", "bank.crt", "bank.key", "consumer.crt", "consumer.key", "oauth-client-secret"}

// DevOptions say what WriteDev makes: in Dir (created owner-only if
// missing), the simulator's certificate for Hosts, the consumer's for
// ClientID, valid for Valid from Now (the zero time: the clock's); files
// there are replaced only with Force.
type DevOptions struct {
	Dir, ClientID string
	Hosts         []string
	Valid         time.Duration
	Force         bool
	Now           time.Time
}

// DevSet is where WriteDev wrote each file, and until when they are valid.
type DevSet struct {
	CA, BankCert, BankKey, ConsumerCert, ConsumerKey, Secret string
	Until                                                    time.Time
}

// Refusal is WriteDev refusing a directory (not one, writable by others,
// or holding the files without Force): nothing was written.
type Refusal struct{ msg string }

func (r *Refusal) Error() string { return r.msg }

// WriteDev makes a development CA (its key not kept) and, signed by it,
// the simulator's server certificate, the consumer's client certificate,
// and an OAuth2 client secret; keys and the secret owner-only.
func WriteDev(o DevOptions) (DevSet, error) {
	dir := o.Dir
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return DevSet{}, err
	}
	st, err := os.Stat(dir)
	if err != nil {
		return DevSet{}, err
	}
	if !st.IsDir() {
		return DevSet{}, &Refusal{fmt.Sprintf("--dir %s is not a directory", dir)}
	}
	if st.Mode().Perm()&0o022 != 0 {
		return DevSet{}, &Refusal{fmt.Sprintf("--dir %s is writable by others (%s): anyone could replace a certificate; chmod go-w it or choose another", dir, st.Mode().Perm())}
	}
	if !o.Force {
		var there []string
		for _, name := range DevFiles {
			if _, err := os.Lstat(filepath.Join(dir, name)); err == nil {
				there = append(there, name)
			} else if !errors.Is(err, fs.ErrNotExist) {
				return DevSet{}, err
			}
		}
		if len(there) > 0 {
			return DevSet{}, &Refusal{fmt.Sprintf("%s already holds %s: nothing written (--force replaces them)", dir, strings.Join(there, ", "))}
		}
	}
	now := o.Now
	if now.IsZero() {
		now = time.Now()
	}
	until := now.Add(o.Valid)
	ca, err := NewCAUntil("idempotent-consumer development CA", until)
	if err != nil {
		return DevSet{}, err
	}
	server, err := ca.IssueServer("core-banking simulator", o.Hosts, now.Add(-time.Hour), until)
	if err != nil {
		return DevSet{}, err
	}
	client, err := ca.Issue(o.ClientID, false, now.Add(-time.Hour), until)
	if err != nil {
		return DevSet{}, err
	}
	var b [24]byte
	if _, err := rand.Read(b[:]); err != nil {
		return DevSet{}, err
	}
	path := func(name string) string { return filepath.Join(dir, name) }
	set := DevSet{CA: path("ca.crt"), Secret: path("oauth-client-secret"), Until: until}
	if err := WriteFile(set.Secret, []byte(hex.EncodeToString(b[:])+"\n")); err != nil {
		return DevSet{}, err
	}
	if set.BankCert, set.BankKey, err = server.Write(dir, "bank"); err != nil {
		return DevSet{}, err
	}
	if set.ConsumerCert, set.ConsumerKey, err = client.Write(dir, "consumer"); err != nil {
		return DevSet{}, err
	}
	if err := WriteFile(set.CA, ca.PEM); err != nil {
		return DevSet{}, err
	}
	return set, nil
}

// DevSynopsis is `chargerecovery pki -h`'s text above the flags.
const DevSynopsis = `pki --dir DIR [--host NAME]... [--force]

DEVELOPMENT ONLY: makes a private CA and, signed by it, a server certificate
for the core-banking simulator (SANs 127.0.0.1, localhost and every --host)
and a client certificate for the consumer, plus an OAuth2 client secret, so
that corebank, serve and corebank ledger run over mutual TLS and OAuth2
locally. The CA's key is not kept (nothing more can be signed with it);
keys and the secret are owner-only (0600). A real bank issues its own
certificates: never use these outside a developer's machine.
Existing files are left alone unless --force.

Files: ca.crt, bank.crt, bank.key, consumer.crt, consumer.key, oauth-client-secret`
