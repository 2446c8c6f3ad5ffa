package main

import (
	"os"
	"strings"
	"testing"
)

// Every IC_* variable the Kubernetes ConfigMap sets is one serve reads
// (a misspelt variable would be ignored silently: serve would run on its
// default).
func TestTheKubernetesConfigSetsOnlyServesVariables(t *testing.T) {
	raw, err := os.ReadFile("../../deploy/k8s/config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	_, data, ok := strings.Cut(string(raw), "\ndata:\n")
	if !ok {
		t.Fatal("config.yaml has no data:")
	}
	r := runCmd(t.Context(), map[string]string{}, "serve", "-h")
	help := r.stdout + r.stderr
	if !strings.Contains(help, "[IC_BACKEND]") {
		t.Fatalf("serve -h names no variables: %s", help)
	}
	n := 0
	for _, line := range strings.Split(data, "\n") {
		key, _, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(key, "IC_") {
			continue
		}
		n++
		if !strings.Contains(help, "["+key+"]") {
			t.Errorf("deploy/k8s/config.yaml sets %s, which serve does not read", key)
		}
	}
	if n < 10 {
		t.Fatalf("read only %d IC_ variables from config.yaml", n)
	}
}
