package main

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	certutil "k8s.io/client-go/util/cert"

	"fenced.io/fenced/internal/testbed/cluster"
	"fenced.io/fenced/pkg/credentials"
)

// TestCredentialsIssueAgainstARealCluster runs `fenced credentials issue` as
// the systemd install steps have the admin type it, against a real API
// server whose controller manager signs, and uses what it wrote.
func TestCredentialsIssueAgainstARealCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test: starts a control plane")
	}
	ctx, c := cluster.StartForTest(t, cluster.Options{NoScheduler: true,
		Controllers: []string{"certificatesigningrequest-signing-controller"}})
	dir := t.TempDir()
	out := filepath.Join(dir, "kubeconfig")
	cli := func(args ...string) (int, string, string) {
		t.Helper()
		code, stdout, stderr := fenced(t, ctx, args...)
		t.Logf("fenced %s: exit %d\n%s%s", strings.Join(args, " "), code, stdout, stderr)
		return code, stdout, stderr
	}

	code, stdout, _ := cli("credentials", "issue", "node-a", "--out", out, "--duration", "1h", "--kubeconfig", c.Kubeconfig)
	if code != exitOK || !strings.Contains(stdout, "Approved CSR "+credentials.CSRPrefix) || !strings.Contains(stdout, "Wrote "+out) {
		t.Fatalf("issue: exit %d\n%s", code, stdout)
	}
	// The agent's kubeconfig, as the agent loads it: node-a's own user,
	// in the fencers' group, for the hour asked.
	cfg, err := clientcmd.BuildConfigFromFlags("", out)
	if err != nil {
		t.Fatal(err)
	}
	r, err := kubernetes.NewForConfigOrDie(cfg).AuthenticationV1().SelfSubjectReviews().Create(ctx, &authnv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("authenticating with the written kubeconfig: %v", err)
	}
	if u := r.Status.UserInfo; u.Username != "fenced:node:node-a" || !slices.Contains(u.Groups, credentials.GroupFencers) {
		t.Fatalf("the written kubeconfig authenticates as %s %v", u.Username, u.Groups)
	}
	pemFile := filepath.Join(dir, "client.pem")
	certs, err := certutil.CertsFromFile(pemFile)
	if err != nil {
		t.Fatal(err)
	}
	if left := time.Until(certs[0].NotAfter); left > time.Hour+2*time.Minute {
		t.Errorf("certificate valid %s more, asked 1h", left)
	}
	if st, err := os.Stat(pemFile); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("%s: %v, mode %v, want 0600", pemFile, err, st.Mode())
	}

	// Usage errors: 2, nothing asked of the API server.
	for _, args := range [][]string{
		{"credentials", "issue", "--out", out},
		{"credentials", "issue", "node-a"},
		{"credentials", "issue", "Node_A", "--out", out},
		{"credentials", "issue", "node-a", "--out", out, "--duration", "1m"},
		{"credentials", "issue", "node-a", "--out", out, "--duration", "8760h"},
		{"credentials", "issue", "node-a", "--out", out, "--group", "system:masters"},
	} {
		if code, _, _ := cli(append(args, "--kubeconfig", c.Kubeconfig)...); code != exitUsage {
			t.Errorf("fenced %v: exit %d, want %d", args, code, exitUsage)
		}
	}

	// No API server at the address: 3, nothing written.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().String()
	l.Close()
	code, _, stderr := cli("credentials", "issue", "node-a", "--out", filepath.Join(dir, "none"), "--kubeconfig", c.Kubeconfig,
		"--server", "https://"+closed) // the agent's server; the admin's is c
	if code != exitCannotCheck || !strings.Contains(stderr, "authenticating with the new credential") {
		t.Errorf("agent server unreachable: exit %d, want %d (%s)", code, exitCannotCheck, stderr)
	}
	noAPI := writeFile(t, dir, "no-api.kubeconfig", `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://`+closed+`", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: x}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`)
	code, _, stderr = cli("credentials", "issue", "node-a", "--out", filepath.Join(dir, "none"), "--kubeconfig", noAPI, "--certificate-authority", c.CAFile)
	if code != exitCannotCheck || !strings.Contains(stderr, "cannot check") {
		t.Errorf("no API server: exit %d, want %d (%s)", code, exitCannotCheck, stderr)
	}
	if _, err := os.Stat(filepath.Join(dir, "none")); !os.IsNotExist(err) {
		t.Errorf("a kubeconfig was written without a checked credential: %v", err)
	}

	// Someone who may not create CSRs: 1, with the API server's reason.
	nobody, err := c.UserKubeconfig("nobody")
	if err != nil {
		t.Fatal(err)
	}
	code, _, stderr = cli("credentials", "issue", "node-a", "--out", filepath.Join(dir, "none"), "--kubeconfig", nobody)
	if code != exitFailure || !strings.Contains(stderr, "forbidden") {
		t.Errorf("as a user without CSR rights: exit %d, want %d (%s)", code, exitFailure, stderr)
	}

	// A renewal replaces the credential in place, keeping the mode the
	// admin gave it.
	if err := os.Chmod(pemFile, 0o640); err != nil {
		t.Fatal(err)
	}
	if code, _, _ := cli("credentials", "issue", "node-a", "--out", out, "--duration", "1h", "--kubeconfig", c.Kubeconfig); code != exitOK {
		t.Fatalf("renewal: exit %d", code)
	}
	renewed, err := certutil.CertsFromFile(pemFile)
	if err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(pemFile); err != nil || st.Mode().Perm() != 0o640 || renewed[0].SerialNumber.Cmp(certs[0].SerialNumber) == 0 {
		t.Errorf("after renewal: %v, mode %v, serial %v (was %v)", err, st.Mode(), renewed[0].SerialNumber, certs[0].SerialNumber)
	}
}

func TestCredentialsHelp(t *testing.T) {
	code, out, _ := fenced(t, context.Background(), "credentials", "issue", "--help")
	if code != exitOK || !strings.Contains(out, "Examples:") || !strings.Contains(out, "cannot be revoked") || !strings.Contains(out, "3 could not check") {
		t.Errorf("fenced credentials issue --help: exit %d\n%s", code, out)
	}
}
