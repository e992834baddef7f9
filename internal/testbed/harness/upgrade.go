package harness

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"fenced.io/fenced/internal/testbed/cluster"
)

// Upgrading fenced on the machines, as a DaemonSet rolling update does it:
// every machine starts its agent through a link of its own to a fenced
// binary (Fencing.AgentBinary, by default this tree's); UpgradeAgent points
// the link at another binary and restarts the agent from it. The binaries
// of earlier commits come from FencedAt.

// fencedPkg is fenced's command.
const fencedPkg = "fenced.io/fenced/cmd/fenced"

// CurrentFenced returns fenced's binary built from this tree (once per test
// binary).
func CurrentFenced() (string, error) { return buildOnce(fencedPkg) }

// fencedAtMu serialises FencedAt within a test binary; concurrent test
// binaries each build into a file of their own and rename it into place,
// so the loser's binary is as good as the winner's.
var fencedAtMu sync.Mutex

// FencedAt returns fenced's binary as it was at commit (any name git
// resolves in this repository): checked out with `git worktree add` into a
// temporary directory, built there, and cached by the full commit hash in
// fenced's cache (cluster.CacheDir()/fenced-at/<hash>/fenced), so only the
// first call for a commit builds (a minute or two).
func FencedAt(commit string) (string, error) {
	fencedAtMu.Lock()
	defer fencedAtMu.Unlock()
	hash, err := git("", "rev-parse", "--verify", commit+"^{commit}")
	if err != nil {
		return "", fmt.Errorf("commit %s is not in this repository (a shallow clone? git fetch --unshallow): %w", commit, err)
	}
	cache, err := cluster.CacheDir()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(cache, "fenced-at", hash)
	bin := filepath.Join(dir, "fenced")
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	tree, err := os.MkdirTemp("", "fenced-at-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tree)
	tree = filepath.Join(tree, "src")
	if _, err := git("", "worktree", "add", "--detach", tree, hash); err != nil {
		return "", err
	}
	defer func() { _, _ = git("", "worktree", "remove", "--force", tree) }()
	part := filepath.Join(dir, "fenced."+strconv.Itoa(os.Getpid()))
	build := exec.Command("go", "build", "-o", part, "./cmd/fenced")
	build.Dir = tree
	if out, err := build.CombinedOutput(); err != nil {
		_ = os.Remove(part)
		return "", fmt.Errorf("building fenced at %s: %v\n%s", hash, err, out)
	}
	return bin, os.Rename(part, bin)
}

// git runs git in dir ("": the working directory) and returns its output,
// trimmed.
func git(dir string, args ...string) (string, error) {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return "", fmt.Errorf("git %s: %v: %s", strings.Join(args, " "), err, exit.Stderr)
		}
		return "", fmt.Errorf("git %s: %w", strings.Join(args, " "), err)
	}
	return strings.TrimSpace(string(out)), nil
}

// agentLink is where the machine's agent is started from: a link to the
// binary it runs. Its name stays "fenced", so the process reads as
// `fenced agent` (AgentPID) and logs to extra-0-fenced.log.
func (m *Machine) agentLink() string { return filepath.Join(m.Dir, "agent", "fenced") }

// linkAgent points the machine's agent link at binary, replacing the link
// in one rename: a boot that starts the agent meanwhile runs one binary or
// the other.
func (m *Machine) linkAgent(binary string) error {
	link := m.agentLink()
	if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
		return err
	}
	next := link + ".next"
	_ = os.Remove(next)
	if err := os.Symlink(binary, next); err != nil {
		return err
	}
	return os.Rename(next, link)
}

// UpgradeAgent replaces the machine's agent with binary, as a DaemonSet
// rolling update replaces the agent's pod: the machine's agent link is
// pointed at binary, the running agent is stopped with SIGTERM (it leaves
// the gossip ring, as on any stop) and the launcher starts it again from
// the link, in the same boot. It returns once the new agent process runs
// (see RestartAgent), without waiting for it to be up. On a machine that is
// off only the link changes: the agent starts from binary at its next boot,
// as the new pod would.
func (m *Machine) UpgradeAgent(binary string) error {
	if err := m.linkAgent(binary); err != nil {
		return err
	}
	if _, alive := m.BMC.MachinePID(); !alive {
		return nil
	}
	return m.restartAgent(syscall.SIGTERM)
}

// AgentExecutable returns the binary the machine's running agent runs (the
// file its agent link pointed at when it started).
func (m *Machine) AgentExecutable() (string, error) {
	pid, err := m.AgentPID()
	if err != nil {
		return "", err
	}
	return os.Readlink(filepath.Join("/proc", strconv.Itoa(pid), "exe"))
}
