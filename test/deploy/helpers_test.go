// Package deploy tests the deployment files in deploy/ and test/kind/: the
// kustomizations render, their objects are what the agent needs (and no
// more), the API server accepts them, the RBAC matches the code, the systemd
// unit verifies, and the kind scenario's files are well-formed.
package deploy

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"fenced.io/fenced/internal/testbed/cluster"
	"fenced.io/fenced/pkg/config"
)

// repoRoot is the repository's top directory, found from this file.
func repoRoot(t testing.TB) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("cannot locate the test source")
	}
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// path joins parts under the repository root.
func path(t testing.TB, parts ...string) string {
	return filepath.Join(append([]string{repoRoot(t)}, parts...)...)
}

// kubectlPath returns the kubectl that hack/kube-binaries.sh builds, building
// it first if needed — never a kubectl that happens to be on PATH, which a
// fresh CI machine does not have and whose version nobody chose.
func kubectlPath(t testing.TB) string {
	t.Helper()
	if testing.Short() {
		t.Skip("needs kubectl from hack/kube-binaries.sh (built on first use); skipped with -short")
	}
	dir, err := cluster.EnsureBinaries(cluster.TestContext(t), cluster.KubeVersion(), t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, "kubectl")
}

// serviceAccountClient is a client of c with a fresh token (10 min) of the
// ServiceAccount sa in the agent's namespace, bound to ref if it is not nil
// (as a pod's projected token is bound to the pod).
func serviceAccountClient(ctx context.Context, t testing.TB, c *cluster.Cluster, sa string, ref *authenticationv1.BoundObjectReference) kubernetes.Interface {
	t.Helper()
	tr, err := c.Client().CoreV1().ServiceAccounts(namespace).CreateToken(ctx, sa, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](600), BoundObjectRef: ref},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("TokenRequest for %s: %v", sa, err)
	}
	cfg := c.RESTConfig()
	cfg.BearerToken = tr.Status.Token
	return kubernetes.NewForConfigOrDie(cfg)
}

// run runs a command with stdin and returns stdout, stderr and its error.
func run(t testing.TB, stdin []byte, name string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err = cmd.Run()
	return out.String(), errb.String(), err
}

// splitDocs splits a multi-document YAML stream, dropping empty documents.
func splitDocs(t testing.TB, data []byte) [][]byte {
	t.Helper()
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var docs [][]byte
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return docs
		}
		if err != nil {
			t.Fatalf("splitting YAML documents: %v", err)
		}
		var v any
		if err := yaml.Unmarshal(doc, &v); err != nil {
			t.Fatalf("YAML document does not parse: %v\n%s", err, doc)
		}
		if v != nil {
			docs = append(docs, doc)
		}
	}
}

// strictCodecs decode the Kubernetes kinds client-go knows and refuse
// unknown or duplicate fields: a misspelt readOnlyRootFilesytem would
// otherwise vanish silently, leaving the container writable.
var strictCodecs = serializer.NewCodecFactory(scheme.Scheme, serializer.EnableStrict)

// decodeObjects decodes every document of a Kubernetes manifest strictly
// into its typed object.
func decodeObjects(t testing.TB, source string, data []byte) []k8sruntime.Object {
	t.Helper()
	var objs []k8sruntime.Object
	for _, doc := range splitDocs(t, data) {
		obj, _, err := strictCodecs.UniversalDeserializer().Decode(doc, nil, nil)
		if err != nil {
			t.Fatalf("%s: %v\n%s", source, err, doc)
		}
		objs = append(objs, obj)
	}
	return objs
}

// readFile reads a file under the repository root.
func readFile(t testing.TB, parts ...string) []byte {
	t.Helper()
	data, err := os.ReadFile(path(t, parts...))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// loadConfig parses a fenced configuration as the agent does (pkg/config,
// strict), with every password file it names under secretDir (where the
// BMC Secret is mounted) stood in by a temp file, because the loader reads
// them. has reports whether the Secret holds a file name; nil means any: a
// config naming a file the Secret lacks would stop the agent at start, so
// it fails here.
func loadConfig(t testing.TB, data []byte, source, secretDir string, has func(name string) bool) (*config.Config, error) {
	t.Helper()
	tmp := t.TempDir()
	re := regexp.MustCompile(regexp.QuoteMeta(secretDir) + `/[\w.-]+`)
	var missing []string
	data = re.ReplaceAllFunc(data, func(p []byte) []byte {
		name := filepath.Base(string(p))
		if has != nil && !has(name) {
			missing = append(missing, name)
		}
		local := filepath.Join(tmp, name)
		if err := os.WriteFile(local, []byte("pw\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		return []byte(local)
	})
	if len(missing) > 0 {
		return nil, fmt.Errorf("%s: password files %v are not keys of the BMC Secret mounted at %s", source, missing, secretDir)
	}
	return config.Parse(data, source)
}
