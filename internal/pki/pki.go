// Package pki makes a private CA and certificates with crypto/x509, for the
// demo's and the tests' mutual TLS (nothing is checked in).
package pki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// CA is a certificate authority.
type CA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	PEM  []byte
}

// NewCA makes a CA valid for a day.
func NewCA(name string) (*CA, error) { return NewCAUntil(name, time.Now().Add(24*time.Hour)) }

// NewCAUntil makes a CA valid until notAfter.
func NewCAUntil(name string, notAfter time.Time) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{SerialNumber: serial(), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: notAfter,
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &CA{cert: cert, key: key, PEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}, nil
}

// Pair is a certificate and its key, PEM.
type Pair struct{ Cert, Key []byte }

// Issue signs a certificate for name: a server certificate for 127.0.0.1
// and localhost when server, else a client certificate; valid from
// notBefore until notAfter.
func (ca *CA) Issue(name string, server bool, notBefore, notAfter time.Time) (Pair, error) {
	if server {
		return ca.IssueServer(name, []string{"127.0.0.1", "localhost"}, notBefore, notAfter)
	}
	return ca.issue(name, nil, notBefore, notAfter)
}

// IssueServer signs a server certificate naming hosts (IP addresses become
// IP SANs, the rest DNS names), valid from notBefore until notAfter.
func (ca *CA) IssueServer(name string, hosts []string, notBefore, notAfter time.Time) (Pair, error) {
	if hosts == nil {
		hosts = []string{}
	}
	return ca.issue(name, hosts, notBefore, notAfter)
}

// issue signs a client certificate (hosts nil) or a server certificate
// for hosts.
func (ca *CA) issue(name string, hosts []string, notBefore, notAfter time.Time) (Pair, error) {
	server := hosts != nil
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return Pair{}, err
	}
	tmpl := &x509.Certificate{SerialNumber: serial(), Subject: pkix.Name{CommonName: name},
		NotBefore: notBefore, NotAfter: notAfter, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		for _, h := range hosts {
			if ip := net.ParseIP(h); ip != nil {
				tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
			} else {
				tmpl.DNSNames = append(tmpl.DNSNames, h)
			}
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return Pair{}, err
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return Pair{}, err
	}
	return Pair{Cert: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		Key: pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb})}, nil
}

// Write puts the pair in dir as name.crt and name.key (0600), the key
// first, each by rename, so that a reader never sees half a file.
func (p Pair) Write(dir, name string) (cert, key string, err error) {
	cert, key = filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	if err := WriteFile(key, p.Key); err != nil {
		return "", "", err
	}
	return cert, key, WriteFile(cert, p.Cert)
}

// WriteFile writes b to path 0600 through a rename. The temporary file is
// created afresh (O_EXCL, after removing a stale one), so a link left in
// its place is never followed.
func WriteFile(path string, b []byte) error {
	tmp := path + ".tmp"
	if err := os.Remove(tmp); err != nil && !os.IsNotExist(err) {
		return err
	}
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		os.Remove(tmp)
		return err
	}
	if err := f.Close(); err != nil {
		os.Remove(tmp)
		return err
	}
	return os.Rename(tmp, path)
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	return n
}
