package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"context"

	"github.com/finedge/idempotent-consumer/charge"
	"github.com/finedge/idempotent-consumer/chargehandler"
	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
	"github.com/finedge/idempotent-consumer/queue"
	"github.com/finedge/idempotent-consumer/service/cli"
	"github.com/finedge/idempotent-consumer/service/operate"
	"github.com/finedge/idempotent-consumer/service/status"
)

// dlqEntry is one DLQ entry as an operator sees it.
type dlqEntry = operate.Entry

// codesFlag parses --reason against the codes a DLQ entry may carry.
func codesFlag(raw string) ([]queue.Code, error) {
	var out []queue.Code
	for _, c := range splitList(raw) {
		out = append(out, queue.Code(c))
	}
	if c, bad := operate.UnknownCode(out); bad {
		var names []string
		for _, k := range chargehandler.DLQCodes() {
			names = append(names, string(k))
		}
		return nil, cli.Usagef("--reason %q is not a reason code; the codes are %s", c, strings.Join(names, ", "))
	}
	return out, nil
}

func splitList(raw string) []string {
	var out []string
	for _, s := range strings.Split(raw, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

func runDLQ(ctx context.Context, env *cli.Env, args []string) error {
	if len(args) == 0 || (args[0] != "list" && args[0] != "show" && args[0] != "purge") {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help") {
			fmt.Fprintln(env.Stderr, "usage: chargerecovery dlq list [flags] | dlq show [flags] ID | dlq purge [flags] ID…\n\n  list   what is on the DLQ: charge, masked account, amount, reason, receive count, age\n  show   one entry (by its DLQ id or its charge id): the body with the account masked, and the charge's record\n  purge  delete entries for good: those over the size limit, which can never be redriven (others only with --force)\n\nchargerecovery dlq list -h, dlq show -h and dlq purge -h give the flags.")
			return cli.ErrHelp
		}
		return cli.Usagef("say dlq list, dlq show ID or dlq purge ID… (see chargerecovery dlq -h)")
	}
	switch args[0] {
	case "list":
		return runDLQList(ctx, env, args[1:])
	case "purge":
		return runDLQPurge(ctx, env, args[1:])
	}
	return runDLQShow(ctx, env, args[1:])
}

func runDLQList(ctx context.Context, env *cli.Env, args []string) error {
	f, bc, asJSON := opsFlags(env, "dlq list", "dlq list [--reason CODE,…] [--charge-id ID,…] [--older-than D] [--limit N] [--json]")
	var codes, ids string
	var olderThan time.Duration
	var limit int
	f.String(&codes, "reason", "", "", "only these reason codes, comma-separated")
	f.String(&ids, "charge-id", "", "", "only these charge ids, comma-separated")
	f.Duration(&olderThan, "older-than", "", 0, "only entries dead-lettered longer ago than this")
	f.Int(&limit, "limit", "", 100, "show at most this many (oldest first)")
	if err := f.Parse(args, false); err != nil {
		return err
	}
	now := time.Now()
	o := operate.ListOptions{Now: now, Match: operate.ChargeMatch(splitList(ids))}
	var err error
	if o.Codes, err = codesFlag(codes); err != nil {
		return err
	}
	if limit < 1 || olderThan < 0 {
		return cli.Usagef("--limit must be at least 1 and --older-than not negative")
	}
	if olderThan > 0 {
		o.Before = now.Add(-olderThan)
	}
	b, err := openForOps(ctx, bc)
	if err != nil {
		return err
	}
	defer b.Close()
	l, err := operate.List(ctx, b.Queue, o)
	if err != nil {
		return err
	}
	total := len(l.Entries)
	entries := l.Entries[:min(limit, len(l.Entries))]
	if *asJSON {
		if err := json.NewEncoder(env.Stdout).Encode(struct {
			Total   int        `json:"total"`
			Entries []dlqEntry `json:"entries"`
			// Unseen: DLQ messages the listing could not see (SQS: held by
			// another reader); UnseenApproximate: that count is SQS's estimate.
			Unseen            int  `json:"unseen,omitempty"`
			UnseenApproximate bool `json:"unseenApproximate,omitempty"`
		}{total, append([]dlqEntry{}, entries...), l.Unseen, l.Approximate}); err != nil {
			return err
		}
	} else {
		printDLQ(env.Stdout, entries, total)
	}
	if note := l.Incomplete(); note != "" {
		// Never a silent "0 DLQ entries": an incomplete listing exits 1.
		return errors.New(note)
	}
	return nil
}

func printDLQ(w io.Writer, entries []dlqEntry, total int) {
	fmt.Fprintf(w, "%d DLQ entr%s", total, map[bool]string{true: "y", false: "ies"}[total == 1])
	if total == 0 {
		fmt.Fprintln(w)
		return
	}
	fmt.Fprintf(w, " (oldest first, %d shown)\n", len(entries))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tCHARGE\tACCOUNT\tAMOUNT\tREASON\tRECEIVED\tAGE\tCOPIES\tDETAIL")
	for _, e := range entries {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\t%d\t%s\n", e.ID, dash(e.ChargeID), dash(e.Account), dash(e.Amount), e.Code, e.ReceiveCount,
			(time.Duration(e.Age) * time.Second).String(), e.Copies, charge.Clip(cmpOr(e.Detail, e.Unreadable), 80))
	}
	tw.Flush()
}

