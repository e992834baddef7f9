// Command image builds fenced's container image offline, as an OCI image
// archive, from a static fenced binary: no base image is pulled. The image
// is the FROM-scratch equivalent of distroless/static's nonroot variant —
// the binary, the machine's CA certificates (Redfish over HTTPS), and
// /etc/passwd and /etc/group naming the non-root user 65532 the manifests
// run as — with OCI annotations and labels for the version and the source
// revision.
//
// The build is reproducible: every file and the image's creation time are
// stamped with -created (make image passes the commit's time), entries are
// written in a fixed order with fixed owners, and go-containerregistry
// writes the manifest, config and layout. The same binary and CA bundle give
// the same digest; make image builds the binary with -trimpath and an empty
// build ID so that the same source gives the same binary.
//
// The archive is an OCI image layout in a tar file, which containerd
// (`ctr -n k8s.io images import`, `kind load image-archive`), podman
// (`podman load -i`) and skopeo (`skopeo copy oci-archive:…`) read. Its
// index names the image with the reference given by -tag.
//
//	go run ./hack/image -binary bin/linux-amd64/fenced -out bin/fenced-image.tar \
//	    -version v0.2.0 -revision $(git rev-parse HEAD) -created $(git log -1 --format=%ct)
package main

import (
	"archive/tar"
	"bytes"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The image's user: the uid and gid the DaemonSets run as
// (deploy/daemonset/base/daemonset.yaml), distroless' "nonroot".
const (
	uid      = 65532
	userName = "nonroot"
	home     = "/home/nonroot"
)

// Where things are in the image.
const (
	binaryPath = "/usr/local/bin/fenced"
	caPath     = "/etc/ssl/certs/ca-certificates.crt"
)

func main() {
	binary := flag.String("binary", "", "the static fenced binary to put in the image (required)")
	out := flag.String("out", "bin/fenced-image.tar", "where to write the OCI image archive")
	ca := flag.String("ca", caPath, "the CA certificate bundle to put in the image")
	version := flag.String("version", "dev", "the version, in the labels and annotations")
	revision := flag.String("revision", "", "the source revision (git commit), in the labels and annotations")
	created := flag.Int64("created", 0, "creation time, seconds since the epoch, for the image and every file (the commit's time makes the build reproducible)")
	tag := flag.String("tag", "", "the image reference the archive's index names (default fenced:VERSION)")
	rootfs := flag.String("rootfs", "", "instead of the archive, write the image's files into this directory (the Dockerfile's build stage does, so that both builds hold the same files)")
	flag.Parse()
	if *binary == "" || flag.NArg() != 0 {
		fmt.Fprintln(os.Stderr, "usage: image -binary FILE [-out FILE] [-version V] [-revision SHA] [-created UNIX] [-tag REF]")
		os.Exit(2)
	}
	if *tag == "" {
		*tag = "fenced:" + *version
	}
	b := build{binary: *binary, ca: *ca, version: *version, revision: *revision, created: time.Unix(*created, 0).UTC(), tag: *tag}
	if *rootfs != "" {
		if err := b.writeRootfs(*rootfs); err != nil {
			fmt.Fprintln(os.Stderr, "image:", err)
			os.Exit(1)
		}
		fmt.Printf("wrote the image's files into %s\n", *rootfs)
		return
	}
	digest, err := b.write(*out)
	if err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
	fmt.Printf("wrote %s: %s %s\n", *out, *tag, digest)
}

// build is one image build.
type build struct {
	binary, ca        string
	version, revision string
	created           time.Time
	tag               string
}

// write builds the image and writes it to out as an OCI layout archive; it
// returns the image's manifest digest.
func (b build) write(out string) (v1.Hash, error) {
	img, err := b.image()
	if err != nil {
		return v1.Hash{}, err
	}
	digest, err := img.Digest()
	if err != nil {
		return v1.Hash{}, err
	}
	dir, err := os.MkdirTemp("", "fenced-image-")
	if err != nil {
		return v1.Hash{}, err
	}
	defer os.RemoveAll(dir)
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return v1.Hash{}, err
	}
	ref, err := fullName(b.tag)
	if err != nil {
		return v1.Hash{}, err
	}
	if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{
		"io.containerd.image.name":          ref, // ctr import (kind load) names the image by this
		"org.opencontainers.image.ref.name": ref, // podman load and skopeo by this
	})); err != nil {
		return v1.Hash{}, err
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return v1.Hash{}, err
	}
	return digest, tarDir(dir, out, b.created)
}

// fullName is tag as the kubelet looks it up in containerd: "fenced:v1"
// is "docker.io/library/fenced:v1" there, so an archive naming it
// "fenced:v1" would load an image no pod finds.
func fullName(tag string) (string, error) {
	ref, err := name.ParseReference(tag)
	if err != nil {
		return "", fmt.Errorf("-tag %q: %w", tag, err)
	}
	full := ref.Name()
	// go-containerregistry says index.docker.io where containerd and
	// Docker say docker.io.
	if rest, ok := strings.CutPrefix(full, name.DefaultRegistry+"/"); ok {
		full = "docker.io/" + rest
	}
	return full, nil
}

