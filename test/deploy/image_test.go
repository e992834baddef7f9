package deploy

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"fenced.io/fenced/internal/testbed/cluster"
	"fenced.io/fenced/internal/testbed/pdusim"
)

// TestImage builds the static image for both platforms twice with `make
// image` (offline: nothing is pulled) and checks that the two archives are
// the same bytes, that the archive is an OCI layout naming one image index
// of linux/amd64 and linux/arm64, and what the images hold: the
// entrypoint, the user the DaemonSets run as, the version and revision
// labels and annotations, the CA certificates, a binary that runs (this
// machine's) and an arm64 binary for arm64.
func TestImage(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the image; skipped with -short")
	}
	root := repoRoot(t)
	const tag = "fenced:image-test"
	first, second, _ := buildImageTwice(t, "image", "IMAGE_ARCHIVE", "IMAGE_TAG="+tag, "IMAGE_PLATFORMS=linux/amd64,linux/arm64")
	if a, b := fileSHA256(t, first), fileSHA256(t, second); a != b {
		t.Fatalf("two builds of the same source differ: %s and %s", a, b)
	}
	revision := strings.TrimSpace(mustRun(t, "git", "-C", root, "rev-parse", "HEAD"))
	images, digest := readImageIndex(t, first, tag, revision, "linux/amd64", "linux/arm64")
	img := images["linux/"+runtime.GOARCH]
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	c := cf.Config
	if !slices.Equal(c.Entrypoint, []string{"/usr/local/bin/fenced"}) || c.User != "65532:65532" ||
		c.Labels["org.opencontainers.image.version"] != "image-test" || c.Labels["org.opencontainers.image.revision"] != revision {
		t.Fatalf("config %+v: want entrypoint /usr/local/bin/fenced, user 65532:65532, version image-test, revision %s", c, revision)
	}

	// The Dockerfile builds the same image: the same binary flags, its
	// files written by hack/image, the same configuration.
	requireDockerfileMatches(t, c.Entrypoint, c.Cmd, c.User, c.WorkingDir, c.Env, c.Labels)

	files, bodies := imageFiles(t, img)
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
	bin := filepath.Join(t.TempDir(), "fenced")
	if err := os.WriteFile(bin, bodies["usr/local/bin/fenced"], 0o755); err != nil {
		t.Fatal(err)
	}
	if out := mustRun(t, bin, "version"); !strings.Contains(out, "image-test") {
		t.Fatalf("fenced version in the image says %q", out)
	}
	// Each platform's image holds that platform's binary.
	for platform, want := range map[string]elf.Machine{"linux/amd64": elf.EM_X86_64, "linux/arm64": elf.EM_AARCH64} {
		_, bodies := imageFiles(t, images[platform])
		f, err := elf.NewFile(bytes.NewReader(bodies["usr/local/bin/fenced"]))
		if err != nil {
			t.Fatalf("%s: the binary is no ELF file: %v", platform, err)
		}
		if f.Machine != want || f.Class != elf.ELFCLASS64 {
			t.Fatalf("%s: the binary is %s %s, want %s", platform, f.Class, f.Machine, want)
		}
		if cf, err := images[platform].ConfigFile(); err != nil || cf.OS+"/"+cf.Architecture != platform {
			t.Fatalf("%s: the image's config says %s/%s (%v)", platform, cf.OS, cf.Architecture, err)
		}
	}
	t.Logf("image %s: %d files, index digest %s, %s", tag, len(files), digest, archiveSizes(t, images))
}

// buildImageTwice runs the make target twice, each into its own archive
// (the variable archiveVar) and with its own binaries, and returns the two
// archives and the fence-agents lock they were built from
// (cluster.MakeImage).
func buildImageTwice(t *testing.T, target, archiveVar string, vars ...string) (first, second, lock string) {
	t.Helper()
	dir := t.TempDir()
	build := func(name string) string {
		t.Helper()
		out := filepath.Join(dir, name)
		lock = cluster.MakeImage(t, target, append([]string{archiveVar + "=" + out,
			"IMAGE_BINARY=" + filepath.Join(dir, name+".fenced"), "VERSION=image-test"}, vars...)...)
		return out
	}
	return build("first.tar"), build("second.tar"), lock
}

