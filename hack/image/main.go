// Command image builds fenced's container images offline, as OCI image
// archives, from static fenced binaries: no base image is pulled. Two
// variants:
//
//   - static (the default): the FROM-scratch equivalent of
//     distroless/static's nonroot variant — the binary, the machine's CA
//     certificates (Redfish over HTTPS), and /etc/passwd and /etc/group
//     naming the non-root user 65532 the manifests run as.
//   - fence-agents: the same files on top of a layer of Debian packages —
//     ClusterLabs' fence agents, python3 and the libraries they import,
//     net-snmp's snmpget/snmpset, ipmitool — exactly those a lock file
//     lists (-lock, package hack/image/debian), fetched into -debs-cache,
//     each checked against its SHA-256, unpacked without maintainer
//     scripts.
//
// Each -binary is one platform (linux/amd64=bin/…/fenced); the archive's
// index names one image index holding an image per platform, with OCI
// annotations and labels for the version and the source revision.
//
// The build is reproducible: every file and the image's creation time are
// stamped with -created (make image passes the commit's time), entries are
// written in a fixed order with fixed owners, and go-containerregistry
// writes the manifests, configs and layout. The same binaries, CA bundle
// (and lock) give the same digest; make image builds the binaries with
// -trimpath and an empty build ID so that the same source gives the same
// binaries.
//
// The archive is an OCI image layout in a tar file, which containerd
// (`ctr -n k8s.io images import`, `kind load image-archive`), podman
// (`podman load -i`) and skopeo (`skopeo copy --all oci-archive:…`) read.
// Its index names the image with the reference given by -tag.
//
//	go run ./hack/image -binary linux/amd64=bin/linux-amd64/fenced -binary linux/arm64=bin/linux-arm64/fenced \
//	    -out bin/fenced-image.tar -version v0.2.0 -revision $(git rev-parse HEAD) -created $(git log -1 --format=%ct)
package main

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
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

	"fenced.io/fenced/hack/image/debian"
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

// The variants.
const (
	variantStatic      = "static"
	variantFenceAgents = "fence-agents"
)

// binaries is the -binary flag: platform=path, repeated.
type binaries map[string]string

func (b binaries) String() string { return fmt.Sprint(map[string]string(b)) }

// Set takes "linux/arm64=path", or a bare path for this machine's platform.
func (b binaries) Set(v string) error {
	platform, path, ok := strings.Cut(v, "=")
	if !ok {
		platform, path = "linux/"+runtime.GOARCH, v
	}
	if _, err := v1.ParsePlatform(platform); err != nil || !strings.HasPrefix(platform, "linux/") {
		return fmt.Errorf("platform %q: want linux/ARCH", platform)
	}
	if _, dup := b[platform]; dup {
		return fmt.Errorf("two binaries for %s", platform)
	}
	b[platform] = path
	return nil
}

