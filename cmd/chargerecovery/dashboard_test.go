package main

import (
	"encoding/json"
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// queriedMetrics returns every chargerecovery_* metric name the Grafana
// dashboard and the Prometheus alert rules query, with where it is used.
func queriedMetrics(t *testing.T) map[string]string {
	t.Helper()
	raw, err := os.ReadFile("../../deploy/grafana/chargerecovery.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("dashboard: %v", err)
	}
	name := regexp.MustCompile(`\bchargerecovery_[a-z_]+\b`)
	used := map[string]string{}
	for _, p := range dash.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("dashboard panel %q queries nothing", p.Title)
		}
		for _, tg := range p.Targets {
			for _, n := range name.FindAllString(tg.Expr, -1) {
				used[n] = "dashboard panel " + p.Title
			}
		}
	}
	rules, err := os.ReadFile("../../deploy/prometheus/alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(rules), "\n") {
		if strings.Contains(line, "runbook_url") || strings.Contains(line, "description") || strings.Contains(line, "summary") {
			continue
		}
		for _, n := range name.FindAllString(line, -1) {
			used[n] = "alerts.yml: " + strings.TrimSpace(line)
		}
	}
	if len(used) < 10 {
		t.Fatalf("found only %d metric names in the dashboard and the alerts: %v", len(used), used)
	}
	return used
}

// missingMetrics is every name of used that exposition (a /metrics page)
// has no sample of, with where it is used.
func missingMetrics(used map[string]string, exposition string) []string {
	exported := map[string]bool{}
	for _, line := range strings.Split(exposition, "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		n, _, _ := strings.Cut(line, "{")
		n, _, _ = strings.Cut(n, " ")
		exported[n] = true
	}
	var missing []string
	for n, where := range used {
		if !exported[n] {
			missing = append(missing, n+" ("+where+")")
		}
	}
	sort.Strings(missing)
	return missing
}

// notOnAWS are the series serve leaves out on SQS + DynamoDB, and why.
var notOnAWS = map[string]string{
	"chargerecovery_queue_oldest_message_age_seconds": "SQS does not tell it through its API; the stack's CloudWatch alarm OldestChargeWaitingAlarm watches it",
	"chargerecovery_stuck_claims":                     "counting stuck claims on DynamoDB is a Scan of the whole table; `chargerecovery stuck` does it on demand",
}

// onlyWithAFlag are the series serve exports only when a flag asks for
// what they measure, and why a query of them is right without it.
var onlyWithAFlag = map[string]string{
	"chargerecovery_posting_window_open": "--posting-windows; the alert rules use it only in `unless … == 0`, which holds nothing back without it",
}

// checkQueriedMetricsExported fails for every metric the dashboard or an
// alert queries that a running serve does not export (exposition is its
// /metrics after it handled charges of every kind), except the ones the
// backend leaves out for a stated reason.
func checkQueriedMetricsExported(t *testing.T, backend, exposition string) {
	t.Helper()
	for _, m := range missingMetrics(queriedMetrics(t), exposition) {
		n, _, _ := strings.Cut(m, " ")
		if why := notOnAWS[n]; backend == "aws" && why != "" {
			continue
		}
		if onlyWithAFlag[n] != "" {
			continue
		}
		t.Errorf("queried but not exported by serve (%s): %s", backend, m)
	}
}

// The checker itself: a name the binary does not export is caught.
func TestQueriedMetricsCheckerCatchesAnUnknownName(t *testing.T) {
	used := queriedMetrics(t)
	var exposition strings.Builder
	for n := range used {
		if n != "chargerecovery_debit_seconds_bucket" {
			exposition.WriteString(n + `{x="1"} 0` + "\n")
		}
	}
	missing := missingMetrics(used, exposition.String())
	if len(missing) != 1 || !strings.HasPrefix(missing[0], "chargerecovery_debit_seconds_bucket ") {
		t.Fatalf("missing = %v, want only chargerecovery_debit_seconds_bucket", missing)
	}
}
