package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"fenced.io/fenced/internal/testbed/cluster"
)

// TestKubectlPlugin runs fenced the way an operator with kubectl would:
// the binary installed as kubectl-fenced on the PATH, called through
// kubectl's plugin mechanism, with kubectl's --kubeconfig and --context.
func TestKubectlPlugin(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a control plane")
	}
	ctx, c := cluster.StartForTest(t, cluster.Options{NoScheduler: true})
	binDir, err := cluster.BinDir(cluster.KubeVersion())
	if err != nil {
		t.Fatal(err)
	}
	kubectl := filepath.Join(binDir, "kubectl")

	plugins := filepath.Dir(buildFenced(t, kubectlPluginName))

	// A kubeconfig whose current context points at nothing listening
	// (loopback port 1), beside the real one: only --context reaches the
	// cluster.
	kc, err := clientcmd.LoadFromFile(c.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	real := kc.CurrentContext
	kc.Clusters["nowhere"] = &clientcmdapi.Cluster{Server: "https://127.0.0.1:1"}
	kc.Contexts["nowhere"] = &clientcmdapi.Context{Cluster: "nowhere", AuthInfo: kc.Contexts[real].AuthInfo}
	kc.CurrentContext = "nowhere"
	twoContexts := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, twoContexts); err != nil {
		t.Fatal(err)
	}

	kubectlRun := func(args ...string) (string, error) {
		t.Helper()
		cmd := exec.CommandContext(ctx, kubectl, args...)
		cmd.Env = append(os.Environ(), "PATH="+plugins+string(os.PathListSeparator)+os.Getenv("PATH"), "KUBECONFIG="+twoContexts)
		out, err := cmd.CombinedOutput()
		t.Logf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
		return string(out), err
	}

	if out, err := kubectlRun("plugin", "list"); err != nil || !strings.Contains(out, kubectlPluginName) {
		t.Errorf("kubectl plugin list does not find %s", kubectlPluginName)
	}
	if out, err := kubectlRun("fenced", "status", "--help"); err != nil || !strings.Contains(out, "kubectl fenced status") {
		t.Errorf("help of the plugin should say \"kubectl fenced status\"")
	}
	if out, err := kubectlRun("fenced", "status", "--context", real); err != nil || !strings.Contains(out, "NAME") {
		t.Errorf("kubectl fenced status --context %s: want the node table", real)
	}
	if _, err := kubectlRun("fenced", "status"); err == nil {
		t.Errorf("kubectl fenced status with the current context pointing nowhere succeeded")
	}
	if out, err := kubectlRun("fenced", "status", "--context", "no-such-context"); err == nil || !strings.Contains(out, "no-such-context") {
		t.Errorf("an unknown --context should fail and name it")
	}
}

// TestCompletionAndManPages checks that shell completion scripts and man
// pages come from the command tree: every visible command has a page and
// appears in the completion of the root.
func TestCompletionAndManPages(t *testing.T) {
	ctx := context.Background()
	for _, shell := range []string{"bash", "zsh", "fish"} {
		code, out, errOut := fenced(t, ctx, "completion", shell)
		if code != exitOK || !strings.Contains(out, "fenced") {
			t.Errorf("fenced completion %s: exit %d, %d bytes\n%s", shell, code, len(out), errOut)
		}
	}
	code, out, _ := fenced(t, ctx, "__complete", "")
	if code != exitOK {
		t.Fatalf("fenced __complete: exit %d", code)
	}
	dir := t.TempDir()
	if code, _, errOut := fenced(t, ctx, "man", dir); code != exitOK {
		t.Fatalf("fenced man: exit %d\n%s", code, errOut)
	}
	var walk func(cmd *cobra.Command)
	walk = func(cmd *cobra.Command) {
		if !cmd.IsAvailableCommand() && cmd.HasParent() {
			return
		}
		page := filepath.Join(dir, strings.ReplaceAll(cmd.CommandPath(), " ", "-")+".1")
		b, err := os.ReadFile(page)
		switch {
		case err != nil:
			t.Errorf("no man page for %q: %v", cmd.CommandPath(), err)
		case !strings.Contains(string(b), ".TH \"FENCED\""):
			t.Errorf("%s is not a man page", page)
		}
		if cmd.Parent() == cmd.Root() && !strings.Contains(out, cmd.Name()) {
			t.Errorf("completion of the root does not offer %q", cmd.Name())
		}
		for _, sub := range cmd.Commands() {
			walk(sub)
		}
	}
	walk(newRootCommand("fenced", nil, nil))
}
