package pki

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestWriteDev(t *testing.T) {
	valid := 24 * time.Hour
	fresh := func(t *testing.T) string { return filepath.Join(t.TempDir(), "pki") }
	for _, tc := range []struct {
		name    string
		dir     func(t *testing.T) string
		force   bool
		refused bool
	}{
		{name: "a new directory", dir: fresh},
		{name: "files there", dir: func(t *testing.T) string {
			d := fresh(t)
			if _, err := WriteDev(DevOptions{Dir: d, ClientID: "c", Hosts: []string{"127.0.0.1"}, Valid: valid}); err != nil {
				t.Fatal(err)
			}
			return d
		}, refused: true},
		{name: "files there, forced", dir: func(t *testing.T) string {
			d := fresh(t)
			if err := os.MkdirAll(d, 0o700); err != nil {
				t.Fatal(err)
			}
			return d
		}, force: true},
		{name: "writable by others", dir: func(t *testing.T) string {
			d := fresh(t)
			if err := os.MkdirAll(d, 0o700); err != nil || os.Chmod(d, 0o777) != nil {
				t.Fatal(err)
			}
			return d
		}, refused: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := tc.dir(t)
			before, _ := os.ReadFile(filepath.Join(dir, "ca.crt"))
			set, err := WriteDev(DevOptions{Dir: dir, ClientID: "chargerecovery", Hosts: []string{"127.0.0.1", "bank.test"}, Valid: valid, Force: tc.force})
			var r *Refusal
			if tc.refused {
				after, _ := os.ReadFile(filepath.Join(dir, "ca.crt"))
				if !errors.As(err, &r) || string(before) != string(after) {
					t.Fatalf("WriteDev: %v; want a refusal that writes nothing", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range []string{set.BankKey, set.ConsumerKey, set.Secret, set.CA} {
				if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != 0o600 {
					t.Fatalf("%s: %v %v, want mode 0600", p, err, fi)
				}
			}
			caPEM, _ := os.ReadFile(set.CA)
			roots := x509.NewCertPool()
			roots.AppendCertsFromPEM(caPEM)
			for _, c := range []struct{ cert, key, host string }{{set.BankCert, set.BankKey, "bank.test"}, {set.ConsumerCert, set.ConsumerKey, ""}} {
				pair, err := tls.LoadX509KeyPair(c.cert, c.key)
				if err != nil {
					t.Fatal(err)
				}
				leaf, _ := x509.ParseCertificate(pair.Certificate[0])
				usage := x509.ExtKeyUsageClientAuth
				if c.host != "" {
					usage = x509.ExtKeyUsageServerAuth
				}
				if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: c.host, KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
					t.Fatalf("%s does not verify against the CA: %v", c.cert, err)
				}
				if leaf.NotAfter.After(set.Until.Add(time.Second)) {
					t.Fatalf("%s valid until %s, past %s", c.cert, leaf.NotAfter, set.Until)
				}
			}
		})
	}
}
