package idempotentconsumer_test

import (
	"go/build"
	"strings"
	"testing"
)

const module = "github.com/finedge/idempotent-consumer/"

// The domain (charge), the state machine (idempotency), the queue port
// (queue) and the runtime (consumer) import only the standard library and
// each other: no AWS, SQL or HTTP client.
func TestDomainImportsOnlyTheStandardLibrary(t *testing.T) {
	allowed := map[string]bool{module + "idempotency": true, module + "queue": true}
	for _, dir := range []string{"charge", "idempotency", "queue", "consumer"} {
		pkg, err := build.ImportDir(dir, 0)
		if err != nil {
			t.Fatalf("%s: %v", dir, err)
		}
		for _, imp := range pkg.Imports {
			first, _, _ := strings.Cut(imp, "/")
			if allowed[imp] {
				continue
			}
			if strings.Contains(first, ".") || imp == "net/http" || strings.HasPrefix(imp, "database/") {
				t.Errorf("%s imports %s", dir, imp)
			}
		}
	}
}
