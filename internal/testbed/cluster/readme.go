package cluster

import (
	"fmt"
	"os"
	"strings"
)

// ReadmeValuesHeader starts each ```yaml block of README.md that belongs to
// the Helm values file its install shows.
const ReadmeValuesHeader = "# fenced-values.yaml\n"

// ReadmeHelmValues is the Helm values file README.md's install shows: its
// ```yaml blocks that start with ReadmeValuesHeader, joined. Tests of the
// chart read it from the README itself, so that what users copy is what is
// tested.
func ReadmeHelmValues() (string, error) {
	readme, err := RepoFile("README.md")
	if err != nil {
		return "", err
	}
	text, err := os.ReadFile(readme)
	if err != nil {
		return "", err
	}
	var blocks []string
	var block strings.Builder
	in := false
	for line := range strings.Lines(string(text)) {
		line = strings.TrimRight(line, "\n")
		switch {
		case !in && line == "```yaml":
			in = true
			block.Reset()
		case in && line == "```":
			in = false
			if strings.HasPrefix(block.String(), ReadmeValuesHeader) {
				blocks = append(blocks, block.String())
			}
		case in:
			block.WriteString(line + "\n")
		}
	}
	if len(blocks) == 0 {
		return "", fmt.Errorf("README.md shows no ```yaml block starting with %q (the Helm values of the install)", strings.TrimSpace(ReadmeValuesHeader))
	}
	return strings.Join(blocks, ""), nil
}
