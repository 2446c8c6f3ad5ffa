package idempotentconsumer_test

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// Every alert has a runbook_url pointing at a section of
// docs/operations/runbooks.md that exists (a heading named after the
// alert, its anchor by GitHub's slug rule).
func TestEveryAlertHasARunbookThatExists(t *testing.T) {
	rules, err := os.ReadFile("deploy/prometheus/alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile("docs/operations/runbooks.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := strings.Split(string(rules), "- alert: ")[1:]
	if len(blocks) == 0 {
		t.Fatal("no alerts found")
	}
	url := regexp.MustCompile(`runbook_url: "https://github.com/finedge/idempotent-consumer/blob/main/docs/operations/runbooks\.md#([a-z0-9_-]+)"`)
	for _, b := range blocks {
		name := strings.TrimSpace(strings.SplitN(b, "\n", 2)[0])
		m := url.FindStringSubmatch(b)
		switch {
		case m == nil:
			t.Errorf("alert %s has no runbook_url into docs/operations/runbooks.md", name)
		case m[1] != strings.ToLower(name):
			t.Errorf("alert %s points at #%s", name, m[1])
		case !strings.Contains(string(doc), "\n## "+name+"\n"):
			t.Errorf("docs/operations/runbooks.md has no section ## %s", name)
		case !markdownAnchors(string(doc))[m[1]]:
			t.Errorf("docs/operations/runbooks.md has no anchor #%s", m[1])
		}
	}
}
