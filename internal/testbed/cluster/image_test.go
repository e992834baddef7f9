package cluster

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestMakeImageOutlivesAStaleLock: when Debian's mirror no longer holds a
// version the committed lock pins (here: a lock whose fence-agents line
// names a version the mirror never had), the test's image is built from a
// lock of the mirror's current versions instead, and the committed lock is
// left as it is.
func TestMakeImageOutlivesAStaleLock(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the fence-agents image from Debian's mirror; skipped with -short")
	}
	root, err := RepoFile(".")
	if err != nil {
		t.Fatal(err)
	}
	committed, err := os.ReadFile(filepath.Join(root, FenceAgentsLock))
	if err != nil {
		t.Fatal(err)
	}
	arch := runtime.GOARCH
	var stale []string
	gone := ""
	for _, line := range strings.Split(string(committed), "\n") {
		if f := strings.Fields(line); gone == "" && len(f) == 7 && f[0] == "deb" && f[1] == arch && f[2] == "fence-agents" {
			// A version the mirror never had, and a digest no cache holds.
			gone = strings.Replace(f[4], "_"+f[3]+"_", "_"+f[3]+"+gone1_", 1)
			f[3], f[4], f[5] = f[3]+"+gone1", gone, strings.Repeat("0", 64)
			line = strings.Join(f, " ")
		}
		stale = append(stale, line)
	}
	if gone == "" {
		t.Fatalf("%s has no fence-agents line for %s", FenceAgentsLock, arch)
	}
	staleLock := filepath.Join(t.TempDir(), "fence-agents.lock")
	if err := os.WriteFile(staleLock, []byte(strings.Join(stale, "\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	lock := makeImage(t, root, staleLock, "image-fence-agents", "FENCE_AGENTS_IMAGE_ARCHIVE="+filepath.Join(dir, "image.tar"),
		"IMAGE_BINARY="+filepath.Join(dir, "fenced"), "IMAGE_PLATFORMS=linux/"+arch, "FENCE_AGENTS_IMAGE_TAG=fenced-fence-agents:stale-lock-test")
	if lock == staleLock {
		t.Fatal("built from the stale lock: want a regenerated one")
	}
	regenerated, err := os.ReadFile(lock)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(regenerated), gone) {
		t.Errorf("the regenerated lock still pins %s", gone)
	}
	if _, err := os.Stat(filepath.Join(dir, "image.tar")); err != nil {
		t.Errorf("no image: %v", err)
	}
	if after, _ := os.ReadFile(staleLock); string(after) != strings.Join(stale, "\n") {
		t.Error("the committed (here: stale) lock was changed")
	}
}