func main() {
	bins := binaries{}
	flag.Var(bins, "binary", "`[linux/ARCH=]FILE`: the static fenced binary of a platform (required; repeat for each platform; a bare FILE is this machine's platform)")
	out := flag.String("out", "bin/fenced-image.tar", "where to write the OCI image archive")
	ca := flag.String("ca", caPath, "the CA certificate bundle to put in the image")
	variant := flag.String("variant", variantStatic, "static, or fence-agents (with the Debian packages of -lock)")
	lock := flag.String("lock", "hack/image/fence-agents.lock", "the fence-agents variant's Debian package lock")
	cache := flag.String("debs-cache", defaultCache(), "where the fence-agents variant's .deb files are cached")
	version := flag.String("version", "dev", "the version, in the labels and annotations")
	revision := flag.String("revision", "", "the source revision (git commit), in the labels and annotations")
	created := flag.Int64("created", 0, "creation time, seconds since the epoch, for the image and every file (the commit's time makes the build reproducible)")
	tag := flag.String("tag", "", "the image reference the archive's index names (default fenced:VERSION)")
	rootfs := flag.String("rootfs", "", "instead of the archive, write the static image's files into this directory (the Dockerfile's build stage does, so that both builds hold the same files)")
	flag.Parse()
	if len(bins) == 0 || flag.NArg() != 0 || (*variant != variantStatic && *variant != variantFenceAgents) {
		fmt.Fprintln(os.Stderr, "usage: image -binary [linux/ARCH=]FILE ... [-variant static|fence-agents] [-out FILE] [-version V] [-revision SHA] [-created UNIX] [-tag REF]")
		os.Exit(2)
	}
	if *tag == "" {
		*tag = "fenced:" + *version
	}
	b := build{binaries: bins, ca: *ca, variant: *variant, lock: *lock, cache: *cache,
		version: *version, revision: *revision, created: time.Unix(*created, 0).UTC(), tag: *tag}
	if *rootfs != "" {
		if len(bins) != 1 || *variant != variantStatic {
			fmt.Fprintln(os.Stderr, "image: -rootfs writes the static variant of one binary")
			os.Exit(2)
		}
		for _, bin := range bins {
			b.binary = bin
		}
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
	fmt.Printf("wrote %s: %s %s (%s)\n", *out, *tag, digest, strings.Join(b.platforms(), ", "))
}

// defaultCache is ~/.cache/fenced/debs.
func defaultCache() string {
	dir, err := os.UserCacheDir()
	if err != nil {
		dir = os.TempDir()
	}
	return filepath.Join(dir, "fenced", "debs")
}

// build is one image build.
type build struct {
	binaries          binaries
	binary            string // the platform's, while its files are assembled
	ca                string
	variant           string
	lock, cache       string
	version, revision string
	created           time.Time
	tag               string
}

// platforms are the build's platforms, sorted: the index lists them in a
// fixed order.
func (b build) platforms() []string {
	ps := make([]string, 0, len(b.binaries))
	for p := range b.binaries {
		ps = append(ps, p)
	}
	slices.Sort(ps)
	return ps
}

// write builds the image index and writes it to out as an OCI layout
// archive; it returns the index's digest.
func (b build) write(out string) (v1.Hash, error) {
	idx, err := b.index()
	if err != nil {
		return v1.Hash{}, err
	}
	digest, err := idx.Digest()
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
	if err := p.AppendIndex(idx, layout.WithAnnotations(map[string]string{
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

// labels are the image's labels, and the annotations of its manifests and
// index.
func (b build) labels() (map[string]string, error) {
	title, description := "fenced", "fences dead Kubernetes nodes on power evidence so that their volumes move"
	labels := map[string]string{
		"org.opencontainers.image.title":       title,
		"org.opencontainers.image.description": description,
		"org.opencontainers.image.version":     b.version,
		"org.opencontainers.image.revision":    b.revision,
		"org.opencontainers.image.created":     b.created.Format(time.RFC3339),
	}
	if b.variant == variantFenceAgents {
		lock, err := os.ReadFile(b.lock)
		if err != nil {
			return nil, err
		}
		sum := sha256.Sum256(lock)
		labels["org.opencontainers.image.title"] = title + "-" + variantFenceAgents
		labels["org.opencontainers.image.description"] = description + "; with ClusterLabs fence agents from Debian"
		// Which packages: the lock file, by its digest.
		labels["io.fenced.debian-lock.sha256"] = hex.EncodeToString(sum[:])
	}
	return labels, nil
}

// index is the image index: one image per platform.
func (b build) index() (v1.ImageIndex, error) {
	labels, err := b.labels()
	if err != nil {
		return nil, err
	}
	var lock *debian.Lock
	if b.variant == variantFenceAgents {
		if lock, err = debian.ReadLock(b.lock); err != nil {
			return nil, err
		}
	}
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, platform := range b.platforms() {
		p, _ := v1.ParsePlatform(platform)
		pb := b
		pb.binary = b.binaries[platform]
		var debs []debian.Deb
		if lock != nil {
			if debs = lock.For(p.Architecture); len(debs) == 0 {
				return nil, fmt.Errorf("%s locks no package for %s", b.lock, p.Architecture)
			}
		}
		img, err := pb.image(p.Architecture, labels, debs)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", platform, err)
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: p}})
	}
	return mutate.Annotations(idx, labels).(v1.ImageIndex), nil
}

// image assembles one platform's image: the Debian packages' layer (the
// fence-agents variant), fenced's layer, the config and the annotations.
func (b build) image(arch string, labels map[string]string, debs []debian.Deb) (v1.Image, error) {
	var layers [][]byte
	var comment []string
	if len(debs) > 0 {
		layer, err := b.debianLayer(debs)
		if err != nil {
			return nil, err
		}
		layers = append(layers, layer)
		comment = append(comment, fmt.Sprintf("%d Debian packages (%s)", len(debs), filepath.Base(b.lock)))
	}
	layer, err := b.rootfs()
	if err != nil {
		return nil, err
	}
	layers = append(layers, layer)
	comment = append(comment, "fenced binary, CA certificates, user "+userName)
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	for _, l := range layers {
		layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
			return io.NopCloser(bytes.NewReader(l)), nil
		}, tarball.WithMediaType(types.OCILayer))
		if err != nil {
			return nil, err
		}
		if img, err = mutate.AppendLayers(img, layer); err != nil {
			return nil, err
		}
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.Created = v1.Time{Time: b.created}
	cf.OS, cf.Architecture = "linux", arch
	env := []string{"PATH=/usr/local/bin", "SSL_CERT_FILE=" + caPath, "HOME=" + home}
	if b.variant == variantFenceAgents {
		// fenced runs the agents with a PATH of its own; this one is for
		// a shell's `kubectl exec … fence_apc_snmp`. Python writes no
		// bytecode: the root file system is read-only.
		env = []string{"PATH=/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin", "SSL_CERT_FILE=" + caPath,
			"HOME=" + home, "PYTHONDONTWRITEBYTECODE=1", "LC_ALL=C.UTF-8"}
	}
	cf.Config = v1.Config{
		User:       strconv.Itoa(uid) + ":" + strconv.Itoa(uid),
		Entrypoint: []string{binaryPath},
		Cmd:        []string{"agent"},
		WorkingDir: home,
		Env:        env,
		Labels:     labels,
	}
	cf.History = nil
	for _, c := range comment {
		cf.History = append(cf.History, v1.History{Created: v1.Time{Time: b.created}, CreatedBy: "hack/image " + b.version, Comment: c})
	}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, err
	}
	return mutate.Annotations(img, labels).(v1.Image), nil
}

