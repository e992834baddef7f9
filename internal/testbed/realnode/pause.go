package realnode

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"fenced.io/fenced/internal/testbed/cluster"
)

// pauseSource is the pause program's package, from the repository's top.
const pauseSource = "internal/testbed/realnode/pause"

// buildPauseImage builds the pause program (static) and writes it as the
// image PauseImage, a docker-archive in dir, with go-containerregistry.
func buildPauseImage(dir string) (string, error) {
	src, err := cluster.RepoFile(pauseSource)
	if err != nil {
		return "", err
	}
	binary := filepath.Join(dir, "pause")
	build := exec.Command("go", "build", "-trimpath", "-o", binary, ".")
	build.Dir = src
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building the pause program: %v\n%s", err, out)
	}
	content, err := os.ReadFile(binary)
	if err != nil {
		return "", err
	}
	var layer bytes.Buffer
	tw := tar.NewWriter(&layer)
	if err := tw.WriteHeader(&tar.Header{Name: "pause", Mode: 0o755, Size: int64(len(content)), Typeflag: tar.TypeReg}); err != nil {
		return "", err
	}
	if _, err := tw.Write(content); err != nil {
		return "", err
	}
	if err := tw.Close(); err != nil {
		return "", err
	}
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(layer.Bytes())), nil })
	if err != nil {
		return "", err
	}
	// The configuration first: AppendLayers then adds the layer's diff ID
	// to its rootfs, which containerd checks against the layer.
	img, err := mutate.ConfigFile(empty.Image, &v1.ConfigFile{OS: "linux", Architecture: runtime.GOARCH,
		RootFS: v1.RootFS{Type: "layers"}, Config: v1.Config{Entrypoint: []string{"/pause"}}})
	if err != nil {
		return "", err
	}
	if img, err = mutate.AppendLayers(img, l); err != nil {
		return "", err
	}
	ref, err := name.ParseReference(PauseImage)
	if err != nil {
		return "", err
	}
	out := filepath.Join(dir, "pause.tar")
	return out, tarball.WriteToFile(out, ref, img)
}
