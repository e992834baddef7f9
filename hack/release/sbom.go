package main

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"fenced.io/fenced/hack/image/debian"
)

// imageSBOMInput is what an image's SBOM is made of.
type imageSBOMInput struct {
	// Archive is the image's OCI archive (make image's output).
	Archive string
	// Repository is where the image is pushed, without a tag.
	Repository, Version string
	Time                time.Time
	// DebianLock is the Debian package lock the image was built from
	// (hack/image/debian's format), or "".
	DebianLock string
	// BinarySBOMs are the CycloneDX SBOMs of the fenced binaries in the
	// image (cyclonedx-gomod bin), one per platform.
	BinarySBOMs []string
}

// cdxBOM is the part of a CycloneDX document written here; the binaries'
// components are carried over as they are.
type cdxBOM struct {
	BOMFormat    string            `json:"bomFormat"`
	SpecVersion  string            `json:"specVersion"`
	Version      int               `json:"version"`
	Metadata     cdxMetadata       `json:"metadata"`
	Components   []json.RawMessage `json:"components,omitempty"`
	Dependencies []cdxDependency   `json:"dependencies,omitempty"`
}

type cdxMetadata struct {
	Timestamp string          `json:"timestamp,omitempty"`
	Component json.RawMessage `json:"component"`
}

type cdxComponent struct {
	Type    string    `json:"type"`
	BOMRef  string    `json:"bom-ref"`
	Name    string    `json:"name"`
	Version string    `json:"version"`
	PURL    string    `json:"purl,omitempty"`
	Hashes  []cdxHash `json:"hashes,omitempty"`
}

type cdxHash struct {
	Alg     string `json:"alg"`
	Content string `json:"content"`
}

type cdxDependency struct {
	Ref       string   `json:"ref"`
	DependsOn []string `json:"dependsOn,omitempty"`
}

// binarySBOM is what is read of a binary's SBOM.
type binarySBOM struct {
	SpecVersion string `json:"specVersion"`
	Metadata    struct {
		Component json.RawMessage `json:"component"`
	} `json:"metadata"`
	Components   []json.RawMessage `json:"components"`
	Dependencies []cdxDependency   `json:"dependencies"`
}

