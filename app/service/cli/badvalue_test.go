package cli

import (
	"errors"
	"strings"
	"testing"
)

// A flag given a value it does not take says what it wants, not the flag
// package's "parse error" (issue 54: --poll-wait 5).
func TestABadFlagValueSaysWhatItWants(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--lease", "5"}, `--lease "5" is not a duration such as 30s or 5m (see chargerecovery test -h)`},
		{[]string{"--concurrency", "eight"}, `--concurrency "eight" is not a whole number`},
		{[]string{"--transient-rate", "half"}, `--transient-rate "half" is not a number`},
		{[]string{"--sync=maybe"}, `--sync "maybe" is not true or false`},
		{[]string{"--lease", `5"s`}, `--lease "5\"s" is not a duration`},
	} {
		_, _, err := parseWith(t, "", nil, tt.args...)
		var u *UsageError
		if !errors.As(err, &u) || !strings.Contains(err.Error(), tt.want) || strings.Contains(err.Error(), "parse error") {
			t.Errorf("%q: %v; want a usage error saying %s", tt.args, err, tt.want)
		}
	}
}
