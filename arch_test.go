package idempotentconsumer_test

import (
	"go/build"
	"strings"
	"testing"
)

const module = "github.com/finedge/idempotent-consumer/"

// The domain (charge), the state machine (idempotency and its driver
// contract), the queue port (queue) and the runtime (consumer) import only
// the standard library and each other: no AWS, SQL or HTTP client.
func TestDomainImportsOnlyTheStandardLibrary(t *testing.T) {
	allowed := map[string]bool{
		module + "idempotency": true, module + "idempotency/driver": true,
		module + "queue": true, module + "internal/strictjson": true,
	}
	for _, dir := range []string{"charge", "idempotency", "idempotency/driver", "queue", "consumer", "internal/strictjson"} {
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

// A store implements the driver contract and nothing else: no backend
// imports the user API (package idempotency), so what a user calls and what
// an implementer implements cannot drift into each other.
func TestStoresImplementTheDriverOnly(t *testing.T) {
	for _, dir := range []string{"memstore", "sqlite", "postgres", "redisstore", "awsdynamodb"} {
		pkg, err := build.ImportDir(dir, 0)
		if err != nil {
			t.Fatalf("%s: %v", dir, err)
		}
		driver := false
		for _, imp := range pkg.Imports {
			switch imp {
			case module + "idempotency":
				t.Errorf("%s imports the user API %s; a store needs only idempotency/driver", dir, imp)
			case module + "idempotency/driver":
				driver = true
			}
		}
		if !driver {
			t.Errorf("%s does not import idempotency/driver: is it still a store?", dir)
		}
	}
}
