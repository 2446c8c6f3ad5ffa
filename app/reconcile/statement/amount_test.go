package statement

import (
	"testing"

	"github.com/finedge/idempotent-consumer/app/charge"
)

func TestParseAmount(t *testing.T) {
	tests := []struct {
		text  string
		cur   charge.Currency
		minor int64
		err   string
	}{
		{"25", "INR", 2500, ""},
		{"25.5", "INR", 2550, ""},
		{"25.00", "INR", 2500, ""},
		{"0025.00", "INR", 2500, ""},
		{"25.", "INR", 2500, ""},
		{".5", "INR", 50, ""},
		{"0", "INR", 0, ""},
		{"1234567.891", "BHD", 1234567891, ""},
		{"1.5", "BHD", 1500, ""},
		{"500", "JPY", 500, ""},
		{"92233720368547758.07", "USD", 9223372036854775807, ""},
		{"9223372036854775807", "JPY", 9223372036854775807, ""},
		{"", "INR", 0, "empty amount"},
		{"-25.00", "INR", 0, `"-25.00" is negative`},
		{"+25.00", "INR", 0, `"+25.00" has a sign`},
		{"2.5e1", "INR", 0, `"2.5e1" has an exponent`},
		{"25E0", "INR", 0, `"25E0" has an exponent`},
		{"25.001", "INR", 0, `"25.001" has 3 decimals, INR has 2`},
		{"25.000", "INR", 0, `"25.000" has 3 decimals, INR has 2`},
		{"25.0", "JPY", 0, `"25.0" has 1 decimals, JPY has 0`},
		{"25.00", "XYZ", 0, `"XYZ" is not a known ISO-4217 currency`},
		{"25.00", "", 0, `"" is not a known ISO-4217 currency`},
		{"2 500", "INR", 0, `"2 500" holds a space`},
		{" 25", "INR", 0, `" 25" holds a space`},
		{"25,00", "INR", 0, `"25,00" is not a decimal amount`},
		{"1.2.3", "INR", 0, `"1.2.3" is not a decimal amount`},
		{".", "INR", 0, `"." is not a decimal amount`},
		{"0x10", "INR", 0, `"0x10" is not a decimal amount`},
		{"NaN", "INR", 0, `"NaN" is not a decimal amount`},
		{"٣", "INR", 0, `"٣" is not a decimal amount`},
		{"92233720368547758.08", "USD", 0, `"92233720368547758.08" is too large`},
		{"92233720368547758.1", "USD", 0, `"92233720368547758.1" is too large`},
		{"9223372036854775808", "JPY", 0, `"9223372036854775808" is too large`},
		{"99999999999999999999999", "INR", 0, `"99999999999999999999999" is too large`},
	}
	for _, tt := range tests {
		t.Run(tt.text+"/"+string(tt.cur), func(t *testing.T) {
			m, err := ParseAmount(tt.text, tt.cur)
			if tt.err != "" {
				if err == nil || err.Error() != tt.err {
					t.Fatalf("ParseAmount(%q, %s) = %v, %v; want error %s", tt.text, tt.cur, m, err, tt.err)
				}
				return
			}
			if err != nil || m != (charge.Money{Minor: tt.minor, Currency: tt.cur}) {
				t.Fatalf("ParseAmount(%q, %s) = %v, %v; want %d", tt.text, tt.cur, m, err, tt.minor)
			}
		})
	}
}

func TestFormatAmount(t *testing.T) {
	tests := []struct {
		m    charge.Money
		want string
	}{
		{charge.Money{Minor: 2500, Currency: "INR"}, "25.00"},
		{charge.Money{Minor: 5, Currency: "INR"}, "0.05"},
		{charge.Money{Minor: 0, Currency: "INR"}, "0.00"},
		{charge.Money{Minor: -2550, Currency: "INR"}, "-25.50"},
		{charge.Money{Minor: -5, Currency: "INR"}, "-0.05"},
		{charge.Money{Minor: 500, Currency: "JPY"}, "500"},
		{charge.Money{Minor: 1500, Currency: "BHD"}, "1.500"},
		{charge.Money{Minor: 7, Currency: "BHD"}, "0.007"},
		{charge.Money{Minor: 9223372036854775807, Currency: "USD"}, "92233720368547758.07"},
		{charge.Money{Minor: -9223372036854775808, Currency: "USD"}, "-92233720368547758.08"},
		{charge.Money{Minor: 2500, Currency: "XYZ"}, "2500"},
	}
	for _, tt := range tests {
		if got := FormatAmount(tt.m); got != tt.want {
			t.Errorf("FormatAmount(%v) = %q, want %q", tt.m, got, tt.want)
		}
		if tt.m.Minor >= 0 && tt.m.Currency.Valid() {
			back, err := ParseAmount(FormatAmount(tt.m), tt.m.Currency)
			if err != nil || back != tt.m {
				t.Errorf("ParseAmount(FormatAmount(%v)) = %v, %v", tt.m, back, err)
			}
		}
	}
}
