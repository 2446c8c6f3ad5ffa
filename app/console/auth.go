package console

import (
	"bufio"
	"bytes"
	"cmp"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode"

	lru "github.com/hashicorp/golang-lru/v2"

	"github.com/finedge/idempotent-consumer/app/audit"
	"github.com/finedge/idempotent-consumer/app/service/approval"
	"github.com/finedge/idempotent-consumer/app/service/cli"
	"github.com/finedge/idempotent-consumer/internal/secretfile"
)

// Role is what a signed-in person may do.
type Role int

// The roles: a viewer sees every page; an operator also acts.
const (
	Viewer Role = iota + 1
	Operator
)

func (r Role) String() string {
	switch r {
	case Viewer:
		return "viewer"
	case Operator:
		return "operator"
	}
	return "none"
}

// ParseRole reads "viewer" or "operator".
func ParseRole(s string) (Role, error) {
	switch s {
	case "viewer":
		return Viewer, nil
	case "operator":
		return Operator, nil
	}
	return 0, fmt.Errorf("role %q is not viewer or operator", s)
}

// Identity is who a request comes from.
type Identity struct {
	Name string
	Role Role
	// Session names the sign-in the request belongs to: the CSRF token is
	// derived from it, so a token from one session is refused in another.
	Session string
}

// Authenticator says who a request comes from; ok is false for anyone not
// signed in (there is no anonymous access), and problem then says why in
// words fit to show.
type Authenticator interface {
	Identify(r *http.Request) (id Identity, ok bool, problem string)
	// SignIn is true when the console shows its own sign-in form (tokens);
	// false when an authenticating proxy in front of it signs people in.
	SignIn() bool
}

// ProxyAuth trusts a header set by an authenticating proxy (the bank's
// identity provider behind oauth2-proxy, an ingress with OIDC, …), and
// only on requests that come from the proxy's own addresses.
type ProxyAuth struct {
	// UserHeader carries the signed-in user (default X-Auth-Request-User).
	UserHeader string
	// GroupsHeader, when set, carries the user's groups, comma-separated;
	// members of OperatorGroup are operators.
	GroupsHeader, OperatorGroup string
	// Operators are users who are operators whatever their groups.
	Operators []string
	// Trusted are the proxy's addresses; a request from anywhere else is
	// refused, header or not (required: at least one).
	Trusted []netip.Prefix
}

