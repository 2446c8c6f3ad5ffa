package cli

import (
	"io"
	"os"
	"strings"
)

// SplitList is a comma-separated flag's values, trimmed, empty ones
// dropped.
func SplitList(raw string) []string {
	var out []string
	for _, s := range strings.Split(raw, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// OperatorFlag registers --operator (IC_OPERATOR) on a command that acts.
func OperatorFlag(f *FlagSet) *string {
	v := new(string)
	f.String(v, "operator", "IC_OPERATOR", "", "who is acting, named in the audit line (default: the OS user; required where there is none, as in a container)")
	return v
}

// WhoActs is the operator an audit line names: flag (--operator), else
// the OS user; a usage error when there is neither (a container has no
// USER).
func WhoActs(env *Env, flag string) (string, error) {
	if s := strings.TrimSpace(flag); s != "" {
		return s, nil
	}
	for _, k := range []string{"SUDO_USER", "USER", "LOGNAME"} {
		if v := strings.TrimSpace(env.Getenv(k)); v != "" {
			return v, nil
		}
	}
	return "", Usagef("who is acting? set --operator NAME (IC_OPERATOR): the audit line names the operator, and this process has no OS user name (USER and LOGNAME are unset)")
}

// IsTerminal says whether w is a character device (a progress line there
// is read by a person; in a file or a pipe it is noise).
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