// debianLayer is the layer of the locked Debian packages: fetched (or
// taken from the cache), each checked against the lock's SHA-256, and
// unpacked into one tree (debian.Unpack), every entry owned by root and
// stamped with the creation time.
func (b build) debianLayer(debs []debian.Deb) ([]byte, error) {
	packages := map[string][]byte{}
	for _, d := range debs {
		body, err := debian.Fetch(d, b.cache)
		if err != nil {
			return nil, err
		}
		packages[d.Package] = body
	}
	tree, err := debian.Unpack(packages)
	if err != nil {
		return nil, err
	}
	files := make([]file, len(tree))
	for i, f := range tree {
		files[i] = file{name: f.Name, mode: f.Mode, body: f.Body, dir: f.Type == tar.TypeDir, link: f.Linkname}
		if files[i].dir {
			files[i].name += "/"
		}
	}
	return b.layer(files)
}

// file is one entry of the image's file system.
type file struct {
	name string // relative, a directory's with a trailing slash
	mode int64
	body []byte
	dir  bool
	link string // a symbolic link's target
	own  int    // uid and gid
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

// rootfs is fenced's layer: its files in a fixed order.
func (b build) rootfs() ([]byte, error) {
	files, err := b.files()
	if err != nil {
		return nil, err
	}
	return b.layer(files)
}

// layer is the tar file of files, in their order, every one stamped with
// the creation time.
func (b build) layer(files []file) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range files {
		h := &tar.Header{Name: e.name, Mode: e.mode, Uid: e.own, Gid: e.own, ModTime: b.created, Format: tar.FormatPAX}
		switch {
		case e.dir:
			h.Typeflag = tar.TypeDir
		case e.link != "":
			h.Typeflag, h.Linkname = tar.TypeSymlink, e.link
		default:
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
