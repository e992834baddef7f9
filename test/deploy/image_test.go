package deploy

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
)

// TestImage builds the image twice with `make image` (offline: nothing is
// pulled) and checks that the two archives are the same bytes, that the
// archive is an OCI layout naming the image, and what the image holds: the
// entrypoint, the user the DaemonSets run as, the version and revision
// labels, the CA certificates, and a binary that runs.
func TestImage(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the image; skipped with -short")
	}
	root := repoRoot(t)
	dir := t.TempDir()
	const tag = "fenced:image-test"
	build := func(name string) string {
		t.Helper()
		out := filepath.Join(dir, name)
		cmd := exec.Command("make", "--no-print-directory", "image", "IMAGE_ARCHIVE="+out, "IMAGE_BINARY="+filepath.Join(dir, name+".fenced"),
			"IMAGE_TAG="+tag, "VERSION=image-test")
		cmd.Dir = root
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("make image: %v\n%s", err, b)
		}
		return out
	}
	first, second := build("first.tar"), build("second.tar")
	if a, b := fileSHA256(t, first), fileSHA256(t, second); a != b {
		t.Fatalf("two builds of the same source differ: %s and %s", a, b)
	}

	// The archive is an OCI layout whose index names the image.
	unpacked := filepath.Join(dir, "layout")
	untar(t, first, unpacked)
	idx, err := layout.ImageIndexFromPath(unpacked)
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	const full = "docker.io/library/" + tag // as the kubelet asks containerd for it
	if len(im.Manifests) != 1 || im.Manifests[0].Annotations["org.opencontainers.image.ref.name"] != full ||
		im.Manifests[0].Annotations["io.containerd.image.name"] != full {
		t.Fatalf("index %+v: want one image named %s", im.Manifests, full)
	}
	img, err := idx.Image(im.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}

	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	revision := strings.TrimSpace(mustRun(t, "git", "-C", root, "rev-parse", "HEAD"))
	c := cf.Config
	if !slices.Equal(c.Entrypoint, []string{"/usr/local/bin/fenced"}) || c.User != "65532:65532" ||
		c.Labels["org.opencontainers.image.version"] != "image-test" || c.Labels["org.opencontainers.image.revision"] != revision {
		t.Fatalf("config %+v: want entrypoint /usr/local/bin/fenced, user 65532:65532, version image-test, revision %s", c, revision)
	}
	m, err := img.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	if m.Annotations["org.opencontainers.image.revision"] != revision {
		t.Fatalf("manifest annotations %v: want the revision", m.Annotations)
	}

	// The Dockerfile builds the same image: the same binary flags, its
	// files written by hack/image, the same configuration.
	requireDockerfileMatches(t, c.Entrypoint, c.Cmd, c.User, c.WorkingDir, c.Env, c.Labels)

	// The files.
	files := map[string]*tar.Header{}
	bodies := map[string][]byte{}
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		files[strings.TrimSuffix(h.Name, "/")] = h
		if h.Typeflag == tar.TypeReg {
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			bodies[h.Name] = b
		}
	}
	if h := files["usr/local/bin/fenced"]; h == nil || h.Mode&0o111 == 0 {
		t.Fatalf("usr/local/bin/fenced missing or not executable: %+v", h)
	}
	if !bytes.Contains(bodies["etc/passwd"], []byte("nonroot:x:65532:65532:")) || !bytes.Contains(bodies["etc/group"], []byte("nonroot:x:65532:")) {
		t.Fatalf("passwd/group lack the user 65532:\n%s\n%s", bodies["etc/passwd"], bodies["etc/group"])
	}
	if !bytes.Contains(bodies["etc/ssl/certs/ca-certificates.crt"], []byte("BEGIN CERTIFICATE")) {
		t.Fatal("no CA certificates in the image")
	}
	// The DaemonSets run as uid 0 without capabilities: client-go must be
	// able to look for ~/.kube/config in the image's home and find nothing.
	if h := files["home/nonroot"]; h == nil || h.Typeflag != tar.TypeDir || h.Mode&0o755 != 0o755 {
		t.Fatalf("home/nonroot/ missing or not 0755: %+v", h)
	}
	if h := files["tmp"]; h == nil || h.Typeflag != tar.TypeDir || h.Mode&0o1777 != 0o1777 {
		t.Fatalf("tmp/ missing or not 1777: %+v", h)
	}
	// The binary runs and says its version.
	bin := filepath.Join(dir, "fenced")
	if err := os.WriteFile(bin, bodies["usr/local/bin/fenced"], 0o755); err != nil {
		t.Fatal(err)
	}
	if out := mustRun(t, bin, "version"); !strings.Contains(out, "image-test") {
		t.Fatalf("fenced version in the image says %q", out)
	}
	t.Logf("image %s: %d files, digest %s", tag, len(files), im.Manifests[0].Digest)
}

// requireDockerfileMatches checks the Dockerfile against the image make
// image built (Docker is not on CI machines, so the Dockerfile is read, not
// run): the binary built with the Makefile's flags, the files written by
// hack/image -rootfs onto scratch, and the same entrypoint, command, user,
// working directory, environment and fixed labels.
func requireDockerfileMatches(t *testing.T, entrypoint, cmd []string, user, workdir string, env []string, labels map[string]string) {
	t.Helper()
	b, err := os.ReadFile(path(t, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	df := strings.ReplaceAll(string(b), "\\\n", " ")
	mk, err := os.ReadFile(path(t, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	const flags = `-trimpath -ldflags "-s -w -buildid= `
	for _, want := range []string{flags, "go run ./hack/image -binary /out/fenced -rootfs /rootfs", "FROM scratch", "COPY --from=build /rootfs/ /"} {
		if !strings.Contains(df, want) {
			t.Errorf("Dockerfile lacks %q", want)
		}
	}
	if !strings.Contains(string(mk), flags) {
		t.Errorf("Makefile's image target lacks %q", flags)
	}
	quoted := func(xs []string) string { return `["` + strings.Join(xs, `", "`) + `"]` }
	for _, want := range []string{"ENTRYPOINT " + quoted(entrypoint), "CMD " + quoted(cmd), "USER " + user, "WORKDIR " + workdir, "ENV " + strings.Join(env, " ")} {
		if !strings.Contains(df, want+"\n") {
			t.Errorf("Dockerfile lacks %q (the image make image built has it)", want)
		}
	}
	for _, k := range []string{"org.opencontainers.image.title", "org.opencontainers.image.description"} {
		if !strings.Contains(df, k+`="`+labels[k]+`"`) {
			t.Errorf("Dockerfile's label %s is not %q", k, labels[k])
		}
	}
}

func fileSHA256(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// untar unpacks the tar file name into dir (regular files and directories).
func untar(t *testing.T, name, dir string) {
	t.Helper()
	f, err := os.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		target := filepath.Join(dir, filepath.FromSlash(h.Name))
		if !strings.HasPrefix(target, filepath.Clean(dir)+string(filepath.Separator)) {
			t.Fatalf("archive entry %q leaves the directory", h.Name)
		}
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(target, 0o755); err != nil {
				t.Fatal(err)
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
				t.Fatal(err)
			}
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(target, b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// mustRun runs a command and returns its output; it fails the test if the
// command fails.
func mustRun(t *testing.T, name string, args ...string) string {
	t.Helper()
	stdout, stderr, err := run(t, nil, name, args...)
	if err != nil {
		t.Fatalf("%s %s: %v\n%s%s", name, strings.Join(args, " "), err, stdout, stderr)
	}
	return stdout + stderr
}