// readImageIndex reads the OCI archive name: its index names one image
// index, as tag (as the kubelet asks containerd for it), with an image for
// each of platforms, annotated with the version and revision. It returns
// the images by platform and the index's digest.
func readImageIndex(t *testing.T, name, tag, revision string, platforms ...string) (map[string]v1.Image, v1.Hash) {
	t.Helper()
	unpacked := filepath.Join(t.TempDir(), "layout")
	untar(t, name, unpacked)
	lp, err := layout.ImageIndexFromPath(unpacked)
	if err != nil {
		t.Fatal(err)
	}
	im, err := lp.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	full := "docker.io/library/" + tag
	if len(im.Manifests) != 1 || im.Manifests[0].Annotations["org.opencontainers.image.ref.name"] != full ||
		im.Manifests[0].Annotations["io.containerd.image.name"] != full || im.Manifests[0].MediaType != types.OCIImageIndex {
		t.Fatalf("index %+v: want one image index named %s", im.Manifests, full)
	}
	idx, err := lp.ImageIndex(im.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	inner, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if inner.Annotations["org.opencontainers.image.revision"] != revision || inner.Annotations["org.opencontainers.image.version"] != "image-test" {
		t.Fatalf("the image index's annotations %v: want version image-test and revision %s", inner.Annotations, revision)
	}
	images := map[string]v1.Image{}
	var got []string
	for _, d := range inner.Manifests {
		if d.Platform == nil {
			t.Fatalf("manifest %s has no platform", d.Digest)
		}
		img, err := idx.Image(d.Digest)
		if err != nil {
			t.Fatal(err)
		}
		m, err := img.Manifest()
		if err != nil {
			t.Fatal(err)
		}
		if m.Annotations["org.opencontainers.image.revision"] != revision || m.Annotations["org.opencontainers.image.version"] != "image-test" {
			t.Fatalf("%s: manifest annotations %v: want the version and revision", d.Platform, m.Annotations)
		}
		images[d.Platform.String()] = img
		got = append(got, d.Platform.String())
	}
	if !slices.Equal(got, platforms) {
		t.Fatalf("the image index lists %v, want %v", got, platforms)
	}
	return images, im.Manifests[0].Digest
}

// imageFiles reads the image's file system: headers and regular files'
// contents by name (without a directory's trailing slash).
func imageFiles(t *testing.T, img v1.Image) (map[string]*tar.Header, map[string][]byte) {
	t.Helper()
	files := map[string]*tar.Header{}
	bodies := map[string][]byte{}
	walkImage(t, img, func(h *tar.Header, body []byte) {
		name := strings.TrimSuffix(h.Name, "/")
		files[name] = h
		if h.Typeflag == tar.TypeReg {
			bodies[name] = body
		}
	})
	return files, bodies
}

// walkImage calls fn with every entry of the image's file system (its
// layers flattened) and a regular file's contents.
func walkImage(t *testing.T, img v1.Image, fn func(h *tar.Header, body []byte)) {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close()
	walkTar(t, rc, fn)
}

// walkTar calls fn with every entry of the tar stream r and its contents.
func walkTar(t *testing.T, r io.Reader, fn func(h *tar.Header, body []byte)) {
	t.Helper()
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		fn(h, body)
	}
}

