package cluster

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// FenceAgentsLock is the committed lock of the fence-agents image's Debian
// packages (hack/image/fence-agents.lock), relative to the repository.
const FenceAgentsLock = "hack/image/fence-agents.lock"

// staleLockMessage is what hack/image/debian says when the mirror no longer
// holds a file the lock pins.
const staleLockMessage = "a version the mirror no longer holds"

// MakeImage runs `make target vars...` in the repository (an image target:
// image, image-fence-agents) and returns the fence-agents lock the build
// used, an absolute path.
//
// That is the committed lock, unless Debian's mirror no longer holds a
// version it pins: the mirror keeps only the versions its indexes name, so
// a security update or a point release makes a committed lock unfetchable
// without any change here. Then the test still proves the image — built
// from a lock regenerated from the mirror's current indexes, with the
// committed lock's inputs, into a temporary file — and says loudly that the
// committed lock is stale. make release, which uses the committed lock
// only, fails until `make fence-agents-lock` is run and committed.
func MakeImage(t testing.TB, target string, vars ...string) (lock string) {
	t.Helper()
	root, err := RepoFile(".")
	if err != nil {
		t.Fatal(err)
	}
	return makeImage(t, root, filepath.Join(root, FenceAgentsLock), target, vars...)
}

// makeImage is MakeImage with the committed lock at committed.
func makeImage(t testing.TB, root, committed, target string, vars ...string) (lock string) {
	t.Helper()
	lock = committed
	run := func(lock string) ([]byte, error) {
		args := append([]string{"--no-print-directory", target}, vars...)
		cmd := exec.Command("make", append(args, "FENCE_AGENTS_LOCK="+lock)...)
		cmd.Dir = root
		start := time.Now()
		out, err := cmd.CombinedOutput()
		if err == nil {
			t.Logf("make %s: %s", target, time.Since(start).Round(100*time.Millisecond))
		}
		return out, err
	}
	out, err := run(lock)
	if err != nil && bytes.Contains(out, []byte(staleLockMessage)) {
		t.Logf("THE COMMITTED %s IS STALE (run make fence-agents-lock and commit it); building from the mirror's current versions instead:\n%s", FenceAgentsLock, LastLines(string(out), 5))
		lock = regenerateLock(t, root, committed)
		out, err = run(lock)
	}
	if err != nil {
		t.Fatalf("make %s: %v\n%s", target, err, out)
	}
	return lock
}

// regenerateLock writes a lock with the committed lock's inputs and the
// mirror's current versions into a temporary file.
func regenerateLock(t testing.TB, root, committed string) string {
	t.Helper()
	inputs, err := os.ReadFile(committed)
	if err != nil {
		t.Fatal(err)
	}
	lock := filepath.Join(t.TempDir(), filepath.Base(FenceAgentsLock))
	if err := os.WriteFile(lock, inputs, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "run", "./hack/image/debianlock", "-lock", lock)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("regenerating the fence-agents lock: %v\n%s", err, out)
	}
	return lock
}

// LastLines is the last n lines of text, for a test's failure message.
func LastLines(text string, n int) string {
	lines := strings.Split(strings.TrimRight(text, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
