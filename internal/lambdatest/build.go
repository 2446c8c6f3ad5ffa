package lambdatest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// built is each package's binary (or the error building it), once per
// test binary.
var built sync.Map // pkg → *binary

type binary struct {
	once sync.Once
	path string
	err  error
}

// Build builds the function in pkg (a path go build takes, from the test's
// folder) as Lambda runs it, with -tags lambda.norpc and env added to the
// build's environment, once per test binary, and returns the binary's
// path; a failed build fails every test that asks for it.
func Build(t testing.TB, pkg string, env ...string) string {
	t.Helper()
	v, _ := built.LoadOrStore(pkg, new(binary))
	b := v.(*binary)
	b.once.Do(func() {
		dir, err := os.MkdirTemp("", "lambdatest-fn")
		if err != nil {
			b.err = err
			return
		}
		b.path = filepath.Join(dir, "bootstrap")
		cmd := exec.Command("go", "build", "-tags", "lambda.norpc", "-o", b.path, pkg)
		cmd.Env = append(os.Environ(), env...)
		if out, err := cmd.CombinedOutput(); err != nil {
			b.err = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}

// Run starts bin as one function process (an execution environment) with
// env as its whole environment; it is killed when the test ends, and what
// it wrote to stderr is logged if the test failed.
func Run(t testing.TB, bin string, env []string) {
	t.Helper()
	cmd := exec.Command(bin)
	cmd.Env = env
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("function process %d:\n%s", cmd.Process.Pid, stderr.String())
		}
	})
}