// image assembles the image: one layer, the config and the annotations.
func (b build) image() (v1.Image, error) {
	layerTar, err := b.rootfs()
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, err
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.AppendLayers(img, layer)
	if err != nil {
		return nil, err
	}
	labels := map[string]string{
		"org.opencontainers.image.title":       "fenced",
		"org.opencontainers.image.description": "fences dead Kubernetes nodes on power evidence so that their volumes move",
		"org.opencontainers.image.version":     b.version,
		"org.opencontainers.image.revision":    b.revision,
		"org.opencontainers.image.created":     b.created.Format(time.RFC3339),
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.Created = v1.Time{Time: b.created}
	cf.OS, cf.Architecture = "linux", runtime.GOARCH
	cf.Config = v1.Config{
		User:       strconv.Itoa(uid) + ":" + strconv.Itoa(uid),
		Entrypoint: []string{binaryPath},
		Cmd:        []string{"agent"},
		WorkingDir: home,
		Env:        []string{"PATH=/usr/local/bin", "SSL_CERT_FILE=" + caPath, "HOME=" + home},
		Labels:     labels,
	}
	cf.History = []v1.History{{Created: v1.Time{Time: b.created}, CreatedBy: "hack/image " + b.version, Comment: "fenced binary, CA certificates, user " + userName}}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, err
	}
	return mutate.Annotations(img, labels).(v1.Image), nil
}

// file is one entry of the image's file system.
type file struct {
	name string // relative, a directory's with a trailing slash
	mode int64
	body []byte
	dir  bool
	own  int // uid and gid
}

// files are the image's files: owned by root, but the user's home.
func (b build) files() ([]file, error) {
	bin, err := os.ReadFile(b.binary)
	if err != nil {
		return nil, fmt.Errorf("the fenced binary: %w", err)
	}
	ca, err := os.ReadFile(b.ca)
	if err != nil {
		return nil, fmt.Errorf("the CA certificates (Debian's ca-certificates package puts them at %s): %w", caPath, err)
	}
	passwd := fmt.Sprintf("root:x:0:0:root:/root:/sbin/nologin\n%s:x:%d:%d:%s:%s:/sbin/nologin\n", userName, uid, uid, userName, home)
	group := fmt.Sprintf("root:x:0:\n%s:x:%d:\n", userName, uid)
	return []file{
		{name: "etc/", mode: 0o755, dir: true},
		{name: "etc/group", mode: 0o644, body: []byte(group)},
		{name: "etc/passwd", mode: 0o644, body: []byte(passwd)},
		{name: "etc/ssl/", mode: 0o755, dir: true},
		{name: "etc/ssl/certs/", mode: 0o755, dir: true},
		{name: "etc/ssl/certs/ca-certificates.crt", mode: 0o644, body: ca},
		{name: "home/", mode: 0o755, dir: true},
		// 0755: the DaemonSets run as uid 0 without capabilities (the system
		// bus knows no 65532), and client-go looks for ~/.kube/config here.
		{name: "home/nonroot/", mode: 0o755, dir: true, own: uid},
		{name: "tmp/", mode: 0o1777, dir: true},
		{name: "usr/", mode: 0o755, dir: true},
		{name: "usr/local/", mode: 0o755, dir: true},
		{name: "usr/local/bin/", mode: 0o755, dir: true},
		{name: "usr/local/bin/fenced", mode: 0o755, body: bin},
	}, nil
}

// rootfs is the image's one layer: the files in a fixed order, every one
// stamped with the creation time.
func (b build) rootfs() ([]byte, error) {
	files, err := b.files()
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range files {
		h := &tar.Header{Name: e.name, Mode: e.mode, Uid: e.own, Gid: e.own, ModTime: b.created, Format: tar.FormatPAX}
		if e.dir {
			h.Typeflag = tar.TypeDir
		} else {
			h.Typeflag, h.Size = tar.TypeReg, int64(len(e.body))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(e.body); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// writeRootfs writes the image's files below dir, with their modes, owners
// (when run as root) and times.
func (b build) writeRootfs(dir string) error {
	files, err := b.files()
	if err != nil {
		return err
	}
	for _, e := range files {
		target := filepath.Join(dir, filepath.FromSlash(e.name))
		if e.dir {
			err = os.MkdirAll(target, 0o755)
		} else {
			err = os.WriteFile(target, e.body, 0o644)
		}
		if err != nil {
			return err
		}
		// Chmod, not the create mode: the umask would take bits away.
		if err := os.Chmod(target, fs.FileMode(e.mode&0o777)|stickyIf(e.mode)); err != nil {
			return err
		}
		if os.Geteuid() == 0 {
			if err := os.Lchown(target, e.own, e.own); err != nil {
				return err
			}
		}
	}
	for i := len(files) - 1; i >= 0; i-- { // directories' times after their contents
		if err := os.Chtimes(filepath.Join(dir, filepath.FromSlash(files[i].name)), b.created, b.created); err != nil {
			return err
		}
	}
	return nil
}

// stickyIf is the sticky bit when a tar mode has it.
func stickyIf(mode int64) fs.FileMode {
	if mode&0o1000 != 0 {
		return fs.ModeSticky
	}
	return 0
}

// tarDir writes the files below dir to the tar file out, in name order,
// stamped with at: the same layout gives the same archive.
func tarDir(dir, out string, at time.Time) error {
	var names []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || path == dir {
			return err
		}
		names = append(names, path)
		return nil
	})
	if err != nil {
		return err
	}
	sort.Strings(names)
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(f)
	for _, path := range names {
		fi, err := os.Lstat(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		h := &tar.Header{Name: filepath.ToSlash(rel), ModTime: at, Mode: 0o644, Format: tar.FormatPAX}
		if fi.IsDir() {
			h.Name, h.Typeflag, h.Mode = h.Name+"/", tar.TypeDir, 0o755
		} else {
			h.Typeflag, h.Size = tar.TypeReg, fi.Size()
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if !fi.IsDir() {
			body, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			if _, err := tw.Write(body); err != nil {
				return err
			}
		}
	}
	if err := tw.Close(); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}
