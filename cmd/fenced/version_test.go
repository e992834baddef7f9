package main

import (
	"archive/zip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// The version tests build fenced the ways its users do and run the binary as
// they type it: `fenced version` and `fenced --version` must print the same
// line, naming the version the build knows.

// goTool runs go in dir with env added to the test's environment, and fails
// the test with go's output if it fails.
func goTool(t *testing.T, dir string, env []string, args ...string) {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), "go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// requireVersion runs bin's `version` and `--version`, requires both to
// print the same line, and returns the version it names.
func requireVersion(t *testing.T, bin string) string {
	t.Helper()
	var lines []string
	for _, args := range [][]string{{"version"}, {"--version"}} {
		out, err := exec.CommandContext(t.Context(), bin, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("%s %s: %v\n%s", bin, args[0], err, out)
		}
		lines = append(lines, string(out))
	}
	if lines[0] != lines[1] {
		t.Errorf("fenced version printed %q, fenced --version %q", lines[0], lines[1])
	}
	suffix := " (" + runtime.Version() + ", " + runtime.GOOS + "/" + runtime.GOARCH + ")\n"
	v, prefixed := strings.CutPrefix(lines[0], "fenced ")
	v, suffixed := strings.CutSuffix(v, suffix)
	if !prefixed || !suffixed {
		t.Fatalf("fenced version printed %q, want \"fenced VERSION%s\"", lines[0], suffix)
	}
	return v
}

// moduleRoot is the repository's top directory.
func moduleRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// sourceFiles lists the module's files as git sees them: tracked and new,
// without what .gitignore leaves out.
func sourceFiles(t *testing.T, root string) []string {
	t.Helper()
	out, err := exec.CommandContext(t.Context(), "git", "-C", root, "ls-files", "-co", "--exclude-standard").Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	var files []string
	for _, f := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		// A file deleted but not yet staged is listed and absent.
		if _, err := os.Stat(filepath.Join(root, f)); err == nil {
			files = append(files, f)
		}
	}
	return files
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	data, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestVersionStampedByTheLinker: make build's way, -ldflags -X.
func TestVersionStampedByTheLinker(t *testing.T) {
	if testing.Short() {
		t.Skip("builds fenced")
	}
	bin := filepath.Join(t.TempDir(), "fenced")
	const want = "v1.2.3-4-gdeadbee-dirty"
	goTool(t, ".", nil, "build", "-trimpath", "-ldflags", "-X fenced.io/fenced/pkg/version.stamped="+want, "-o", bin, ".")
	if got := requireVersion(t, bin); got != want {
		t.Errorf("built with -X %s, fenced version says %q", want, got)
	}
}

// TestVersionOfAGoBuildInACheckout: `go build` in a git checkout, no flags;
// Go records the commit, and a changed tree is +dirty.
func TestVersionOfAGoBuildInACheckout(t *testing.T) {
	if testing.Short() {
		t.Skip("builds fenced twice")
	}
	root := moduleRoot(t)
	checkout := t.TempDir()
	for _, f := range sourceFiles(t, root) {
		copyFile(t, filepath.Join(root, f), filepath.Join(checkout, f))
	}
	const commitTime = "2026-03-04T05:06:07Z"
	git := func(args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(t.Context(), "git", args...)
		cmd.Dir = checkout
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_DATE="+commitTime, "GIT_COMMITTER_DATE="+commitTime,
			"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.org", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.org")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return strings.TrimSpace(string(out))
	}
	git("init", "-q")
	git("add", "-A")
	git("commit", "-q", "-m", "a checkout")
	revision := git("rev-parse", "HEAD")

	// A machine's go env may turn version-control stamping off; a user's
	// go build has it on.
	vcs := []string{"GOFLAGS=-buildvcs=true"}
	bin := filepath.Join(t.TempDir(), "fenced")
	goTool(t, checkout, vcs, "build", "-o", bin, "./cmd/fenced")
	want := "v0.0.0-20260304050607-" + revision[:12]
	if got := requireVersion(t, bin); got != want {
		t.Errorf("go build at %s (committed %s) says %q, want %q", revision, commitTime, got, want)
	}

	if err := os.WriteFile(filepath.Join(checkout, "CHANGELOG.md"), []byte("changed\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	goTool(t, checkout, vcs, "build", "-o", bin, "./cmd/fenced")
	if got := requireVersion(t, bin); got != want+"+dirty" {
		t.Errorf("go build of a changed tree says %q, want %q", got, want+"+dirty")
	}
}

// TestVersionOfAGoInstall: `go install fenced.io/fenced/cmd/fenced@v0.2.0`,
// served by a module proxy on disk holding this tree as v0.2.0 (the
// dependencies come from the module cache).
func TestVersionOfAGoInstall(t *testing.T) {
	if testing.Short() {
		t.Skip("builds fenced")
	}
	const module, want = "fenced.io/fenced", "v0.2.0"
	root := moduleRoot(t)
	proxy := t.TempDir()
	dir := filepath.Join(proxy, module, "@v")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	copyFile(t, filepath.Join(root, "go.mod"), filepath.Join(dir, want+".mod"))
	if err := os.WriteFile(filepath.Join(dir, want+".info"), []byte(`{"Version":"`+want+`","Time":"2026-03-04T05:06:07Z"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "list"), []byte(want+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	writeModuleZip(t, root, filepath.Join(dir, want+".zip"), module+"@"+want)

	gobin := t.TempDir()
	goTool(t, t.TempDir(), []string{
		"GOBIN=" + gobin, "GOFLAGS=-mod=mod",
		// This module comes from the proxy on disk and is in no checksum
		// database; the dependencies come from the module cache, checked
		// against this tree's go.sum when they were downloaded.
		"GOPROXY=file://" + filepath.ToSlash(proxy), "GOSUMDB=off",
	}, "install", module+"/cmd/fenced@"+want)
	if got := requireVersion(t, filepath.Join(gobin, "fenced")); got != want {
		t.Errorf("go install …@%s says %q", want, got)
	}
}

// writeModuleZip writes root's source files as the module zip of prefix
// (module@version): every path under prefix/ (the module has no nested
// module to leave out).
func writeModuleZip(t *testing.T, root, name, prefix string) {
	t.Helper()
	f, err := os.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	z := zip.NewWriter(f)
	for _, file := range sourceFiles(t, root) {
		data, err := os.ReadFile(filepath.Join(root, file))
		if err != nil {
			t.Fatal(err)
		}
		w, err := z.Create(prefix + "/" + file)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write(data); err != nil {
			t.Fatal(err)
		}
	}
	if err := z.Close(); err != nil {
		t.Fatal(err)
	}
}
