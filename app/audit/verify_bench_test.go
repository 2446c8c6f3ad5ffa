package audit

import (
	"crypto/ed25519"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// BenchmarkVerifyKeyedMonth is what an approval or a run pays before it
// acts (service/approval checks the trail's current file whole): a month's
// file of signed lines, checked chain and signature.
func BenchmarkVerifyKeyedMonth(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("lines=%d", n), func(b *testing.B) {
			path := filepath.Join(b.TempDir(), "audit.jsonl")
			tr, err := Open(path)
			if err != nil {
				b.Fatal(err)
			}
			_, k, err := ed25519.GenerateKey(nil)
			if err != nil {
				b.Fatal(err)
			}
			tr.Sign = &Signer{Name: "olga", Key: k}
			ring := Keyring{}
			ring.Add(Key{Name: "olga", Pub: k.Public().(ed25519.PublicKey)})
			for i := range n {
				if _, err := tr.Append(Entry{Operator: "olga", Action: "redrive", ChargeID: fmt.Sprintf("CHG-%d", i), Result: "moved"}); err != nil {
					b.Fatal(err)
				}
			}
			tr.Close()
			b.ResetTimer()
			for b.Loop() {
				f, err := os.Open(path)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := VerifyKeyed(f, path, Report{}, ring); err != nil {
					b.Fatal(err)
				}
				f.Close()
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/float64(n), "µs/line")
		})
	}
}
