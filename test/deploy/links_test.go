package deploy

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// outsideWorkspace is the founders' shared directory beside the clone,
// spelt in two parts so that this file does not name it itself.
const outsideWorkspace = "../" + "shared"

// markdownLink matches an inline Markdown link's target: [text](target).
var markdownLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// TestDocumentLinksStayInTheRepository: every relative link in the
// repository's Markdown resolves to a file or directory of the repository —
// nothing points at a place a user who clones it does not have, such as
// the founders' workspace directory beside the clone —, a link's #anchor
// into a Markdown file names one of its headings, every alert rule's
// runbook_url does too, and the license exists.
func TestDocumentLinksStayInTheRepository(t *testing.T) {
	root := repoRoot(t)
	out, err := exec.Command("git", "-C", root, "ls-files", "*.md").Output()
	if err != nil {
		t.Skipf("not a git checkout: %v", err)
	}
	docs := strings.Fields(string(out))
	if len(docs) == 0 {
		t.Fatal("no Markdown files tracked")
	}
	anchors := anchorCache{root: root, byDoc: map[string]map[string]bool{}}
	for _, doc := range docs {
		text, err := os.ReadFile(filepath.Join(root, doc))
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(text), outsideWorkspace) {
			t.Errorf("%s mentions %s, which is outside the repository", doc, outsideWorkspace)
		}
		for _, m := range markdownLink.FindAllStringSubmatch(string(text), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			if err := anchors.resolve(doc, target); err != nil {
				t.Errorf("%s links to %s: %v", doc, target, err)
			}
		}
	}

	// The alert rules' runbook_url annotations, in every rule file (the
	// plain one, the Helm chart's copy, the PrometheusRule component, the
	// promtool cases), are runbookDoc's address plus one of its headings.
	yamls, err := exec.Command("git", "-C", root, "ls-files", "*.yaml").Output()
	if err != nil {
		t.Fatal(err)
	}
	runbooks := 0
	for _, f := range strings.Fields(string(yamls)) {
		text, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range runbookAnnotation.FindAllStringSubmatch(string(text), -1) {
			runbooks++
			anchor, ok := strings.CutPrefix(m[2], runbookBaseURL+"#")
			if m[1] != "runbook_url" || !ok || anchor == "" {
				t.Errorf("%s: %s %s; want runbook_url %s#<section>", f, m[1], m[2], runbookBaseURL)
				continue
			}
			if err := anchors.resolve("", runbookDoc+"#"+anchor); err != nil {
				t.Errorf("%s: runbook_url %s: %v", f, m[2], err)
			}
		}
	}
	if runbooks == 0 {
		t.Error("no runbook_url annotation found in the repository's YAML files")
	}

	if _, err := os.Stat(filepath.Join(root, "LICENSE")); err != nil {
		t.Errorf("no LICENSE: %v", err)
	}
}

// runbookAnnotation matches an alert rule's runbook_url annotation, and
// the non-standard runbook key it replaced.
var runbookAnnotation = regexp.MustCompile(`(?m)^\s*(runbook_url|runbook):\s*"?([^"\s]+)"?\s*$`)

// anchorCache resolves relative links and their anchors, reading each
// Markdown file's headings once.
type anchorCache struct {
	root  string
	byDoc map[string]map[string]bool
}

// resolve checks a link found in doc (a path from the root; "" for the
// root itself): its file or directory exists inside the repository and, for
// a Markdown file, its #anchor is one of the file's headings.
func (c anchorCache) resolve(doc, link string) error {
	target, anchor, _ := strings.Cut(link, "#")
	file := doc
	if target != "" {
		p := filepath.Clean(filepath.Join(c.root, filepath.Dir(doc), target))
		rel, err := filepath.Rel(c.root, p)
		if err != nil || strings.HasPrefix(rel, "..") {
			return errors.New("outside the repository")
		}
		if _, err := os.Stat(p); err != nil {
			return errors.New("no such file or directory")
		}
		file = rel
	}
	if anchor == "" || !strings.HasSuffix(file, ".md") {
		return nil
	}
	headings, ok := c.byDoc[file]
	if !ok {
		text, err := os.ReadFile(filepath.Join(c.root, file))
		if err != nil {
			return err
		}
		headings = markdownAnchors(string(text))
		c.byDoc[file] = headings
	}
	if !headings[anchor] {
		return fmt.Errorf("%s has no heading with the anchor #%s", file, anchor)
	}
	return nil
}

// markdownAnchors returns the anchors GitHub gives the headings of a
// Markdown text: lower-case, punctuation dropped, spaces to '-', a repeated
// anchor numbered -1, -2, …; lines in fenced code blocks are not headings.
func markdownAnchors(text string) map[string]bool {
	anchors := map[string]bool{}
	seen := map[string]int{}
	inCode := false
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, "```") {
			inCode = !inCode
			continue
		}
		if inCode || !strings.HasPrefix(line, "#") {
			continue
		}
		heading := strings.TrimLeft(line, "#")
		if !strings.HasPrefix(heading, " ") {
			continue // #word is not a heading
		}
		a := githubAnchor(heading)
		if n := seen[a]; n > 0 {
			anchors[fmt.Sprintf("%s-%d", a, n)] = true
		} else {
			anchors[a] = true
		}
		seen[a]++
	}
	return anchors
}
