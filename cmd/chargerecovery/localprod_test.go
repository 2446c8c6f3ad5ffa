package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/internal/logbuf"
	"github.com/finedge/idempotent-consumer/internal/testenv"
)

// localProd builds chargerecovery and returns the script's path and the
// binary's, or ends the test (fails in CI) when moto is not installed.
func localProd(t *testing.T) (script, bin string) {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if err := exec.Command("bash", filepath.Join(root, "scripts/moto.sh"), "check").Run(); err != nil {
		testenv.Unreachable(t, "moto's server mode is not installed (pip install \"moto[server]\"): scripts/local-prod.sh needs it")
	}
	bin = filepath.Join(t.TempDir(), "chargerecovery")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return filepath.Join(root, "scripts/local-prod.sh"), bin
}

var pidRE = regexp.MustCompile(`\bpid (\d+)`)

// alive says whether pid is a live process (a zombie is not).
func alive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return !errors.Is(err, os.ErrNotExist)
	}
	s := string(b)
	rest := s[strings.LastIndexByte(s, ')')+1:]
	return !strings.HasPrefix(strings.TrimSpace(rest), "Z")
}

func gone(t *testing.T, what string, pids []int) {
	t.Helper()
	if len(pids) != 4 {
		t.Fatalf("%s: the script named %d processes (%v), want 4: moto, corebank, serve, console", what, len(pids), pids)
	}
	waitUntil(t, what+": every process gone", 20*time.Second, func() bool {
		for _, p := range pids {
			if alive(p) {
				return false
			}
		}
		return true
	})
}

// startLocalProd runs the script until it says what is running; it
// returns the process, the pids it named, and its output so far.
func startLocalProd(t *testing.T, script, bin, dir string, args ...string) (*exec.Cmd, []int, *logbuf.Buffer) {
	t.Helper()
	cmd := exec.Command("bash", append([]string{script, "--bin", bin, "--dir", dir}, args...)...)
	cmd.Env = append(os.Environ(), "IC_AWS_TEST_ENDPOINT=", "AWS_ENDPOINT_URL=")
	var out logbuf.Buffer
	cmd.Stderr = &out
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_, _ = cmd.Process.Wait()
		}
		_ = exec.Command("bash", script, "--stop", "--dir", dir).Run()
	})
	var pids []int
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		line := sc.Text()
		out.Write([]byte(line + "\n"))
		if m := pidRE.FindStringSubmatch(line); m != nil {
			n, _ := strconv.Atoi(m[1])
			pids = append(pids, n)
		}
		if strings.HasPrefix(line, "logs: ") {
			break
		}
	}
	go func() {
		var rest bytes.Buffer
		_, _ = rest.ReadFrom(stdout)
		out.Write(rest.Bytes())
	}()
	return cmd, pids, &out
}

// The whole local production in one command: --smoke starts moto, the
// bank over mutual TLS + OAuth2, serve and the console, sends a charge 3
// times, sees one debit in corebank ledger, and stops them all; SIGTERM
// stops them all; after a SIGKILL (no trap runs) --stop does, and a second
// copy on the same directory is refused meanwhile.
func TestLocalProdStartsEverythingDebitsOnceAndLeavesNothing(t *testing.T) {
	script, bin := localProd(t)
	dir := t.TempDir()

	cmd, pids, out := startLocalProd(t, script, bin, filepath.Join(dir, "smoke"), "--smoke")
	err := cmd.Wait()
	if err != nil || !strings.Contains(out.String(), "sent 3 times, debited once") || !strings.Contains(out.String(), "1 postings;") {
		t.Fatalf("local-prod.sh --smoke: %v\n%s", err, out.String())
	}
	gone(t, "after --smoke", pids)

	cmd, pids, out = startLocalProd(t, script, bin, filepath.Join(dir, "term"))
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	var ee *exec.ExitError
	if err := cmd.Wait(); !errors.As(err, &ee) || ee.ExitCode() != 143 {
		t.Fatalf("after SIGTERM: %v, want exit 143\n%s", err, out.String())
	}
	gone(t, "after SIGTERM", pids)

	kdir := filepath.Join(dir, "kill")
	cmd, pids, out = startLocalProd(t, script, bin, kdir)
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	second, err := exec.CommandContext(ctx, "bash", script, "--bin", bin, "--dir", kdir, "--smoke").CombinedOutput()
	if err == nil || !strings.Contains(string(second), "is in use") {
		t.Fatalf("a second copy on a directory in use: %v\n%s", err, second)
	}
	if o, err := exec.Command("bash", script, "--stop", "--dir", kdir).CombinedOutput(); err != nil {
		t.Fatalf("--stop: %v %s", err, o)
	}
	gone(t, "after SIGKILL and --stop", pids)
	_ = out
}