// ParsePrefixes reads a comma-separated list of addresses and CIDR ranges.
func ParsePrefixes(s string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		if !strings.Contains(f, "/") {
			a, err := netip.ParseAddr(f)
			if err != nil {
				return nil, fmt.Errorf("%q is not an address or CIDR range", f)
			}
			out = append(out, netip.PrefixFrom(a, a.BitLen()))
			continue
		}
		p, err := netip.ParsePrefix(f)
		if err != nil {
			return nil, fmt.Errorf("%q is not an address or CIDR range", f)
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// identityHeaders are the headers that name the person.
func (a ProxyAuth) identityHeaders() []string {
	if a.GroupsHeader != "" {
		return []string{a.userHeader(), a.GroupsHeader}
	}
	return []string{a.userHeader()}
}

// duplicatedIdentityHeader names a header that says who the person is and
// comes more than once (behind a proxy that appends rather than replaces,
// the client would name itself in the first): such a request is refused.
func duplicatedIdentityHeader(auth Authenticator, r *http.Request) string {
	p, ok := auth.(ProxyAuth)
	if !ok {
		return ""
	}
	for _, h := range p.identityHeaders() {
		if len(r.Header.Values(h)) > 1 {
			return h
		}
	}
	return ""
}

// Identify implements Authenticator.
func (a ProxyAuth) Identify(r *http.Request) (Identity, bool, string) {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	addr, err := netip.ParseAddr(host)
	if err != nil || !slices.ContainsFunc(a.Trusted, func(p netip.Prefix) bool { return p.Contains(addr.Unmap()) }) {
		return Identity{}, false, "this request did not come through the trusted sign-in proxy"
	}
	user := strings.TrimSpace(r.Header.Get(a.userHeader()))
	if user == "" || len(user) > 256 || strings.ContainsFunc(user, func(c rune) bool { return c < 0x20 || c == 0x7f || c == ',' }) {
		return Identity{}, false, "the sign-in proxy named no user"
	}
	role := Viewer
	if slices.Contains(a.Operators, user) {
		role = Operator
	}
	if a.GroupsHeader != "" && a.OperatorGroup != "" {
		for _, g := range strings.Split(r.Header.Get(a.GroupsHeader), ",") {
			if strings.TrimSpace(g) == a.OperatorGroup {
				role = Operator
			}
		}
	}
	return Identity{Name: user, Role: role, Session: "proxy:" + user}, true, ""
}

// SignIn implements Authenticator.
func (ProxyAuth) SignIn() bool { return false }

func (a ProxyAuth) userHeader() string {
	if a.UserHeader == "" {
		return "X-Auth-Request-User"
	}
	return a.UserHeader
}

// tokenUser is one line of a token file.
type tokenUser struct {
	name string
	role Role
	sum  [sha256.Size]byte // of the token
	key  string            // the public key she signs her command-line actions with ("": none)
}

// TokenHashPrefix starts a token's hash in a token file: the file keeps
// only hashes (a leaked file signs nobody in and approves nothing).
const TokenHashPrefix = "sha256:"

// TokenLine is the token file's line for name, role and token (its hash),
// with the public key of her command-line key if she has one ("").
func TokenLine(name string, role Role, token, key string) string {
	sum := sha256.Sum256([]byte(token))
	line := name + " " + role.String() + " " + TokenHashPrefix + hex.EncodeToString(sum[:])
	if key != "" {
		line += " " + key
	}
	return line
}

// ReadTokenFile reads a token file (see TokenAuth): it must be owner-only
// (mode 0600 or 0400); an error names the line, never what is on it (a
// line with its columns swapped would otherwise print a secret).
func ReadTokenFile(path string) ([]tokenUser, error) {
	b, err := secretfile.Read(path)
	if err != nil {
		return nil, err
	}
	return parseTokenFile(path, b)
}

func parseTokenFile(path string, b []byte) ([]tokenUser, error) {
	var out []tokenUser
	names := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		w := strings.Fields(line)
		if len(w) != 3 && len(w) != 4 {
			return nil, fmt.Errorf("%s line %d: has %d fields, want NAME ROLE sha256:HASH [ed25519:KEY]", path, n, len(w))
		}
		role, err := ParseRole(w[1])
		if err != nil {
			return nil, fmt.Errorf("%s line %d: the second field is not viewer or operator (want NAME ROLE sha256:HASH)", path, n)
		}
		hexSum, ok := strings.CutPrefix(w[2], TokenHashPrefix)
		raw, herr := hex.DecodeString(hexSum)
		if !ok || herr != nil || len(raw) != sha256.Size {
			return nil, fmt.Errorf("%s line %d: the third field is not a token's hash (sha256: and 64 hex digits): the file keeps hashes only, never tokens; chargerecovery token NAME ROLE makes a token and its line", path, n)
		}
		if names[w[0]] {
			return nil, fmt.Errorf("%s line %d: a second line for the same name", path, n)
		}
		if !plainName(w[0]) {
			return nil, fmt.Errorf("%s line %d: the name %q has an invisible or control character: it would read as another's name", path, n, w[0])
		}
		var sum [sha256.Size]byte
		copy(sum[:], raw)
		if slices.ContainsFunc(out, func(u tokenUser) bool { return u.sum == sum }) {
			return nil, fmt.Errorf("%s line %d: the same token as an earlier line (each person needs a token of her own)", path, n)
		}
		u := tokenUser{name: w[0], role: role, sum: sum}
		if len(w) == 4 {
			if _, err := audit.ParsePublicKey(w[3]); err != nil {
				return nil, fmt.Errorf("%s line %d: the fourth field: %v", path, n, err)
			}
			u.key = w[3]
			if slices.ContainsFunc(out, func(o tokenUser) bool { return o.key == u.key }) {
				return nil, fmt.Errorf("%s line %d: the same command-line key as an earlier line (each person needs a key of her own)", path, n)
			}
		}
		names[w[0]] = true
		out = append(out, u)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s has no NAME ROLE sha256:HASH line", path)
	}
	return out, nil
}

// plainName says whether a person's name is printable throughout, with
// no space of any kind: no zero-width, bidirectional or control
// character makes a second name that reads as another's.
func plainName(name string) bool {
	for _, r := range name {
		if r == ' ' || !unicode.IsPrint(r) {
			return false
		}
	}
	return true
}

// CommandLineKeys are the public keys of the token file's people who act
// on the command line (the fourth field), for the settings kept in the
// backend.
func CommandLineKeys(path string) ([]approval.Operator, error) {
	users, err := ReadTokenFile(path)
	if err != nil {
		return nil, err
	}
	var out []approval.Operator
	for _, u := range users {
		if u.key != "" {
			out = append(out, approval.Operator{Name: u.name, Role: u.role.String(), Key: u.key})
		}
	}
	return out, nil
}

// TokenOptions configure a TokenAuth.
type TokenOptions struct {
	// File is the token file, lines "NAME ROLE TOKEN" (required). It is
	// looked at again on every request: a removed or changed line ends the
	// sessions its token made, and the token, at the next request; a file
	// that can no longer be read (or is opened to others) admits nobody
	// until it is fixed.
	File string
	// TTL is how long a session lasts (default 8h).
	TTL time.Duration
	// Secure marks the cookie Secure with the __Host- prefix (always,
	// except for plain HTTP on loopback).
	Secure bool
	// MaxSessions bounds the sessions kept (default 10,000); past it the
	// oldest is ended.
	MaxSessions int
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// TokenAuth signs people in with static tokens (small setups), kept in a
// file of lines "NAME ROLE TOKEN" (role viewer or operator; # comments),
// and keeps them signed in with a session held here: the cookie carries a
// random session id and nothing else, so a session ends for good when the
// person signs out, when the token that made it leaves the file, or at its
// expiry (a restart signs everyone out).
type TokenAuth struct {
	o TokenOptions

	fmu   sync.Mutex
	stamp string // the token file's modification time, size and mode when read
	users []tokenUser
	ferr  error // why the file cannot be used now (nil: users are current)

	smu      sync.Mutex                                  // one sign-in at a time counts a person's sessions
	sessions *lru.Cache[[sha256.Size]byte, tokenSession] // by the hash of the cookie's id
}

// sessionsPerPerson bounds one person's sessions (browsers, devices).
const sessionsPerPerson = 20

type tokenSession struct {
	name    string
	sum     [sha256.Size]byte // the token that made it
	expires time.Time
}

// NewTokenAuth reads the token file and returns a TokenAuth.
func NewTokenAuth(o TokenOptions) (*TokenAuth, error) {
	o.TTL = cmp.Or(o.TTL, 8*time.Hour)
	o.MaxSessions = cmp.Or(o.MaxSessions, 10_000)
	if o.Now == nil {
		o.Now = time.Now
	}
	sessions, err := lru.New[[sha256.Size]byte, tokenSession](o.MaxSessions)
	if err != nil {
		return nil, err
	}
	a := &TokenAuth{o: o, sessions: sessions}
	if _, err := a.current(); err != nil {
		return nil, err
	}
	return a, nil
}

// cookieName: the __Host- prefix makes the browser refuse the cookie
// unless it is Secure, path /, and set by this host itself; a console on
// plain HTTP (loopback only) cannot use it.
func (a *TokenAuth) cookieName() string {
	if a.o.Secure {
		return "__Host-chargerecovery-console"
	}
	return "chargerecovery-console"
}

// current is the token file's users as the file is now (read again when
// its modification time, size or mode changed).
func (a *TokenAuth) current() ([]tokenUser, error) {
	a.fmu.Lock()
	defer a.fmu.Unlock()
	st, err := os.Stat(a.o.File)
	if err != nil {
		a.users, a.ferr, a.stamp = nil, err, ""
		return nil, err
	}
	stamp := secretfile.Stamp(st)
	if stamp == a.stamp {
		return a.users, a.ferr
	}
	users, err := ReadTokenFile(a.o.File)
	a.users, a.ferr, a.stamp = users, err, stamp
	return users, err
}

// SignIn implements Authenticator.
func (*TokenAuth) SignIn() bool { return true }

// check finds the user whose token this is (in constant time per user).
func (a *TokenAuth) check(token string) (tokenUser, bool, error) {
	users, err := a.current()
	if err != nil {
		return tokenUser{}, false, err
	}
	sum := sha256.Sum256([]byte(token))
	var found tokenUser
	ok := false
	for _, u := range users {
		if subtle.ConstantTimeCompare(sum[:], u.sum[:]) == 1 {
			found, ok = u, true
		}
	}
	return found, ok, nil
}

// session starts a session for u and returns its cookie.
func (a *TokenAuth) session(u tokenUser) (*http.Cookie, error) {
	id := make([]byte, 32)
	if _, err := rand.Read(id); err != nil {
		return nil, err
	}
	exp := a.o.Now().Add(a.o.TTL)
	a.smu.Lock()
	// A person keeps at most sessionsPerPerson sessions (her oldest ends
	// first): no one's sign-ins can push everyone else's sessions out.
	var hers [][sha256.Size]byte
	for _, k := range a.sessions.Keys() { // oldest first
		if s, ok := a.sessions.Peek(k); ok && s.name == u.name {
			hers = append(hers, k)
		}
	}
	for len(hers) >= sessionsPerPerson {
		a.sessions.Remove(hers[0])
		hers = hers[1:]
	}
	a.sessions.Add(sha256.Sum256(id), tokenSession{name: u.name, sum: u.sum, expires: exp})
	a.smu.Unlock()
	return &http.Cookie{Name: a.cookieName(), Value: base64.RawURLEncoding.EncodeToString(id), Path: "/", Expires: exp,
		HttpOnly: true, Secure: a.o.Secure, SameSite: http.SameSiteStrictMode}, nil
}

// endSession ends the session of r's cookie, if any.
func (a *TokenAuth) endSession(r *http.Request) {
	if k, ok := a.sessionKey(r); ok {
		a.sessions.Remove(k)
	}
}

func (a *TokenAuth) sessionKey(r *http.Request) ([sha256.Size]byte, bool) {
	c, err := r.Cookie(a.cookieName())
	if err != nil {
		return [sha256.Size]byte{}, false
	}
	id, err := base64.RawURLEncoding.DecodeString(c.Value)
	if err != nil || len(id) != 32 {
		return [sha256.Size]byte{}, false
	}
	return sha256.Sum256(id), true
}

// Identify implements Authenticator: the session of the cookie, still
// live, whose token is still in the file; the role is the file's now (a
// demotion counts at once).
func (a *TokenAuth) Identify(r *http.Request) (Identity, bool, string) {
	k, ok := a.sessionKey(r)
	if !ok {
		return Identity{}, false, "sign in"
	}
	s, ok := a.sessions.Get(k)
	if !ok {
		return Identity{}, false, "your session has ended: sign in again"
	}
	if !a.o.Now().Before(s.expires) {
		a.sessions.Remove(k)
		return Identity{}, false, "your session has ended: sign in again"
	}
	users, err := a.current()
	if err != nil {
		return Identity{}, false, "the console's token file cannot be read now: nobody is signed in until it is fixed"
	}
	for _, u := range users {
		if u.name == s.name && subtle.ConstantTimeCompare(u.sum[:], s.sum[:]) == 1 {
			return Identity{Name: u.name, Role: u.role, Session: "token:" + base64.RawURLEncoding.EncodeToString(k[:])}, true, ""
		}
	}
	// The token that made this session is no longer in the file.
	a.sessions.Remove(k)
	return Identity{}, false, "your session has ended: sign in again"
}

// NewToken makes a console token for name with role (viewer or operator)
// and, when key is given, her command-line public key: the token (shown
// once) and her line of the token file, which keeps its hash only. A bad
// name, role or key is a usage error.
func NewToken(name, role, key string) (token, line string, err error) {
	name = strings.TrimSpace(name)
	r, err := ParseRole(role)
	if err != nil || name == "" || !plainName(name) {
		return "", "", cli.Usagef("give a NAME without spaces (nor invisible or control characters) and ROLE viewer or operator")
	}
	if key != "" {
		if _, err := audit.ParsePublicKey(key); err != nil {
			return "", "", cli.Usagef("--key: %w", err)
		}
	}
	var b [24]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", "", err
	}
	token = base64.RawURLEncoding.EncodeToString(b[:])
	return token, TokenLine(name, r, token, key), nil
}
