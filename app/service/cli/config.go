package cli

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
)

// A configuration file (--config FILE, IC_CONFIG) is the environment
// written down: one "key = value" a line, the key a flag's name
// ("queue-url" for --queue-url / IC_QUEUE_URL), the value as on the
// command line. A key acts exactly as its environment variable would: on
// every command that reads that variable, below the variable and the flag
// (flag > environment > file > default). So one file serves every command,
// and a key no command reads from the environment is an error naming its
// line (a typo is never ignored). docs/operations/configuration.md has the
// rules and an example.

// maxConfigSize bounds what is read: a configuration file is a few dozen
// lines, and a device or a log given by mistake must not be read whole.
const maxConfigSize = 1 << 20

// configLine is one "key = value" of a file.
type configLine struct {
	key, value string
	line       int
}

var dsnPassword = regexp.MustCompile(`(?i)(^|[\s?&])(password|sslpassword)\s*=`)

var configKeyRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]*$`)

// configAt is a problem at a line of a file, as an operator reads it.
func configAt(path string, line int, format string, args ...any) error {
	return Usagef("config %s line %d: %s", path, line, fmt.Sprintf(format, args...))
}

// readConfig reads and parses path: blank lines and lines starting with #
// are skipped; every other line is key = value, the value bare (up to a
// " #" comment, trimmed) or a double-quoted Go string. A key given twice,
// a file writable by others, a directory or a file over 1 MiB are errors.
func readConfig(path string) ([]configLine, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, Usagef("config %s: %v", path, unwrapPath(err))
	}
	defer fh.Close()
	st, err := fh.Stat()
	if err != nil {
		return nil, Usagef("config %s: %v", path, unwrapPath(err))
	}
	// A pipe or a device (--config <(…), /dev/null) is read as a file,
	// bounded as one; only a regular file's mode says who may write it.
	switch {
	case st.IsDir():
		return nil, Usagef("config %s: is a directory, not a file", path)
	case st.Mode().IsRegular() && st.Mode().Perm()&0o002 != 0:
		// Whoever may write it chooses the bank URL and the queue.
		return nil, Usagef("config %s: is writable by every user (mode %04o): chmod o-w it", path, st.Mode().Perm())
	}
	data, err := io.ReadAll(io.LimitReader(fh, maxConfigSize+1))
	if err != nil {
		return nil, Usagef("config %s: %v", path, unwrapPath(err))
	}
	if len(data) > maxConfigSize {
		return nil, Usagef("config %s: is over %d bytes; a configuration file is a few lines of key = value", path, maxConfigSize)
	}
	return parseConfig(path, data)
}

func unwrapPath(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

func parseConfig(path string, data []byte) ([]configLine, error) {
	data = bytes.TrimPrefix(data, []byte("\ufeff"))
	var out []configLine
	seen := map[string]int{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 4096), maxConfigSize+1)
	for n := 1; sc.Scan(); n++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		if strings.HasPrefix(text, "[") {
			return nil, configAt(path, n, "%s: sections are not supported; every key is top level and applies to each command that reads it", text)
		}
		k, v, ok := strings.Cut(text, "=")
		if !ok {
			// The text is not printed: a line that is no setting may be
			// anything (a password pasted in the wrong window).
			return nil, configAt(path, n, "the line is not key = value")
		}
		k = strings.TrimSpace(k)
		if !configKeyRE.MatchString(k) {
			return nil, configAt(path, n, "%q is not a key: keys are flag names, such as queue", k)
		}
		value, err := configValue(strings.TrimSpace(v))
		if err != nil {
			return nil, configAt(path, n, "%s: %v", k, err)
		}
		if first, dup := seen[k]; dup {
			return nil, configAt(path, n, "%s is given twice (first on line %d)", k, first)
		}
		seen[k] = n
		out = append(out, configLine{key: k, value: value, line: n})
	}
	if err := sc.Err(); err != nil {
		return nil, Usagef("config %s: %v", path, err)
	}
	return out, nil
}

// configValue is a bare value up to a " #" comment, or a quoted string
// followed by nothing but a comment.
func configValue(v string) (string, error) {
	if strings.HasPrefix(v, `"`) {
		q, err := strconv.QuotedPrefix(v)
		if err != nil {
			return "", fmt.Errorf("%s: the quoted value does not end, or has a bad escape", v)
		}
		if rest := strings.TrimSpace(v[len(q):]); rest != "" && !strings.HasPrefix(rest, "#") {
			return "", fmt.Errorf("%q after the quoted value", rest)
		}
		s, _ := strconv.Unquote(q)
		return s, nil
	}
	if i := strings.Index(v, " #"); i >= 0 {
		v = v[:i]
	}
	if i := strings.Index(v, "\t#"); i >= 0 {
		v = v[:i]
	}
	return strings.TrimSpace(v), nil
}

// holdsPassword says whether a value is a URL with a password in it: a
// configuration file is read by everyone who runs the commands, and holds
// no secrets (they are in owner-only files named by flags).
func holdsPassword(v string) bool {
	if dsnPassword.MatchString(v) {
		return true
	}
	u, err := url.Parse(v)
	if err != nil || u.User == nil {
		return false
	}
	_, has := u.User.Password()
	return has
}
