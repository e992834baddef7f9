package deploy

import (
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
// the founders' workspace directory beside the clone — and the license
// exists.
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
			if strings.Contains(target, "://") || strings.HasPrefix(target, "#") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			target, _, _ = strings.Cut(target, "#")
			p := filepath.Clean(filepath.Join(root, filepath.Dir(doc), target))
			if rel, err := filepath.Rel(root, p); err != nil || strings.HasPrefix(rel, "..") {
				t.Errorf("%s links to %s, outside the repository", doc, m[1])
				continue
			}
			if _, err := os.Stat(p); err != nil {
				t.Errorf("%s links to %s, which does not exist", doc, m[1])
			}
		}
	}
	if _, err := os.Stat(filepath.Join(root, "LICENSE")); err != nil {
		t.Errorf("no LICENSE: %v", err)
	}
}
