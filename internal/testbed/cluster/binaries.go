package cluster

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// SupportedKubeVersions are the Kubernetes releases fenced is tested on,
// the latest patch of each supported minor, oldest first: make e2e-matrix
// runs the core scenarios on each (README's table).
var SupportedKubeVersions = []string{"v1.34.4", "v1.35.4", "v1.36.3", "v1.37.2"}

// DefaultKubeVersion is the Kubernetes release the harness runs unless
// KUBE_VERSION or Options.KubeVersion says otherwise: the newest supported.
// Keep it in step with the default in hack/kube-binaries.sh.
const DefaultKubeVersion = "v1.37.2"

// Binaries are the upstream Kubernetes programs hack/kube-binaries.sh builds
// and caches. It also builds our hollow kubelet, see HollowKubeletName.
var Binaries = []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubemark", "kubelet", "kube-proxy", "kubectl"}

// HollowKubeletSource is the hollow kubelet's source directory, from the
// repository's top; hack/kube-binaries.sh builds it inside the Kubernetes
// tree (main.go with the CONCERN_v1.MINOR.go files for the release).
const HollowKubeletSource = "internal/testbed/hollow-kubelet"

// HollowKubeletName returns the cached file name of the hollow kubelet built
// from HollowKubeletSource: "hollow-kubelet-" and the first 12 hex digits of
// the SHA-256 of its .go files one after the other in byte order, as
// hack/kube-binaries.sh names it.
func HollowKubeletName() (string, error) {
	dir, err := RepoFile(HollowKubeletSource)
	if err != nil {
		return "", err
	}
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return "", err
	}
	if len(files) == 0 {
		return "", fmt.Errorf("no .go files in %s", dir)
	}
	sum := sha256.New()
	for _, f := range files { // Glob sorts, as the shell's glob in the C locale
		src, err := os.ReadFile(f)
		if err != nil {
			return "", err
		}
		sum.Write(src)
	}
	return "hollow-kubelet-" + hex.EncodeToString(sum.Sum(nil))[:12], nil
}

// KubeVersion returns the release to use: $KUBE_VERSION if set, else
// DefaultKubeVersion — the same rule as hack/kube-binaries.sh, so the script
// and the tests agree on which cache directory to look in.
func KubeVersion() string {
	if v := os.Getenv("KUBE_VERSION"); v != "" {
		return v
	}
	return DefaultKubeVersion
}

// CacheDir returns the cache root shared with hack/kube-binaries.sh:
// ${FENCED_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/fenced}. Like the shell's
// ":-", an empty variable counts as unset.
func CacheDir() (string, error) {
	if d := os.Getenv("FENCED_CACHE_DIR"); d != "" {
		return d, nil
	}
	if d := os.Getenv("XDG_CACHE_HOME"); d != "" {
		return filepath.Join(d, "fenced"), nil
	}
	home := os.Getenv("HOME")
	if home == "" {
		return "", errors.New("cannot find the cache dir: none of FENCED_CACHE_DIR, XDG_CACHE_HOME, HOME is set")
	}
	return filepath.Join(home, ".cache", "fenced"), nil
}

// BinDir returns the directory where the binaries of the given release are
// (or will be) cached. It does not check that they are there.
func BinDir(version string) (string, error) {
	root, err := CacheDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, "kube", version, "bin"), nil
}

// missingBinaries lists the entries of Binaries that are not executable files
// in dir.
func missingBinaries(dir string) []string {
	var missing []string
	hollow, err := HollowKubeletName()
	if err != nil {
		hollow = "hollow-kubelet (" + err.Error() + ")"
	}
	for _, b := range append(slices.Clone(Binaries), hollow) {
		fi, err := os.Stat(filepath.Join(dir, b))
		if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
			missing = append(missing, b)
		}
	}
	return missing
}

// ensureMu keeps two Start calls in one test binary from running the build
// script at the same time (the script's own lock covers separate binaries).
var ensureMu sync.Mutex

// EnsureBinaries returns the directory holding the cached binaries of version,
// building them with hack/kube-binaries.sh first if any is missing, so that
// `go test` works on a fresh machine. The script's progress is passed line by
// line to logf as it happens. A cold build takes several minutes: give `go
// test` a -timeout of 20m or more, or run the script beforehand.
func EnsureBinaries(ctx context.Context, version string, logf func(format string, args ...any)) (string, error) {
	ensureMu.Lock()
	defer ensureMu.Unlock()

	dir, err := BinDir(version)
	if err != nil {
		return "", err
	}
	missing := missingBinaries(dir)
	if len(missing) == 0 {
		return dir, nil
	}
	script, err := findScript()
	if err != nil {
		return "", fmt.Errorf("the binaries of Kubernetes %s are missing from %s (%s) and %w", version, dir, strings.Join(missing, ", "), err)
	}
	if logf == nil {
		logf = func(string, ...any) {}
	}
	logf("Kubernetes %s binaries missing from %s (%s): running %s (several minutes on a cold Go build cache)",
		version, dir, strings.Join(missing, ", "), script)

	root, err := CacheDir()
	if err != nil {
		return "", err
	}
	cmd := exec.CommandContext(ctx, "bash", script)
	cmd.Env = append(os.Environ(), "KUBE_VERSION="+version, "FENCED_CACHE_DIR="+root)
	// Its own process group, so that cancelling stops the go commands the
	// script runs too, not only bash; SIGTERM lets the script's trap remove
	// its temp dir.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM) }
	cmd.WaitDelay = 30 * time.Second
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	pr, pw := io.Pipe()
	cmd.Stderr = pw
	streamed := make(chan struct{})
	go func() {
		defer close(streamed)
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64*1024), 1024*1024)
		for sc.Scan() {
			logf("kube-binaries.sh: %s", sc.Text())
		}
		_, _ = io.Copy(io.Discard, pr) // keep draining after an over-long line
	}()
	runErr := cmd.Run()
	_ = pw.Close()
	<-streamed
	if runErr != nil {
		return "", fmt.Errorf("%s failed: %w (its output is above)", script, runErr)
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	if got := strings.TrimSpace(lines[len(lines)-1]); got != dir {
		return "", fmt.Errorf("%s reported bin dir %q, want %q", script, got, dir)
	}
	if missing := missingBinaries(dir); len(missing) > 0 {
		return "", fmt.Errorf("%s succeeded but %s still lacks %s", script, dir, strings.Join(missing, ", "))
	}
	return dir, nil
}

// findScript locates hack/kube-binaries.sh.
func findScript() (string, error) { return RepoFile("hack/kube-binaries.sh") }

// RepoFile finds a file of this repository by its path from the top: next
// to this source file when the binary was built from the repo (the usual
// case), else by walking up from the working directory.
func RepoFile(rel string) (string, error) {
	var tried []string
	if _, file, _, ok := runtime.Caller(0); ok {
		p := filepath.Join(filepath.Dir(file), "..", "..", "..", rel)
		if _, err := os.Stat(p); err == nil {
			return filepath.Clean(p), nil
		}
		tried = append(tried, p)
	}
	if wd, err := os.Getwd(); err == nil {
		for d := wd; ; d = filepath.Dir(d) {
			p := filepath.Join(d, rel)
			if _, err := os.Stat(p); err == nil {
				return p, nil
			}
			tried = append(tried, p)
			if filepath.Dir(d) == d {
				break
			}
		}
	}
	return "", fmt.Errorf("cannot find %s (tried %s)", rel, strings.Join(tried, ", "))
}
