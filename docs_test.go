package idempotentconsumer_test

import (
	"os"
	"os/exec"
	"path"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// The README stays short enough to read at one sitting.
func TestReadmeIsAtMost10KiB(t *testing.T) {
	fi, err := os.Stat("README.md")
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size() > 10240 {
		t.Errorf("README.md is %d bytes; keep it at most 10,240 (move detail to ARCHITECTURE.md, CONTRIBUTING.md or docs/operations)", fi.Size())
	}
}

// Every relative link in the tracked Markdown files resolves: the file
// exists and the anchor is a heading of it (GitHub's slugs). CHANGELOG.md
// is history and is left as it was written.
func TestDocLinksResolve(t *testing.T) {
	out, err := exec.Command("git", "ls-files", "*.md").Output()
	if err != nil {
		t.Skipf("git ls-files: %v", err)
	}
	files := strings.Fields(string(out))
	if len(files) == 0 {
		t.Fatal("no Markdown files tracked")
	}
	link := regexp.MustCompile(`\[[^\]]*\]\(([^)\s]+)\)`)
	anchors := map[string]map[string]bool{}
	anchorsOf := func(file string) (map[string]bool, bool) {
		if a, ok := anchors[file]; ok {
			return a, true
		}
		b, err := os.ReadFile(file)
		if err != nil {
			return nil, false
		}
		anchors[file] = markdownAnchors(string(b))
		return anchors[file], true
	}
	checked := 0
	for _, file := range files {
		if file == "CHANGELOG.md" {
			continue
		}
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range link.FindAllStringSubmatch(stripCode(string(b)), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			checked++
			p, anchor, _ := strings.Cut(target, "#")
			dest := file
			if p != "" {
				dest = path.Join(path.Dir(file), p)
				fi, err := os.Stat(dest)
				if err != nil {
					t.Errorf("%s: link %s: %s does not exist", file, target, dest)
					continue
				}
				if fi.IsDir() || !strings.HasSuffix(dest, ".md") {
					if anchor != "" {
						t.Errorf("%s: link %s: an anchor into something that is not Markdown", file, target)
					}
					continue
				}
			}
			if anchor == "" {
				continue
			}
			a, ok := anchorsOf(dest)
			if !ok {
				t.Errorf("%s: link %s: cannot read %s", file, target, dest)
			} else if !a[anchor] {
				t.Errorf("%s: link %s: %s has no heading with anchor #%s", file, target, dest, anchor)
			}
		}
	}
	if checked == 0 {
		t.Fatal("no relative links found: is the pattern right?")
	}
}

func TestMarkdownAnchorsFollowGitHub(t *testing.T) {
	a := markdownAnchors("# Runbooks\n## What the bank answered → what we do\n## PostgreSQL (`--backend postgres`)\n## Flags\n## Flags\n```\n# not a heading\n```\n## The operators' console\n")
	for _, want := range []string{"runbooks", "what-the-bank-answered--what-we-do", "postgresql---backend-postgres", "flags", "flags-1", "the-operators-console"} {
		if !a[want] {
			t.Errorf("no anchor %q in %v", want, a)
		}
	}
	if a["not-a-heading"] {
		t.Error("a line in a code block counted as a heading")
	}
}

// markdownAnchors are the anchors GitHub gives a document's headings:
// lower case, punctuation dropped (except '-' and '_'), spaces to '-', and
// -1, -2 … on repeats. Lines in fenced code blocks are not headings.
func markdownAnchors(doc string) map[string]bool {
	seen := map[string]int{}
	out := map[string]bool{}
	fenced := false
	for _, line := range strings.Split(doc, "\n") {
		if strings.HasPrefix(line, "```") {
			fenced = !fenced
			continue
		}
		if fenced {
			continue
		}
		h := strings.TrimLeft(line, "#")
		if len(h) == len(line) || len(line)-len(h) > 6 || !strings.HasPrefix(h, " ") {
			continue
		}
		slug := slugOf(strings.TrimSpace(h))
		n := seen[slug]
		seen[slug] = n + 1
		if n > 0 {
			slug += "-" + strconv.Itoa(n)
		}
		out[slug] = true
	}
	return out
}

func slugOf(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r > 127 && isLetter(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

func isLetter(r rune) bool { return strings.ToLower(string(r)) != strings.ToUpper(string(r)) }

// stripCode removes fenced code blocks and inline code, where brackets are
// not links.
func stripCode(doc string) string {
	var b strings.Builder
	fenced := false
	for _, line := range strings.Split(doc, "\n") {
		if strings.HasPrefix(line, "```") {
			fenced = !fenced
			continue
		}
		if !fenced {
			b.WriteString(regexp.MustCompile("`[^`]*`").ReplaceAllString(line, "``"))
			b.WriteByte('\n')
		}
	}
	return b.String()
}
