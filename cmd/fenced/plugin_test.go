package main

import (
	"context"
	"fmt"
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

// TestNodeCompletion: a NODE argument completes with node names, never
// file names (directive 4, ShellCompDirectiveNoFileComp): the power
// commands from the configuration, the others from it too when the API
// server does not answer.
func TestNodeCompletion(t *testing.T) {
	dir := t.TempDir()
	cfg := writeFile(t, dir, "config.yaml", `apiVersion: fenced.io/v1alpha1
kind: FencedConfiguration
bmc:
  nodes:
    - {name: worker-1, protocol: ipmi, address: 127.0.0.1, username: u, passwordFile: `+writeFile(t, dir, "pw", "x")+`}
    - {name: worker-2, protocol: ipmi, address: 127.0.0.1, username: u, passwordFile: `+filepath.Join(dir, "pw")+`}
    - {name: db-1, protocol: ipmi, address: 127.0.0.1, username: u, passwordFile: `+filepath.Join(dir, "pw")+`}
`)
	unreachable := kubeconfigFor(t, dir, fmt.Sprintf("https://127.0.0.1:%d", closedPort(t)))
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"bmc", "status", ""}, "db-1\nworker-1\nworker-2\n:4\n"},
		{[]string{"device", "off", "wor"}, "worker-1\nworker-2\n:4\n"},
		{[]string{"bmc", "status", "worker-1", ""}, ":4\n"},
		{[]string{"topology", "check", "worker-1", "wor"}, "worker-2\n:4\n"},
		{[]string{"confirm", "--kubeconfig", unreachable, "db"}, "db-1\n:4\n"},
		{[]string{"exclude", "--kubeconfig", unreachable, "db"}, "db-1\n:4\n"},
		{[]string{"include", "--kubeconfig", unreachable, "worker-1", ""}, ":4\n"},
		{[]string{"history", "--kubeconfig", unreachable, "w"}, "worker-1\nworker-2\n:4\n"},
		{[]string{"status", "-o", ""}, "text\nwide\n"},
	}
	for _, tc := range cases {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			code, out, _ := fenced(t, context.Background(), append([]string{"__complete", "--config", cfg}, tc.args...)...)
			if code != exitOK || !strings.HasPrefix(out, tc.want) {
				t.Errorf("code %d, completions %q, want %q", code, out, tc.want)
			}
		})
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
