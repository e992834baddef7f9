package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"
)

// commitTime stands for the commit's time make release passes as -mtime.
var commitTime = time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)

const testVersion = "v0.2.0"

// fixedInputs writes a fake binary, LICENSE and README.md into a new
// directory, with the modification time mtime (which must not leak into
// the archives) and a mode the archives must not copy either.
func fixedInputs(t *testing.T, mtime time.Time) (binary string, extra []string) {
	t.Helper()
	dir := t.TempDir()
	for name, content := range map[string]string{"fenced": "\x7fELF not really", "LICENSE": "Apache License\n", "README.md": "# fenced\n"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(filepath.Join(dir, name), mtime, mtime); err != nil {
			t.Fatal(err)
		}
	}
	return filepath.Join(dir, "fenced"), []string{filepath.Join(dir, "README.md"), filepath.Join(dir, "LICENSE")}
}

// releaseFolder builds the cheap parts of a release folder from the fixed
// inputs (files last changed at inputTime): both archives, the krew
// manifest, the checksums.
func releaseFolder(t *testing.T, inputTime time.Time) string {
	t.Helper()
	binary, extra := fixedInputs(t, inputTime)
	dir := t.TempDir()
	for _, p := range []platform{{"linux", "amd64"}, {"linux", "arm64"}} {
		if _, err := writeBinaryArchive(dir, binary, p, testVersion, extra, commitTime); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := writeKrewManifest(dir, testVersion, "https://example.org/releases/"+testVersion, defaultHomepage); err != nil {
		t.Fatal(err)
	}
	if err := writeSums(dir); err != nil {
		t.Fatal(err)
	}
	return dir
}

// readTree reads every file under dir, by relative path.
func readTree(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		rel, _ := filepath.Rel(dir, p)
		files[filepath.ToSlash(rel)] = b
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

func TestReleaseFolderIsDeterministic(t *testing.T) {
	// Inputs changed at other times, in other temporary directories:
	// nothing but their content may show.
	first := readTree(t, releaseFolder(t, time.Now()))
	second := readTree(t, releaseFolder(t, time.Now().Add(-time.Hour)))
	want := []string{"SHA256SUMS", "fenced-v0.2.0-linux-amd64.tar.gz", "fenced-v0.2.0-linux-arm64.tar.gz", "krew/fenced.yaml"}
	if got := sortedKeys(first); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("the folder holds %v, want %v", got, want)
	}
	for name, b := range first {
		if !bytes.Equal(b, second[name]) {
			t.Errorf("%s differs between two builds from the same inputs", name)
		}
	}
}

func TestArchiveHeaders(t *testing.T) {
	dir := releaseFolder(t, time.Now())
	b, err := os.ReadFile(filepath.Join(dir, "fenced-v0.2.0-linux-amd64.tar.gz"))
	if err != nil {
		t.Fatal(err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	if zr.Name != "" || !zr.ModTime.IsZero() {
		t.Errorf("gzip header names %q at %v; want neither", zr.Name, zr.ModTime)
	}
	tr := tar.NewReader(zr)
	var names []string
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
		if h.Uid != 0 || h.Gid != 0 || h.Uname != "" || h.Gname != "" || !h.ModTime.Equal(commitTime) {
			t.Errorf("%s: owner %d:%d (%q:%q), time %v; want 0:0, no names, %v", h.Name, h.Uid, h.Gid, h.Uname, h.Gname, h.ModTime, commitTime)
		}
		if wantMode := map[bool]int64{true: 0o755, false: 0o644}[h.Name == "fenced"]; h.Mode != wantMode {
			t.Errorf("%s: mode %o, want %o", h.Name, h.Mode, wantMode)
		}
	}
	if got := strings.Join(names, " "); got != "LICENSE README.md fenced" {
		t.Errorf("entries %q, want LICENSE README.md fenced, sorted", got)
	}
}

func TestSumsAreWhatSha256sumChecks(t *testing.T) {
	dir := releaseFolder(t, time.Now())
	if _, err := exec.LookPath("sha256sum"); err != nil {
		t.Skip("no sha256sum")
	}
	cmd := exec.CommandContext(t.Context(), "sha256sum", "-c", "--strict", sumsName)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("sha256sum -c: %v\n%s", err, out)
	}
	if n := strings.Count(string(out), ": OK\n"); n != 3 {
		t.Errorf("sha256sum checked %d files, want 3 (the archives and the krew manifest):\n%s", n, out)
	}
}

func TestKrewManifestPointsAtTheArchives(t *testing.T) {
	dir := releaseFolder(t, time.Now())
	b, err := os.ReadFile(filepath.Join(dir, krewPath))
	if err != nil {
		t.Fatal(err)
	}
	var m krewManifest
	if err := yaml.UnmarshalStrict(b, &m); err != nil {
		t.Fatal(err)
	}
	if len(m.Spec.Platforms) != 2 {
		t.Fatalf("%d platforms, want linux/amd64 and linux/arm64", len(m.Spec.Platforms))
	}
	for _, p := range m.Spec.Platforms {
		name := archiveName(testVersion, platform{p.Selector.MatchLabels["os"], p.Selector.MatchLabels["arch"]})
		if p.URI != "https://example.org/releases/v0.2.0/"+name || p.Bin != "fenced" {
			t.Errorf("platform %v: uri %s, bin %s", p.Selector.MatchLabels, p.URI, p.Bin)
		}
		if sum, _ := fileSHA256(filepath.Join(dir, name)); p.SHA256 != sum {
			t.Errorf("%s: manifest says sha256 %s, the file's is %s", name, p.SHA256, sum)
		}
	}
}

// TestKrewValidatesTheManifest runs krew's own manifest validation (the
// program krew-index's CI runs), without installing.
func TestKrewValidatesTheManifest(t *testing.T) {
	if testing.Short() {
		t.Skip("builds krew's validator from the Go module proxy")
	}
	dir := releaseFolder(t, time.Now())
	cmd := exec.CommandContext(t.Context(), "go", "run", "sigs.k8s.io/krew/cmd/validate-krew-manifest@v0.4.3",
		"-manifest", filepath.Join(dir, krewPath), "-skip-install")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("validate-krew-manifest: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "structural validation OK") {
		t.Errorf("validate-krew-manifest said:\n%s", out)
	}
}

func TestNormalizeTarGzKeepsOrderDropsTime(t *testing.T) {
	entries := []archiveEntry{{"fenced/Chart.yaml", 0o644, []byte("name: fenced\n")}, {"fenced/values.yaml", 0o644, []byte("a: 1\n")}}
	// As helm package writes it: now as every entry's time, its gzip mark.
	helmLike, err := tarGzWithHeader(entries, time.Now(), gzip.Header{Comment: "Helm", Extra: []byte("+marker")})
	if err != nil {
		t.Fatal(err)
	}
	got, err := normalizeTarGz(helmLike, commitTime)
	if err != nil {
		t.Fatal(err)
	}
	want, err := tarGzWithHeader(entries, commitTime, gzip.Header{Comment: "Helm", Extra: []byte("+marker")})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Error("normalizing a helm-like package does not give the package written at the commit's time")
	}
}

