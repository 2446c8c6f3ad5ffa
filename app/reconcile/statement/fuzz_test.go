package statement

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// FuzzRead: no input makes Read panic, and every posting it hands over
// has a bank key, an account and a positive amount (with
// UnkeyedReversals, a reversal may have no key). The seeds are whole
// files: minimizing a new input takes long, so fuzz with
//
//	go test -run x -fuzz FuzzRead -fuzztime 1m -fuzzminimizetime 1s ./reconcile/statement
func FuzzRead(f *testing.F) {
	files, err := filepath.Glob(filepath.Join("testdata", "*.*"))
	if err != nil || len(files) == 0 {
		f.Fatalf("no seeds: %v", err)
	}
	for _, name := range files {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, "")
		f.Add(b, "GB33BUKB20201555555555")
		f.Add(b, "FEECOLL-TOKYO-01")
	}
	f.Add([]byte(good), "GB33BUKB20201555555555")
	f.Fuzz(func(t *testing.T, data []byte, collection string) {
		_, _ = Read(bytes.NewReader(data), "fuzz", Options{CollectionAccount: collection}, func(p Posting) error {
			if p.BankKey == "" || p.Amount.Minor <= 0 || p.Account == "" {
				t.Fatalf("posting %+v", p)
			}
			return nil
		})
		// Reversals without a bank key asked for: only a reversal may come
		// without one.
		_, _ = Read(bytes.NewReader(data), "fuzz", Options{CollectionAccount: collection, UnkeyedReversals: true}, func(p Posting) error {
			if p.BankKey == "" && !p.Reversal || p.Amount.Minor <= 0 {
				t.Fatalf("posting %+v", p)
			}
			return nil
		})
	})
}
