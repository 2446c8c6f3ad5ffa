package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/finedge/idempotent-consumer/queue"
	"github.com/finedge/idempotent-consumer/service/cli"
	"github.com/finedge/idempotent-consumer/service/operate"
)

// runDLQPurge deletes DLQ entries by id for good: the way out for an entry
// that can never be redriven (its body is over the size limit). Any other
// entry carries a charge someone may still have to recover, so it is
// refused unless --force says the operator decided so; every deletion is
// an audit line naming the operator, the entries and their charges.
func runDLQPurge(ctx context.Context, env *cli.Env, args []string) error {
	f, bc, asJSON := opsFlags(env, "dlq purge", "dlq purge [--force] [--operator NAME] ID [ID …] (DLQ entry ids, from dlq list)")
	var force bool
	f.Bool(&force, "force", "", false, "also delete entries that could be redriven (a charge on them is then no longer on the DLQ: check each with dlq show first)")
	opFlag := operatorFlag(f)
	if err := f.Parse(args, true); err != nil {
		return err
	}
	operator, err := whoActs(env, *opFlag)
	if err != nil {
		return err
	}
	ids := f.Args()
	if len(ids) == 0 {
		return cli.Usagef("give the DLQ entry ids to delete (dlq list shows them)")
	}
	b, err := openForOps(ctx, bc)
	if err != nil {
		return err
	}
	defer b.Close()
	purger, ok := b.Queue.(queue.DLQPurger)
	if !ok {
		return cli.Usagef("this backend's DLQ has no entries that cannot be redriven (SQS refuses messages over the size limit itself); redrive the entries, or let the DLQ's retention expire them")
	}
	listing, err := operate.List(ctx, b.Queue, operate.ListOptions{Now: time.Now(), Match: func(e queue.DLQEntry) bool { return slices.Contains(ids, e.ID) }})
	if err != nil {
		return err
	}
	entries := listing.Entries
	var chosen, refused, charges []string
	for _, e := range entries {
		if e.Size == 0 && !force {
			refused = append(refused, e.ID)
			continue
		}
		chosen = append(chosen, e.ID)
		charges = append(charges, cmpOr(e.ChargeID, "message "+e.ID))
	}
	var missing []string
	for _, id := range ids {
		if !slices.ContainsFunc(entries, func(e dlqEntry) bool { return e.ID == id }) {
			missing = append(missing, id)
		}
	}
	if len(refused) > 0 {
		return cli.Usagef("not purged: %s can be redriven (its body is within the size limit); redrive it, or say --force after checking it with dlq show", strings.Join(refused, ", "))
	}
	var deleted []string
	if len(chosen) > 0 {
		// The intent first: nothing is deleted that no audit line names,
		// even if the answer to the delete is lost.
		audit := slog.New(slog.NewJSONHandler(env.Stderr, nil))
		audit.LogAttrs(ctx, slog.LevelWarn, "DLQ entries to be purged by an operator", slog.Bool("audit", true),
			slog.String("operator", operator), slog.Any("entries", chosen), slog.Any("charges", charges), slog.Bool("forced", force))
		deleted, err = purger.PurgeDLQ(ctx, chosen)
		var gone []string
		for i, id := range chosen {
			if slices.Contains(deleted, id) {
				gone = append(gone, charges[i])
			}
		}
		if err != nil {
			audit.LogAttrs(ctx, slog.LevelError, "DLQ purge failed: some of the entries may be gone; dlq list shows what is left", slog.Bool("audit", true),
				slog.String("operator", operator), slog.Any("entries", chosen), slog.String("error", err.Error()))
			return err
		}
		audit.LogAttrs(ctx, slog.LevelWarn, "DLQ entries purged by an operator", slog.Bool("audit", true),
			slog.String("operator", operator), slog.Any("entries", deleted), slog.Any("charges", gone), slog.Bool("forced", force))
	}
	for _, id := range chosen {
		if !slices.Contains(deleted, id) {
			missing = append(missing, id) // gone meanwhile
		}
	}
	if *asJSON {
		if err := json.NewEncoder(env.Stdout).Encode(struct {
			Purged  []string `json:"purged"`
			Missing []string `json:"missing,omitempty"`
		}{append([]string{}, deleted...), missing}); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(env.Stdout, "purged %d DLQ entr%s: %s\n", len(deleted), map[bool]string{true: "y", false: "ies"}[len(deleted) == 1], strings.Join(deleted, ", "))
	}
	if len(missing) > 0 {
		return fmt.Errorf("no DLQ entry with id %s (redriven, purged or expired already; dlq list shows what is there)", strings.Join(missing, ", "))
	}
	return nil
}