func TestSetImageRegistry(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"image:\n  repository: ghcr.io/example/fenced\n  tag: \"\"\n", "image:\n  repository: registry.example.org/team/fenced\n  tag: \"\"\n"},
		{"fenceAgentsImage:\n  repository: \"ghcr.io/example/fenced-fence-agents\" # the variant\n", "fenceAgentsImage:\n  repository: registry.example.org/team/fenced-fence-agents # the variant\n"},
		{"image:\n  repository: fenced\n", "image:\n  repository: registry.example.org/team/fenced\n"},
	} {
		got, err := setImageRegistry([]byte(tc.in), "registry.example.org/team/")
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != tc.want {
			t.Errorf("setImageRegistry(%q) =\n%s\nwant\n%s", tc.in, got, tc.want)
		}
	}
	if _, err := setImageRegistry([]byte("image: {}\n"), "r"); err == nil {
		t.Error("values without any repository: line were accepted")
	}
}

// TestChartValuesNameTheImages runs the rewrite on the chart's own values:
// every repository it names is one make release builds.
func TestChartValuesNameTheImages(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "deploy", "helm", "fenced", "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	got, err := setImageRegistry(b, "ghcr.io/fenced-io")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range imageRepository.FindAllSubmatch(got, -1) {
		switch string(m[2]) {
		case "ghcr.io/fenced-io/fenced", "ghcr.io/fenced-io/fenced-fence-agents":
		default:
			t.Errorf("the chart names image repository %s, which make release does not build", m[2])
		}
	}
}

