package statement

import (
	"bufio"
	"io"
	"runtime"
	"runtime/metrics"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
)

// writeBig writes a camt.053.001.08 of the collection account with n
// booked entries of one transaction each, as it goes (never held whole).
func writeBig(w io.Writer, n int) error {
	bw := bufio.NewWriterSize(w, 64<<10)
	bw.WriteString(`<?xml version="1.0" encoding="UTF-8"?>
<Document xmlns="urn:iso:std:iso:20022:tech:xsd:camt.053.001.08">
 <BkToCstmrStmt>
  <GrpHdr><MsgId>BIG</MsgId><CreDtTm>2026-12-02T00:00:00Z</CreDtTm></GrpHdr>
  <Stmt>
   <Id>BIG-1</Id>
   <FrToDt><FrDtTm>2026-12-01T00:00:00Z</FrDtTm><ToDtTm>2026-12-01T23:59:59Z</ToDtTm></FrToDt>
   <Acct><Id><IBAN>GB33BUKB20201555555555</IBAN></Id></Acct>
`)
	var num []byte
	for i := range n {
		num = strconv.AppendInt(num[:0], int64(i), 10)
		bw.WriteString(`   <Ntry>
    <Amt Ccy="INR">25.00</Amt>
    <CdtDbtInd>CRDT</CdtDbtInd>
    <Sts><Cd>BOOK</Cd></Sts>
    <BookgDt><Dt>2026-12-01</Dt></BookgDt>
    <AcctSvcrRef>BNK-`)
		bw.Write(num)
		bw.WriteString(`</AcctSvcrRef>
    <BkTxCd><Prtry><Cd>FEE</Cd></Prtry></BkTxCd>
    <NtryDtls><TxDtls>
     <Refs><EndToEndId>chg-`)
		bw.Write(num)
		bw.WriteString(`</EndToEndId></Refs>
     <Amt Ccy="INR">25.00</Amt>
     <RltdPties><DbtrAcct><Id><Othr><Id>00`)
		bw.Write(num)
		bw.WriteString(`</Id></Othr></Id></DbtrAcct></RltdPties>
     <RmtInf><Ustrd>SMS_ALERT_FEE 2026-12-01</Ustrd></RmtInf>
    </TxDtls></NtryDtls>
   </Ntry>
`)
	}
	bw.WriteString("  </Stmt>\n </BkToCstmrStmt>\n</Document>\n")
	return bw.Flush()
}

// countingReader counts the bytes read.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// BenchmarkRead1M reads a camt.053 of 1,000,000 entries generated on the
// fly through a pipe, and reports the peak of the heap in use (sampled
// every millisecond with runtime/metrics: heap objects plus the unused part
// of the heap's spans) and the entries read per second. Run it once:
//
//	go test -run x -bench Read1M -benchtime 1x ./reconcile/statement
func BenchmarkRead1M(b *testing.B) {
	const n = 1_000_000
	samples := []metrics.Sample{
		{Name: "/memory/classes/heap/objects:bytes"},
		{Name: "/memory/classes/heap/unused:bytes"},
	}
	heap := func() uint64 {
		metrics.Read(samples)
		return samples[0].Value.Uint64() + samples[1].Value.Uint64()
	}
	var peak atomic.Uint64
	var total time.Duration
	var bytesRead int64
	for b.Loop() {
		b.StopTimer()
		runtime.GC()
		peak.Store(heap())
		done := make(chan struct{})
		sampled := make(chan struct{})
		go func() {
			defer close(sampled)
			tick := time.NewTicker(time.Millisecond)
			defer tick.Stop()
			for {
				if h := heap(); h > peak.Load() {
					peak.Store(h)
				}
				select {
				case <-done:
					return
				case <-tick.C:
				}
			}
		}()
		pr, pw := io.Pipe()
		go func() { pw.CloseWithError(writeBig(pw, n)) }()
		cr := &countingReader{r: pr}
		b.StartTimer()
		start := time.Now()
		postings := 0
		h, err := Read(cr, "big.xml", Options{CollectionAccount: "GB33BUKB20201555555555"}, func(p Posting) error {
			postings++
			return nil
		})
		total += time.Since(start)
		b.StopTimer()
		close(done)
		<-sampled
		pr.Close()
		if err != nil {
			b.Fatal(err)
		}
		if postings != n || h.Entries != n {
			b.Fatalf("%d postings, header %+v", postings, h)
		}
		bytesRead += cr.n
		b.StartTimer()
	}
	b.ReportMetric(float64(peak.Load())/(1<<20), "peak-heap-MB")
	b.ReportMetric(float64(b.N)*n/total.Seconds(), "entries/s")
	b.ReportMetric(float64(bytesRead)/float64(b.N)/(1<<20), "MB-read/op")
	b.ReportMetric(float64(bytesRead)/(1<<20)/total.Seconds(), "MB/s")
}
