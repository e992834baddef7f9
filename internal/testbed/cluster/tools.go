package cluster

import (
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"sync"
)

// toolMu serialises InstallTool within a test binary; concurrent test
// binaries may both install a tool, each writing the same file by rename
// (go install does), so the loser's copy is as good as the winner's.
var toolMu sync.Mutex

// InstallTool returns the command built from module ("path/to/cmd/name@version",
// pinned), installed once into fenced's cache beside the Kubernetes
// binaries — CacheDir()/tools/name-version/name — with go install from the Go
// module proxy (minutes the first time, nothing afterwards).
func InstallTool(module string) (string, error) {
	pkg, version, ok := strings.Cut(module, "@")
	if !ok || version == "" {
		return "", fmt.Errorf("tool %q: want path@version", module)
	}
	name := path.Base(pkg)
	cache, err := CacheDir()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(cache, "tools", name+"-"+version)
	bin := filepath.Join(dir, name)
	toolMu.Lock()
	defer toolMu.Unlock()
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		return "", err
	}
	cmd := exec.Command(goTool, "install", module)
	cmd.Env = append(os.Environ(), "GOBIN="+dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go install %s: %v\n%s", module, err, out)
	}
	return bin, nil
}

// HelmModule is Helm, pinned: the chart's tests render and lint with it.
const HelmModule = "helm.sh/helm/v3/cmd/helm@v3.22.0"