func dash(s string) string { return cmpOr(s, "-") }

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func runDLQShow(ctx context.Context, env *cli.Env, args []string) error {
	f, bc, asJSON := opsFlags(env, "dlq show", "dlq show [flags] ID (a DLQ entry id or a charge id)")
	if err := f.Parse(args, true); err != nil {
		return err
	}
	if len(f.Args()) != 1 {
		return cli.Usagef("give exactly one ID: a DLQ entry id or a charge id (see dlq list)")
	}
	id := f.Args()[0]
	b, err := openForOps(ctx, bc)
	if err != nil {
		return err
	}
	defer b.Close()
	now := time.Now()
	l, err := operate.List(ctx, b.Queue, operate.ListOptions{Now: now, Bodies: true, Match: func(e queue.DLQEntry) bool {
		return e.ID == id || operate.ChargeIDOf(e.Body) == id
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
		Entries []dlqEntry         `json:"entries"`
		Record  *status.RecordJSON `json:"record,omitempty"`
	}{Entries: entries}
	var rec driver.Record
	if cid := entries[0].ChargeID; cid != "" {
		rec, err = b.Store.Get(ctx, cid, now)
		switch {
		case err == nil:
			r := status.RecordJSONOf(rec, now)
			out.Record = &r
		case !errors.Is(err, idempotency.ErrNotFound):
			return err
		}
	}
	if *asJSON {
		return json.NewEncoder(env.Stdout).Encode(out)
	}
	for _, e := range entries {
		tw := tabwriter.NewWriter(env.Stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintf(tw, "DLQ entry\t%s\n", e.ID)
		fmt.Fprintf(tw, "charge\t%s\n", dash(e.ChargeID))
		if e.Account != "" {
			fmt.Fprintf(tw, "account\t%s\n", e.Account)
		}
		if e.Amount != "" {
			fmt.Fprintf(tw, "amount\t%s (%s)\n", e.Amount, e.Type)
		}
		fmt.Fprintf(tw, "reason\t%s: %s\n", e.Code, e.Detail)
		if e.Unreadable != "" {
			fmt.Fprintf(tw, "not a valid event\t%s\n", e.Unreadable)
		}
		if e.Size > 0 {
			fmt.Fprintf(tw, "size\t%d bytes, over the limit: chargerecovery dlq purge %s removes it\n", e.Size, e.ID)
		}
		fmt.Fprintf(tw, "dead-lettered\t%s (%s ago), after %d receive(s)\n", e.At.Format(time.RFC3339), time.Duration(e.Age)*time.Second, e.ReceiveCount)
		if e.Copies > 1 {
			fmt.Fprintf(tw, "copies\t%d (the forward was repeated after a lost answer; one charge)\n", e.Copies)
		}
		fmt.Fprintf(tw, "body\t%s\n", e.Body)
		tw.Flush()
		fmt.Fprintln(env.Stdout)
	}
	if out.Record == nil {
		fmt.Fprintln(env.Stdout, "record: none (never claimed, or past its retention): a redrive debits it as a new charge")
		return nil
	}
	fmt.Fprintln(env.Stdout, "record:")
	status.PrintRecord(env.Stdout, rec, now)
	return nil
}
