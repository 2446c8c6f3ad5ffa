package operate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/app/chargehandler"
	"github.com/finedge/idempotent-consumer/app/service/cli"
	"github.com/finedge/idempotent-consumer/app/service/status"
	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
	"github.com/finedge/idempotent-consumer/internal/safetext"
	"github.com/finedge/idempotent-consumer/queue"
)

// ParseCodes parses a --reason flag (comma-separated) against the codes
// a DLQ entry may carry; an unknown code is a usage error naming them.
func ParseCodes(raw string) ([]queue.Code, error) {
	var out []queue.Code
	for _, c := range cli.SplitList(raw) {
		out = append(out, queue.Code(c))
	}
	if c, bad := UnknownCode(out); bad {
		var names []string
		for _, k := range chargehandler.DLQCodes() {
			names = append(names, string(k))
		}
		return nil, cli.Usagef("--reason %q is not a reason code; the codes are %s", c, strings.Join(names, ", "))
	}
	return out, nil
}

// ListJSON is dlq list --json.
type ListJSON struct {
	Total   int     `json:"total"`
	Entries []Entry `json:"entries"`
	// Unseen: DLQ messages the listing could not see (SQS: held by
	// another reader); UnseenApproximate: that count is SQS's estimate.
	Unseen            int  `json:"unseen,omitempty"`
	UnseenApproximate bool `json:"unseenApproximate,omitempty"`
}

// PrintList writes chargerecovery dlq list: entries shown of total, as a
// table.
func PrintList(w io.Writer, entries []Entry, total int) {
	fmt.Fprintf(w, "%d DLQ entr%s", total, plural(total, "y", "ies"))
	if total == 0 {
		fmt.Fprintln(w)
		return
	}
	fmt.Fprintf(w, " (oldest first, %d shown)\n", len(entries))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tCHARGE\tACCOUNT\tAMOUNT\tREASON\tRECEIVED\tAGE\tCOPIES\tDETAIL")
	for _, e := range entries {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\t%d\t%s\n", show(e.ID), dash(e.ChargeID), dash(e.Account), dash(e.Amount), show(e.Code), e.ReceiveCount,
			(time.Duration(e.Age) * time.Second).String(), e.Copies, show(clipDetail(orElse(e.Detail, e.Unreadable))))
	}
	tw.Flush()
}

// clipDetail is a reason's detail as dlq list's last column shows it: at
// most about 80 bytes, cut before a word rather than inside one, so that a
// masked account is never shown cut ("account ********78…" read as
// another mask); dlq show prints it whole.
func clipDetail(s string) string {
	const n = 80
	if len(s) <= n {
		return s
	}
	c := strings.TrimSuffix(charge.Clip(s, n), "…")
	if i := strings.LastIndexByte(c, ' '); i >= n/2 {
		c = c[:i]
	}
	return c + " …"
}

// dash is text from outside as printed (safetext.Text), "-" for none.
func dash(s string) string { return show(orElse(s, "-")) }

// show is text from outside (a message's id, its body's fields, a
// reason's detail) as printed: control, bidirectional and other invisible
// format characters escaped.
var show = safetext.Text

// ShowOptions are a dlq show asked for on the command line.
type ShowOptions struct {
	ID   string // a DLQ entry id or a charge id
	JSON bool
	Out  io.Writer
}

// Show is chargerecovery dlq show: the entries with id or charge id o.ID,
// bodies masked, and the record of their charge.
func Show(ctx context.Context, q queue.Operator, store driver.Store, o ShowOptions) error {
	id := o.ID
	now := time.Now()
	l, err := List(ctx, q, ListOptions{Now: now, Bodies: true, Match: func(e queue.DLQEntry) bool {
		return e.ID == id || ChargeIDOf(e.Body) == id
	}})
	if err != nil {
		return err
	}
	entries := l.Entries
	if len(entries) == 0 {
		if note := l.Incomplete(); note != "" {
			return fmt.Errorf("no DLQ entry with id or charge id %s among those seen; %s", id, note)
		}
		return fmt.Errorf("no DLQ entry with id or charge id %s (chargerecovery dlq list shows what is there)", id)
	}
	out := struct {
		Entries []Entry            `json:"entries"`
		Record  *status.RecordJSON `json:"record,omitempty"`
	}{Entries: entries}
	var rec driver.Record
	if cid := entries[0].Key; cid != "" {
		rec, err = store.Get(ctx, cid, now)
		switch {
		case err == nil:
			// The record's key is the charge id as read: it is shown as
			// the entry shows it (charge.ShowID, the body's accounts).
			rec.Key = entries[0].ChargeID
			r := status.RecordJSONOf(rec, now)
			out.Record = &r
		case !errors.Is(err, idempotency.ErrNotFound):
			return err
		}
	}
	w := o.Out
	if o.JSON {
		return json.NewEncoder(w).Encode(out)
	}
	for _, e := range entries {
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintf(tw, "DLQ entry\t%s\n", show(e.ID))
		fmt.Fprintf(tw, "charge\t%s\n", dash(e.ChargeID))
		if e.Account != "" {
			fmt.Fprintf(tw, "account\t%s\n", show(e.Account))
		}
		if e.Amount != "" {
			fmt.Fprintf(tw, "amount\t%s (%s)\n", show(e.Amount), show(e.Type))
		}
		fmt.Fprintf(tw, "reason\t%s: %s\n", show(e.Code), show(e.Detail))
		if e.Unreadable != "" {
			fmt.Fprintf(tw, "not a valid event\t%s\n", show(e.Unreadable))
		}
		if e.Size > 0 {
			fmt.Fprintf(tw, "size\t%d bytes, over the limit: chargerecovery dlq purge %s removes it\n", e.Size, show(e.ID))
		}
		fmt.Fprintf(tw, "dead-lettered\t%s (%s ago), after %d receive(s)\n", e.At.Format(time.RFC3339), time.Duration(e.Age)*time.Second, e.ReceiveCount)
		if e.Copies > 1 {
			fmt.Fprintf(tw, "copies\t%d (the forward was repeated after a lost answer; one charge)\n", e.Copies)
		}
		fmt.Fprintf(tw, "body\t%s\n", show(e.Body))
		tw.Flush()
		fmt.Fprintln(w)
	}
	if out.Record == nil {
		fmt.Fprintln(w, "record: none (never claimed, or past its retention): a redrive debits it as a new charge")
		return nil
	}
	fmt.Fprintln(w, "record:")
	status.PrintRecord(w, rec, now)
	return nil
}