// archiveSizes says each image's compressed size (its layers, manifest
// and config): what a node pulls.
func archiveSizes(t *testing.T, images map[string]v1.Image) string {
	t.Helper()
	var out []string
	for _, platform := range slices.Sorted(maps.Keys(images)) {
		m, err := images[platform].Manifest()
		if err != nil {
			t.Fatal(err)
		}
		size := m.Config.Size
		for _, l := range m.Layers {
			size += l.Size
		}
		out = append(out, fmt.Sprintf("%s %.1f MB compressed", platform, float64(size)/1e6))
	}
	return strings.Join(out, ", ")
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
	const tags = "GO_TAGS      := kustomize_disable_go_plugin_support"
	if !strings.Contains(string(mk), tags) {
		t.Errorf("Makefile lacks %q", tags)
	}
	for _, want := range []string{flags, "ENV GOFLAGS=-tags=kustomize_disable_go_plugin_support\n", "go run ./hack/image -binary /out/fenced -rootfs /rootfs", "FROM scratch", "COPY --from=build /rootfs/ /"} {
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
	walkTar(t, f, func(h *tar.Header, body []byte) {
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
			if err := os.WriteFile(target, body, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	})
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

// TestFenceAgentsImage builds the fence-agents image for this machine's
// platform twice with `make image-fence-agents` (the Debian packages of
// the lock, from the cache or the mirror) and checks that the two
// archives are the same bytes, what the image holds, and that ClusterLabs'
// fence_apc_snmp runs from it as the fencer pod runs it — as uid 65532, on
// a read-only root, with fenced's agent environment — and reads and
// switches the outlets of a PDU (pdusim: net-snmp's snmpd).
func TestFenceAgentsImage(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the image; skipped with -short")
	}
	if os.Geteuid() != 0 {
		t.Skip("runs the image's agent in a chroot: needs root")
	}
	root := repoRoot(t)
	const tag = "fenced-fence-agents:image-test"
	platform := "linux/" + runtime.GOARCH
	first, second, lock := buildImageTwice(t, "image-fence-agents", "FENCE_AGENTS_IMAGE_ARCHIVE", "FENCE_AGENTS_IMAGE_TAG="+tag, "IMAGE_PLATFORMS="+platform)
	if a, b := fileSHA256(t, first), fileSHA256(t, second); a != b {
		t.Fatalf("two builds of the same source and lock differ: %s and %s", a, b)
	}
	revision := strings.TrimSpace(mustRun(t, "git", "-C", root, "rev-parse", "HEAD"))
	images, digest := readImageIndex(t, first, tag, revision, platform)
	img := images[platform]
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	lockSum := fileSHA256(t, lock)
	if c := cf.Config; c.User != "65532:65532" || !slices.Equal(c.Entrypoint, []string{"/usr/local/bin/fenced"}) ||
		c.Labels["io.fenced.debian-lock.sha256"] != lockSum || !slices.Contains(c.Env, "PYTHONDONTWRITEBYTECODE=1") {
		t.Fatalf("config %+v: want user 65532:65532, entrypoint fenced, the lock's digest %s, no Python bytecode written", c, lockSum)
	}
	files, _ := imageFiles(t, img)
	for name, want := range map[string]byte{
		"usr/local/bin/fenced":                 tar.TypeReg,
		"usr/sbin/fence_apc_snmp":              tar.TypeReg,
		"usr/sbin/fence_ipmilan":               tar.TypeReg,
		"usr/sbin/fence_redfish":               tar.TypeReg,
		"usr/bin/python3":                      tar.TypeSymlink, // python3-minimal's data, not a maintainer script
		"usr/bin/snmpget":                      tar.TypeReg,
		"usr/bin/ipmitool":                     tar.TypeReg,
		"lib":                                  tar.TypeSymlink, // merged /usr: the ELF interpreter's path
		"usr/share/doc/fence-agents/copyright": tar.TypeReg,
	} {
		if h := files[name]; h == nil || h.Typeflag != want || h.Uid != 0 || h.ModTime.Unix() != cf.Created.Unix() {
			t.Errorf("%s: %+v; want type %q, owned by root, stamped %s", name, h, want, cf.Created)
		}
	}
	for name, h := range files {
		if h.Mode&0o6000 != 0 {
			t.Errorf("%s is setuid or setgid", name)
		}
		if strings.HasPrefix(name, "usr/share/man/") || strings.Contains(name, "boto3") {
			t.Errorf("%s is in the image: documentation and the cloud SDKs are left out", name)
		}
	}

	// The agent, from the image's file system, against a PDU.
	rootfs := filepath.Join(t.TempDir(), "rootfs")
	unpackImage(t, img, rootfs)
	pdu := pdusim.Start(t, pdusim.Options{Outlets: 4, Off: []int{2}})
	agent := func(action, plug string) (int, string) {
		t.Helper()
		stdin := fmt.Sprintf("action=%s\nip=%s\nipport=%d\nsnmp_version=2c\ncommunity=%s\nplug=%s\n", action, pdu.Host, pdu.Port, pdu.Community, plug)
		out, err := runInImage(t, rootfs, stdin, "/usr/sbin/fence_apc_snmp")
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatalf("fence_apc_snmp action=%s plug=%s: %v\n%s", action, plug, err, out)
		}
		return code, out
	}
	// The agent API: status exits 0 for on, 2 for off.
	for _, tc := range []struct {
		plug string
		want int
	}{{"1", 0}, {"2", 2}} {
		if code, out := agent("status", tc.plug); code != tc.want {
			t.Fatalf("fence_apc_snmp status of outlet %s exited %d, want %d:\n%s", tc.plug, code, tc.want, out)
		}
	}
	if code, out := agent("off", "3"); code != 0 || pdu.Outlet(3) {
		t.Fatalf("fence_apc_snmp off of outlet 3 exited %d, outlet on: %v\n%s", code, pdu.Outlet(3), out)
	}
	t.Logf("fence-agents image %s: %d files, index digest %s, %s; fence_apc_snmp in it read outlets 1 (on) and 2 (off) and switched outlet 3 off",
		tag, len(files), digest, archiveSizes(t, images))
}

// unpackImage writes the image's file system below dir (regular files,
// directories and symbolic links, with their modes), and the mount points
// a container runtime makes.
func unpackImage(t *testing.T, img v1.Image, dir string) {
	t.Helper()
	walkImage(t, img, func(h *tar.Header, body []byte) {
		target := filepath.Join(dir, filepath.FromSlash(h.Name))
		if !strings.HasPrefix(target, filepath.Clean(dir)+string(filepath.Separator)) {
			t.Fatalf("image entry %q leaves the directory", h.Name)
		}
		var err error
		switch h.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(target, 0o755)
		case tar.TypeReg:
			err = os.WriteFile(target, body, 0o644)
		case tar.TypeSymlink:
			err = os.Symlink(h.Linkname, target)
		default:
			t.Fatalf("image entry %q of type %q", h.Name, h.Typeflag)
		}
		if err == nil && h.Typeflag != tar.TypeSymlink {
			// Chmod, not the create mode: the umask would take bits away.
			err = os.Chmod(target, os.FileMode(h.Mode&0o777))
		}
		if err != nil {
			t.Fatal(err)
		}
	})
	for _, d := range []string{"dev", "proc"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

// runInImage runs argv from the file system rootfs as the fencer pod's
// container runs it: in a mount namespace of its own where rootfs is
// read-only (with the host's /dev and a /proc, as a runtime mounts them),
// as uid and gid 65532, with the whole environment fenced gives a fence
// agent (pkg/fencing/device) and options on stdin.
func runInImage(t *testing.T, rootfs, stdin string, argv ...string) (string, error) {
	t.Helper()
	script := `set -e; r=$1; shift
mount --make-rprivate /
mount --bind "$r" "$r"; mount -o remount,bind,ro "$r"
mount --rbind /dev "$r/dev"; mount -t proc proc "$r/proc"
exec chroot --userspec=65532:65532 "$r" "$@"`
	cmd := exec.Command("unshare", append([]string{"--mount", "--fork", "sh", "-c", script, "sh", rootfs}, argv...)...)
	cmd.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL=C.UTF-8"}
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestMakeBuildLinksNoPluginLoader: `make build`, as a user types it (no
// GOFLAGS of the test's own), links no part of Go's plugin package.
// kustomize, under cli-runtime, imports it unless the Makefile's GO_TAGS
// say otherwise, and a cgo binary linking it exports every symbol: a third
// more bytes on disk and in memory, for plugins fenced never loads.
func TestMakeBuildLinksNoPluginLoader(t *testing.T) {
	if testing.Short() {
		t.Skip("builds fenced")
	}
	bin := filepath.Join(t.TempDir(), "fenced")
	cmd := exec.CommandContext(t.Context(), "make", "-C", repoRoot(t), "--no-print-directory", "build", "BIN="+bin, "VERSION=build-test")
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GOFLAGS=") && !strings.HasPrefix(kv, "MAKEFLAGS=") && !strings.HasPrefix(kv, "MFLAGS=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make build: %v\n%s", err, out)
	}
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close() })
	syms, err := f.Symbols()
	if err != nil {
		t.Fatalf("%s has no symbol table: %v", bin, err)
	}
	for _, s := range syms {
		if strings.HasPrefix(s.Name, "plugin.") {
			t.Fatalf("make build's binary links Go's plugin package (%s): build it with the Makefile's GO_TAGS", s.Name)
		}
	}
	if dyn, err := f.DynamicSymbols(); err == nil && len(dyn) > 1000 {
		t.Errorf("make build's binary exports %d dynamic symbols, as a binary that can load plugins does", len(dyn))
	}
}