func TestImageSBOM(t *testing.T) {
	dir := t.TempDir()
	// An OCI archive as make image writes it: its index.json names one index.
	const digest = "sha256:" + "ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12"
	archive := filepath.Join(dir, "image.oci.tar")
	index := `{"schemaVersion":2,"manifests":[{"mediaType":"application/vnd.oci.image.index.v1+json","digest":"` + digest + `","size":1}]}`
	tarBytes := tarOf(t, map[string]string{"oci-layout": `{"imageLayoutVersion":"1.0.0"}`, "index.json": index})
	if err := os.WriteFile(archive, tarBytes, 0o644); err != nil {
		t.Fatal(err)
	}
	var sboms []string
	for _, arch := range []string{"amd64", "arm64"} {
		// As cyclonedx-gomod bin writes it: one bom-ref for every platform.
		sbom := `{"bomFormat":"CycloneDX","specVersion":"1.6","metadata":{"component":{"type":"application",
		"bom-ref":"pkg:golang/fenced.io/fenced@v0.2.0?type=module#cmd/fenced","purl":"pkg:golang/fenced.io/fenced@v0.2.0?goarch=` + arch + `&goos=linux&type=module#cmd/fenced","name":"fenced.io/fenced"}},
		"components":[{"type":"library","bom-ref":"pkg:golang/k8s.io/api@v0.34.4?type=module","name":"k8s.io/api"}],
		"dependencies":[{"ref":"pkg:golang/fenced.io/fenced@v0.2.0?type=module#cmd/fenced","dependsOn":["pkg:golang/k8s.io/api@v0.34.4?type=module"]},{"ref":"pkg:golang/k8s.io/api@v0.34.4?type=module"}]}`
		name := filepath.Join(dir, arch+".cdx.json")
		if err := os.WriteFile(name, []byte(sbom), 0o644); err != nil {
			t.Fatal(err)
		}
		sboms = append(sboms, name)
	}
	lock := filepath.Join(dir, "fence-agents.lock")
	if err := os.WriteFile(lock, []byte("# a lock\nsuite debian bookworm\narch amd64\nroot fence-agents\n"+
		"deb amd64 fence-agents 4.12.1-1 debian/pool/main/f/fence-agents/fence-agents_4.12.1-1_amd64.deb 3734070008ff36d38eb3573e63ee62721e0a23fe56de11a85a537400acdccee8 291260\n"+
		"deb arm64 ipmitool 1.8.19-4+deb12u2 debian/pool/main/i/ipmitool/ipmitool_1.8.19-4+deb12u2_arm64.deb 62fb8c6aa6b27315458ae621e1c80468e5fc513b806617f7247a602369bb8e63 2003168\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	in := imageSBOMInput{Archive: archive, Repository: "ghcr.io/fenced-io/fenced-fence-agents", Version: testVersion, Time: commitTime, DebianLock: lock, BinarySBOMs: sboms}
	b, err := imageSBOM(in)
	if err != nil {
		t.Fatal(err)
	}
	again, err := imageSBOM(in)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b, again) {
		t.Error("the same inputs gave two different SBOMs")
	}
	var bom struct {
		BOMFormat string `json:"bomFormat"`
		Metadata  struct {
			Timestamp string       `json:"timestamp"`
			Component cdxComponent `json:"component"`
		} `json:"metadata"`
		Components   []cdxComponent  `json:"components"`
		Dependencies []cdxDependency `json:"dependencies"`
	}
	if err := json.Unmarshal(b, &bom); err != nil {
		t.Fatal(err)
	}
	if bom.BOMFormat != "CycloneDX" || bom.Metadata.Timestamp != "2026-03-04T05:06:07Z" || bom.Metadata.Component.Type != "container" ||
		!strings.Contains(bom.Metadata.Component.PURL, "sha256%3Aab12") {
		t.Errorf("metadata: %+v", bom.Metadata)
	}
	var refs []string
	for _, c := range bom.Components {
		refs = append(refs, c.BOMRef)
	}
	want := []string{
		"pkg:deb/debian/fence-agents@4.12.1-1?arch=amd64",
		"pkg:deb/debian/ipmitool@1.8.19-4%2Bdeb12u2?arch=arm64",
		"pkg:golang/fenced.io/fenced@v0.2.0?goarch=amd64&goos=linux&type=module#cmd/fenced",
		"pkg:golang/fenced.io/fenced@v0.2.0?goarch=arm64&goos=linux&type=module#cmd/fenced",
		"pkg:golang/k8s.io/api@v0.34.4?type=module",
	}
	if strings.Join(refs, "\n") != strings.Join(want, "\n") {
		t.Errorf("components:\n%s\nwant\n%s", strings.Join(refs, "\n"), strings.Join(want, "\n"))
	}
	dependsOn := map[string][]string{}
	for _, d := range bom.Dependencies {
		dependsOn[d.Ref] = d.DependsOn
	}
	if got := dependsOn[bom.Metadata.Component.BOMRef]; len(got) != 4 {
		t.Errorf("the image depends on %v, want both binaries and both packages", got)
	}
	for _, arch := range []string{"amd64", "arm64"} {
		ref := "pkg:golang/fenced.io/fenced@v0.2.0?goarch=" + arch + "&goos=linux&type=module#cmd/fenced"
		if got := dependsOn[ref]; len(got) != 1 {
			t.Errorf("the %s binary depends on %v, want its module", arch, got)
		}
	}
}

func tarOf(t *testing.T, files map[string]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, name := range sortedKeys(files) {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(files[name]))}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(files[name])); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}
