// Package redact is the one rule for what may be printed of a value that
// can carry a credential — a URL or a connection string given in a flag or
// an environment variable — wherever it goes: a log line, an error,
// status, /readyz, a metric label or a span. It imports only the standard
// library.
package redact

import (
	"errors"
	"net/url"
	"regexp"
	"strings"
)

// URL is raw without what may be secret: user info (a password, or a
// token used as a user name), the query and the fragment — also when raw
// does not parse (a password holding '/' or '#' breaks parsing, and the
// parser's error would quote it). A key=value connection string keeps its
// keys and loses the values of password-like keys.
func URL(raw string) string {
	if raw == "" {
		return ""
	}
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok {
		if strings.Contains(raw, "=") && !strings.ContainsAny(raw, "/?") {
			return secretKeys.ReplaceAllString(raw, "$1=[redacted]")
		}
		scheme, rest = "", raw
	} else {
		scheme += "://"
	}
	// The last '@' ends the user info, whatever the password holds.
	if i := strings.LastIndex(rest, "@"); i >= 0 {
		rest = rest[i+1:]
	}
	if i := strings.IndexAny(rest, "?#"); i >= 0 {
		rest = rest[:i]
	}
	return scheme + rest
}

// namedUser are the schemes whose user info before the ':' is a user
// name (the password after it is the secret); elsewhere (https) a user
// name may be a token.
var namedUser = map[string]bool{"postgres": true, "postgresql": true, "redis": true, "rediss": true}

// Server is the server raw names, for an error that must say which one
// failed: host:port/database of a URL (user info, query and fragment
// dropped) or of a key=value connection string (host, port, dbname);
// "" when raw names none.
func Server(raw string) string {
	if raw == "" {
		return ""
	}
	if !strings.Contains(raw, "://") && strings.Contains(raw, "=") {
		kv := map[string]string{}
		for _, m := range dsnPair.FindAllStringSubmatch(raw, -1) {
			kv[strings.ToLower(m[1])] = strings.Trim(m[2], "'")
		}
		s := kv["host"]
		if kv["port"] != "" {
			s += ":" + kv["port"]
		}
		if kv["dbname"] != "" {
			s += "/" + kv["dbname"]
		}
		return s
	}
	_, rest, _ := strings.Cut(URL(raw), "://")
	return rest
}

var dsnPair = regexp.MustCompile(`(?i)\b(host|port|dbname)\s*=\s*('[^']*'|[^\s]+)`)

var secretKeys = regexp.MustCompile(`(?i)\b(password|passwd|pwd|secret|token|sslpassword|sslkey)\s*=\s*('[^']*'|\S+)`)

// Error is err as it may be printed when it came from parsing or using
// raw: every occurrence of raw shows as URL(raw), the password of raw's
// user info nowhere, and a URL parser's complaint — which quotes pieces of
// what it could not parse, e.g. `invalid port ":Zm9v"` from a password —
// becomes "not a valid URL". errors.Is and errors.As still see err.
func Error(err error, raw string) error {
	if err == nil || raw == "" {
		return err
	}
	var ue *url.Error
	if errors.As(err, &ue) && ue.Op == "parse" {
		return &redacted{msg: "not a valid URL (" + URL(raw) + ")", err: err}
	}
	msg := err.Error()
	if !strings.Contains(msg, raw) && !containsSecret(msg, raw) {
		return err
	}
	msg = strings.ReplaceAll(msg, raw, URL(raw))
	for _, s := range secretsOf(raw) {
		msg = strings.ReplaceAll(msg, s, "[redacted]")
	}
	return &redacted{msg: msg, err: err}
}

// secretsOf are the parts of raw that must never be printed: the user
// info (whole, and its password), and the query. For a database URL
// (postgres, redis) a user name is a name, not a credential, and stays:
// "user=postgres" in an error says which role failed, and replacing the
// word everywhere made "postgres: connect" read "[redacted]: connect".
func secretsOf(raw string) []string {
	var out []string
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok {
		scheme, rest = "", raw
	}
	if i := strings.LastIndex(rest, "@"); i >= 0 {
		info := rest[:i]
		user, pw, hasPW := strings.Cut(info, ":")
		if !namedUser[strings.ToLower(scheme)] || hasPW && user != "" {
			out = append(out, info)
		}
		if hasPW && pw != "" {
			out = append(out, pw, url.PathEscape(pw), url.QueryEscape(pw))
		}
	}
	if i := strings.IndexAny(rest, "?#"); i >= 0 && i+1 < len(rest) {
		out = append(out, rest[i+1:])
	}
	for _, m := range secretKeys.FindAllStringSubmatch(raw, -1) {
		out = append(out, strings.Trim(m[2], "'"))
	}
	return slicesCompactShort(out)
}

// slicesCompactShort drops secrets too short to search for without
// mangling the text around them (a one-letter password).
func slicesCompactShort(s []string) []string {
	out := s[:0]
	for _, v := range s {
		if len(v) >= 3 {
			out = append(out, v)
		}
	}
	return out
}

func containsSecret(msg, raw string) bool {
	for _, s := range secretsOf(raw) {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

type redacted struct {
	msg string
	err error
}

func (r *redacted) Error() string { return r.msg }
func (r *redacted) Unwrap() error { return r.err }
