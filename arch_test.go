package idempotentconsumer_test

import (
	"errors"
	"go/build"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

const module = "github.com/finedge/idempotent-consumer/"

// The domain (charge, calendar), the state machine (idempotency and its
// driver contract), the queue port (queue) and the runtime (consumer)
// import only the standard library and each other: no AWS, SQL or HTTP
// client.
func TestDomainImportsOnlyTheStandardLibrary(t *testing.T) {
	allowed := map[string]bool{
		module + "idempotency": true, module + "idempotency/driver": true,
		module + "queue": true, module + "internal/strictjson": true,
	}
	for _, dir := range []string{"app/charge", "app/calendar", "idempotency", "idempotency/driver", "queue", "consumer", "internal/strictjson"} {
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

// The package map (CONTRIBUTING.md's Layout table) names every package in
// the tree, and nothing that is not there.
func TestReadmeLayoutMatchesTheTree(t *testing.T) {
	readme, err := os.ReadFile("CONTRIBUTING.md")
	if err != nil {
		t.Fatal(err)
	}
	_, layout, ok := strings.Cut(string(readme), "\n## Layout\n")
	if !ok {
		t.Fatal("CONTRIBUTING.md has no ## Layout section")
	}
	layout, _, _ = strings.Cut(layout, "\n## ")
	named := map[string]bool{}
	for _, line := range strings.Split(layout, "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 3 {
			continue
		}
		for _, m := range regexp.MustCompile("`([a-z0-9_/-]+)`").FindAllStringSubmatch(cells[1], -1) {
			named[m[1]] = true
		}
	}
	packages := map[string]bool{}
	err = filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") && path != "." || d.Name() == "testdata" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(path, ".go") && !strings.HasSuffix(path, "_test.go") && filepath.Dir(path) != "." {
			packages[filepath.ToSlash(filepath.Dir(path))] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for pkg := range packages {
		if !named[pkg] {
			t.Errorf("package %s is not in CONTRIBUTING.md's Layout table", pkg)
		}
	}
	for name := range named {
		if fi, err := os.Stat(name); err != nil || !fi.IsDir() {
			t.Errorf("CONTRIBUTING.md's Layout table names %s, which is not a directory of the tree", name)
		}
	}
}

// level is how high a package sits: a package imports only packages of its
// own level or below (tests may reach higher: a test sits above what it
// tests).
//
//	0 internal/…  leaf helpers (redaction, strict JSON, secret files,
//	              certificates, test servers); they import nothing of ours
//	              outside internal/
//	1 the domain and the runtime: app/charge, app/calendar, idempotency,
//	  idempotency/driver, queue, consumer, circuit
//	2 adapters, stores, simulators and their test kits (the library's
//	  other folders, and app/'s)
//	3 app/service/…   the wiring that cmd and the console share
//	4 app/console, and app/protosim (the whole-protocol simulator drives
//	  every actor, the service's operator paths too; nothing imports it)
//	5 cmd/…
//
// Across the levels run the two floors (TestTheLibraryNeverImportsTheApplication).
func level(pkg string) int {
	first, _, _ := strings.Cut(pkg, "/")
	switch {
	case first == "internal":
		return 0
	case pkg == "app/charge" || pkg == "app/calendar" || pkg == "idempotency" || pkg == "idempotency/driver" ||
		pkg == "queue" || pkg == "consumer" || pkg == "circuit":
		return 1
	case strings.HasPrefix(pkg, "app/service/"):
		return 3
	case strings.HasPrefix(pkg, "app/console") || strings.HasPrefix(pkg, "app/protosim"):
		return 4
	case first == "cmd":
		return 5
	}
	return 2
}

// ourPackages lists every directory of the tree that holds a Go package
// (deploy/k8s and integrations/watermill are modules of their own and are
// left out: a directory with a go.mod of its own is another module).
func ourPackages(t *testing.T) []string {
	t.Helper()
	var pkgs []string
	seen := map[string]bool{}
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || path == "deploy") {
			return filepath.SkipDir
		}
		if d.IsDir() && path != "." {
			if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
				return filepath.SkipDir
			}
		}
		dir := filepath.ToSlash(filepath.Dir(path))
		if !d.IsDir() && strings.HasSuffix(path, ".go") && dir != "." && !seen[dir] {
			seen[dir] = true
			pkgs = append(pkgs, dir)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return pkgs
}

// The levels can be seen in the tree: internal/ holds only leaves, the
// wiring lives in service/, and nothing imports upwards. Before this rule,
// charge, corebank and webhook imported from an internal/ that also held
// the top of the program.
func TestNoPackageImportsUpwards(t *testing.T) {
	pkgs := ourPackages(t)
	if len(pkgs) < 20 {
		t.Fatalf("found only %d packages: is the walk broken?", len(pkgs))
	}
	for _, dir := range pkgs {
		pkg, err := build.ImportDir(dir, 0)
		if err != nil {
			var none *build.NoGoError
			if errors.As(err, &none) {
				continue // only tests here
			}
			t.Fatalf("%s: %v", dir, err)
		}
		for _, imp := range pkg.Imports {
			ours, ok := strings.CutPrefix(imp, module)
			if !ok {
				continue
			}
			if level(ours) > level(dir) {
				t.Errorf("%s (level %d) imports %s (level %d): move the code down, or the importer up", dir, level(dir), ours, level(ours))
			}
			if strings.HasPrefix(dir, "internal/") && !strings.HasPrefix(ours, "internal/") {
				t.Errorf("%s is a leaf helper but imports %s", dir, ours)
			}
		}
	}
}

// The two floors a newcomer sees in the tree: the library at the root —
// what a Go team imports: the guard and its driver contract, the stores,
// the queues, the consumer runtime, idemhttp, lambdasqs — and the
// charge-recovery application under app/, with the programs in cmd/ on top.
// Nothing in the library imports the application or a program, not even in
// a test (a test that needs both lives with the application); internal/
// serves both floors and imports neither.
func TestTheLibraryNeverImportsTheApplication(t *testing.T) {
	upper := func(pkg string) bool { return strings.HasPrefix(pkg, "app/") || strings.HasPrefix(pkg, "cmd/") }
	checked := 0
	for _, dir := range ourPackages(t) {
		if upper(dir) {
			continue
		}
		pkg, err := build.ImportDir(dir, 0)
		var none *build.NoGoError
		if err != nil && !errors.As(err, &none) {
			t.Fatalf("%s: %v", dir, err)
		}
		checked++
		for _, imp := range append(append(pkg.Imports, pkg.TestImports...), pkg.XTestImports...) {
			if ours, ok := strings.CutPrefix(imp, module); ok && upper(ours) {
				t.Errorf("%s, on the library's floor, imports %s, on the application's: move the code (or the test) to app/", dir, ours)
			}
		}
	}
	if checked < 20 {
		t.Fatalf("checked only %d library packages: is the walk broken?", checked)
	}
}

// The store conformance suite checks the state machine through the driver
// contract alone; the suite that drives claims through a queue's receive
// lives with the queue side (queue/queuetest).
func TestStoreSuiteDoesNotImportTheQueue(t *testing.T) {
	for _, dir := range []string{"idempotency/storetest"} {
		pkg, err := build.ImportDir(dir, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range pkg.Imports {
			if imp == module+"queue" || strings.HasPrefix(imp, module+"queue/") {
				t.Errorf("%s imports %s", dir, imp)
			}
		}
	}
}

// maxCommandLines bounds cmd/chargerecovery's non-test lines (issue 53):
// each subcommand parses its flags, calls one function of the application
// and prints; the flows live in app/, tested there. An issue set it; only
// an issue raises it. (The library's API has its own bound:
// idempotency's api_test.go, go doc -short ≤ 25 entries.)
const maxCommandLines = 1200

func TestTheCommandStaysThin(t *testing.T) {
	files, err := filepath.Glob("cmd/chargerecovery/*.go")
	if err != nil {
		t.Fatal(err)
	}
	lines := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		lines += strings.Count(string(b), "\n")
	}
	if lines < 200 || lines > maxCommandLines {
		t.Errorf("cmd/chargerecovery has %d non-test lines, at most %d: move the flow into the application (app/), where it is tested", lines, maxCommandLines)
	}
}
