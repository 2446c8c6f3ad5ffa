package console

import (
	"bufio"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
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
	if user == "" || len(user) > 256 || strings.ContainsFunc(user, func(c rune) bool { return c < 0x20 || c == 0x7f }) {
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
}

// TokenAuth signs people in with static tokens (small setups), kept in a
// file of lines "NAME ROLE TOKEN" (role viewer or operator; # comments),
// and keeps them signed in with a session cookie signed by a key of this
// process (a restart signs everyone out).
type TokenAuth struct {
	users  []tokenUser
	key    []byte
	ttl    time.Duration
	now    func() time.Time
	secure bool
}

// cookieName: the __Host- prefix makes the browser refuse the cookie
// unless it is Secure, path /, and set by this host itself; a console on
// plain HTTP (loopback only) cannot use it.
func (a *TokenAuth) cookieName() string {
	if a.secure {
		return "__Host-chargerecovery-console"
	}
	return "chargerecovery-console"
}

// ReadTokenFile reads a token file (see TokenAuth). Tokens shorter than 16
// characters are refused.
func ReadTokenFile(path string) ([]tokenUser, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []tokenUser
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		w := strings.Fields(line)
		if len(w) != 3 {
			return nil, fmt.Errorf("%s line %d: want NAME ROLE TOKEN", path, n)
		}
		role, err := ParseRole(w[1])
		if err != nil {
			return nil, fmt.Errorf("%s line %d: %w", path, n, err)
		}
		if len(w[2]) < 16 {
			return nil, fmt.Errorf("%s line %d: the token of %s is shorter than 16 characters", path, n, w[0])
		}
		out = append(out, tokenUser{name: w[0], role: role, sum: sha256.Sum256([]byte(w[2]))})
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s has no NAME ROLE TOKEN line", path)
	}
	return out, nil
}

// NewTokenAuth signs in users; a session lasts ttl (default 8h). secure
// marks the cookie Secure (always, except for plain HTTP on loopback).
func NewTokenAuth(users []tokenUser, ttl time.Duration, secure bool, now func() time.Time) (*TokenAuth, error) {
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return nil, err
	}
	if ttl <= 0 {
		ttl = 8 * time.Hour
	}
	if now == nil {
		now = time.Now
	}
	return &TokenAuth{users: users, key: key, ttl: ttl, now: now, secure: secure}, nil
}

// SignIn implements Authenticator.
func (*TokenAuth) SignIn() bool { return true }

// check finds the user whose token this is (in constant time per user).
func (a *TokenAuth) check(token string) (tokenUser, bool) {
	sum := sha256.Sum256([]byte(token))
	var found tokenUser
	ok := false
	for _, u := range a.users {
		if subtle.ConstantTimeCompare(sum[:], u.sum[:]) == 1 {
			found, ok = u, true
		}
	}
	return found, ok
}

func (a *TokenAuth) sign(payload string) string {
	m := hmac.New(sha256.New, a.key)
	m.Write([]byte(payload))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// session is the cookie for u: name, role, expiry and a random session id,
// signed.
func (a *TokenAuth) session(u tokenUser) (*http.Cookie, error) {
	sid := make([]byte, 16)
	if _, err := rand.Read(sid); err != nil {
		return nil, err
	}
	exp := a.now().Add(a.ttl)
	payload := strings.Join([]string{base64.RawURLEncoding.EncodeToString([]byte(u.name)), u.role.String(),
		strconv.FormatInt(exp.Unix(), 10), base64.RawURLEncoding.EncodeToString(sid)}, ".")
	return &http.Cookie{Name: a.cookieName(), Value: payload + "." + a.sign(payload), Path: "/", Expires: exp,
		HttpOnly: true, Secure: a.secure, SameSite: http.SameSiteStrictMode}, nil
}

var errBadSession = errors.New("bad session")

func (a *TokenAuth) parse(v string) (Identity, error) {
	i := strings.LastIndexByte(v, '.')
	if i < 0 {
		return Identity{}, errBadSession
	}
	payload, mac := v[:i], v[i+1:]
	if !hmac.Equal([]byte(mac), []byte(a.sign(payload))) {
		return Identity{}, errBadSession
	}
	w := strings.Split(payload, ".")
	if len(w) != 4 {
		return Identity{}, errBadSession
	}
	name, err := base64.RawURLEncoding.DecodeString(w[0])
	if err != nil {
		return Identity{}, errBadSession
	}
	role, err := ParseRole(w[1])
	if err != nil {
		return Identity{}, errBadSession
	}
	exp, err := strconv.ParseInt(w[2], 10, 64)
	if err != nil || !a.now().Before(time.Unix(exp, 0)) {
		return Identity{}, errBadSession
	}
	// The role is the token file's now, not the cookie's: a user removed
	// or demoted is so at once.
	for _, u := range a.users {
		if u.name == string(name) {
			return Identity{Name: u.name, Role: min(role, u.role), Session: "token:" + w[3]}, nil
		}
	}
	return Identity{}, errBadSession
}

// Identify implements Authenticator.
func (a *TokenAuth) Identify(r *http.Request) (Identity, bool, string) {
	c, err := r.Cookie(a.cookieName())
	if err != nil {
		return Identity{}, false, "sign in"
	}
	id, err := a.parse(c.Value)
	if err != nil {
		return Identity{}, false, "your session has ended: sign in again"
	}
	return id, true, ""
}