// imageSBOM is a CycloneDX SBOM of an image: the image (its index digest)
// as the document's subject, depending on the fenced binary of each
// platform and on the Debian packages of its lock; the binaries' modules
// and dependencies as their SBOMs list them. Components are sorted by
// bom-ref, so the same inputs give the same bytes.
func imageSBOM(in imageSBOMInput) ([]byte, error) {
	digest, err := ociArchiveDigest(in.Archive)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", in.Archive, err)
	}
	name := in.Repository[strings.LastIndex(in.Repository, "/")+1:]
	image := cdxComponent{
		Type:    "container",
		Name:    in.Repository,
		Version: in.Version,
		PURL:    fmt.Sprintf("pkg:oci/%s@%s?repository_url=%s&tag=%s", name, strings.ReplaceAll(digest, ":", "%3A"), in.Repository, in.Version),
		Hashes:  []cdxHash{{Alg: "SHA-256", Content: strings.TrimPrefix(digest, "sha256:")}},
	}
	image.BOMRef = image.PURL
	imageJSON, err := json.Marshal(image)
	if err != nil {
		return nil, err
	}
	bom := cdxBOM{BOMFormat: "CycloneDX", SpecVersion: "1.6", Version: 1,
		Metadata: cdxMetadata{Timestamp: in.Time.UTC().Format(time.RFC3339), Component: imageJSON}}
	components := map[string]json.RawMessage{}
	dependencies := map[string][]string{}
	var imageDependsOn []string
	add := func(c json.RawMessage) error {
		var ref struct {
			BOMRef string `json:"bom-ref"`
		}
		if err := json.Unmarshal(c, &ref); err != nil || ref.BOMRef == "" {
			return fmt.Errorf("a component without a bom-ref: %s", c)
		}
		if _, ok := components[ref.BOMRef]; !ok {
			components[ref.BOMRef] = c
		}
		return nil
	}
	for _, f := range in.BinarySBOMs {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		var bin binarySBOM
		if err := json.Unmarshal(b, &bin); err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		if len(bin.Metadata.Component) == 0 {
			return nil, fmt.Errorf("%s: no metadata.component (not a binary's SBOM?)", f)
		}
		main, oldRef, newRef, err := byPURL(bin.Metadata.Component)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		for _, c := range append([]json.RawMessage{main}, bin.Components...) {
			if err := add(c); err != nil {
				return nil, fmt.Errorf("%s: %w", f, err)
			}
		}
		imageDependsOn = append(imageDependsOn, newRef)
		for _, d := range bin.Dependencies {
			if d.Ref == oldRef {
				d.Ref = newRef
			}
			dependencies[d.Ref] = d.DependsOn
		}
	}
	if in.DebianLock != "" {
		lock, err := debian.ReadLock(in.DebianLock)
		if err != nil {
			return nil, err
		}
		if len(lock.Debs) == 0 {
			return nil, fmt.Errorf("%s: no packages locked", in.DebianLock)
		}
		for _, d := range lock.Debs {
			c := cdxComponent{Type: "library", Name: d.Package, Version: d.Version, PURL: debPURL(d),
				Hashes: []cdxHash{{Alg: "SHA-256", Content: d.SHA256}}}
			c.BOMRef = c.PURL
			b, err := json.Marshal(c)
			if err != nil {
				return nil, err
			}
			if err := add(b); err != nil {
				return nil, err
			}
			imageDependsOn = append(imageDependsOn, c.BOMRef)
		}
	}
	slices.Sort(imageDependsOn)
	dependencies[image.BOMRef] = slices.Compact(imageDependsOn)
	for _, ref := range sortedKeys(components) {
		bom.Components = append(bom.Components, components[ref])
	}
	for _, ref := range sortedKeys(dependencies) {
		bom.Dependencies = append(bom.Dependencies, cdxDependency{Ref: ref, DependsOn: dependencies[ref]})
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	if err := enc.Encode(bom); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// byPURL gives a binary's component its package URL as its bom-ref:
// cyclonedx-gomod names every platform's binary with one bom-ref, and only
// the package URL tells them apart (goos, goarch).
func byPURL(component json.RawMessage) (json.RawMessage, string, string, error) {
	var c map[string]any
	if err := json.Unmarshal(component, &c); err != nil {
		return nil, "", "", err
	}
	oldRef, _ := c["bom-ref"].(string)
	purl, _ := c["purl"].(string)
	if oldRef == "" || purl == "" {
		return nil, "", "", fmt.Errorf("the binary's component has no bom-ref or purl: %s", component)
	}
	c["bom-ref"] = purl
	b, err := json.Marshal(c)
	return b, oldRef, purl, err
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// ociArchiveDigest is the digest of the image (or image index) an OCI
// archive's index.json names: what a registry serves after crane push or
// skopeo copy.
func ociArchiveDigest(archive string) (string, error) {
	f, err := os.Open(archive)
	if err != nil {
		return "", err
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return "", errors.New("no index.json: not an OCI archive")
		}
		if err != nil {
			return "", err
		}
		if strings.TrimPrefix(h.Name, "./") != "index.json" {
			continue
		}
		var index struct {
			Manifests []struct {
				Digest string `json:"digest"`
			} `json:"manifests"`
		}
		if err := json.NewDecoder(tr).Decode(&index); err != nil {
			return "", fmt.Errorf("index.json: %w", err)
		}
		if len(index.Manifests) != 1 || !strings.HasPrefix(index.Manifests[0].Digest, "sha256:") {
			return "", fmt.Errorf("index.json names %d images, want one", len(index.Manifests))
		}
		return index.Manifests[0].Digest, nil
	}
}

// debPURL is the package URL of a locked Debian package.
func debPURL(d debian.Deb) string {
	escape := strings.NewReplacer("%", "%25", "+", "%2B", ":", "%3A", "~", "%7E")
	return fmt.Sprintf("pkg:deb/debian/%s@%s?arch=%s", d.Package, escape.Replace(d.Version), d.Arch)
}
