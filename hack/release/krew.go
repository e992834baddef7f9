package main

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"
)

// defaultHomepage is where the project lives (make release's HOMEPAGE).
const defaultHomepage = "https://github.com/fenced-io/fenced"

// krewManifest is krew's Plugin manifest (krew.googlecontainertools.github.com/v1alpha2).
type krewManifest struct {
	APIVersion string       `json:"apiVersion"`
	Kind       string       `json:"kind"`
	Metadata   krewMetadata `json:"metadata"`
	Spec       krewSpec     `json:"spec"`
}

type krewMetadata struct {
	Name string `json:"name"`
}

type krewSpec struct {
	Version          string         `json:"version"`
	Homepage         string         `json:"homepage"`
	ShortDescription string         `json:"shortDescription"`
	Description      string         `json:"description"`
	Caveats          string         `json:"caveats,omitempty"`
	Platforms        []krewPlatform `json:"platforms"`
}

type krewPlatform struct {
	Selector krewSelector `json:"selector"`
	URI      string       `json:"uri"`
	SHA256   string       `json:"sha256"`
	Bin      string       `json:"bin"`
}

type krewSelector struct {
	MatchLabels map[string]string `json:"matchLabels"`
}

// krewPath is the manifest inside the release folder; krew-index wants it as
// plugins/fenced.yaml, named after the plugin.
var krewPath = filepath.Join("krew", "fenced.yaml")

const krewDescription = `The on-call commands of fenced, the evidence-based fencer for bare-metal
Kubernetes: status (is fencing armed, which nodes are fenced and on what
evidence), diagnose (why a volume is stuck in Multi-Attach), confirm (an
operator's evidence that a node is off), unfence, bmc and device (read a
node's power), topology check.
`

const krewCaveats = `kubectl fenced talks to your cluster with kubectl's credentials; confirm,
unfence and diagnose --fix write to it. fenced itself runs as a DaemonSet or
systemd unit (see the project's README).
`

// archivePattern matches the names archiveName gives.
var archivePattern = regexp.MustCompile(`^fenced-.+-([a-z0-9]+)-([a-z0-9]+)\.tar\.gz$`)

// writeKrewManifest writes dir/krew/fenced.yaml naming every archive of
// version in dir, published at baseURL.
func writeKrewManifest(dir, version, baseURL, homepage string) (string, error) {
	m, err := krewManifestFor(dir, version, baseURL, homepage)
	if err != nil {
		return "", err
	}
	b, err := yaml.Marshal(m)
	if err != nil {
		return "", err
	}
	name := filepath.Join(dir, krewPath)
	if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
		return "", err
	}
	return name, os.WriteFile(name, b, 0o644)
}

func krewManifestFor(dir, version, baseURL, homepage string) (krewManifest, error) {
	m := krewManifest{
		APIVersion: "krew.googlecontainertools.github.com/v1alpha2",
		Kind:       "Plugin",
		Metadata:   krewMetadata{Name: "fenced"},
		Spec: krewSpec{
			Version:          version,
			Homepage:         homepage,
			ShortDescription: "Fence dead bare-metal nodes only on power evidence",
			Description:      krewDescription,
			Caveats:          krewCaveats,
		},
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return m, err
	}
	for _, e := range entries {
		if e.IsDir() || !strings.HasPrefix(e.Name(), "fenced-"+version+"-") {
			continue
		}
		match := archivePattern.FindStringSubmatch(e.Name())
		if match == nil || e.Name() != archiveName(version, platform{match[1], match[2]}) {
			continue
		}
		sum, err := fileSHA256(filepath.Join(dir, e.Name()))
		if err != nil {
			return m, err
		}
		m.Spec.Platforms = append(m.Spec.Platforms, krewPlatform{
			Selector: krewSelector{MatchLabels: map[string]string{"os": match[1], "arch": match[2]}},
			URI:      baseURL + "/" + e.Name(),
			SHA256:   sum,
			Bin:      binaryName,
		})
	}
	if len(m.Spec.Platforms) == 0 {
		return m, fmt.Errorf("no archive of %s in %s", version, dir)
	}
	return m, nil
}

func fileSHA256(name string) (string, error) {
	b, err := os.ReadFile(name)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), nil
}

// sumsName is the checksum file of a release folder.
const sumsName = "SHA256SUMS"

// writeSums writes dir/SHA256SUMS: one "<sha256>  <path>" line per other
// file under dir (paths relative to dir, with "/"), sorted by path, as
// `sha256sum -c SHA256SUMS` reads it.
func writeSums(dir string) error {
	var files []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		if rel != sumsName {
			files = append(files, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		return err
	}
	slices.Sort(files)
	var b strings.Builder
	for _, f := range files {
		sum, err := fileSHA256(filepath.Join(dir, filepath.FromSlash(f)))
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "%s  %s\n", sum, f)
	}
	return os.WriteFile(filepath.Join(dir, sumsName), []byte(b.String()), 0o644)
}
