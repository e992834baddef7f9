package cluster

import (
	"os"
	"regexp"
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/util/version"
)

// TestOneDefaultKubeVersion: the harness, hack/kube-binaries.sh and the
// list of supported versions name the same default — the newest supported
// release — so that make test, make demo and the script's cache agree.
func TestOneDefaultKubeVersion(t *testing.T) {
	if last := SupportedKubeVersions[len(SupportedKubeVersions)-1]; DefaultKubeVersion != last {
		t.Errorf("DefaultKubeVersion %s is not the newest supported version %s", DefaultKubeVersion, last)
	}
	if !slices.IsSortedFunc(SupportedKubeVersions, func(a, b string) int {
		c, err := version.MustParseSemantic(a).Compare(b)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}) {
		t.Errorf("SupportedKubeVersions %v is not oldest first", SupportedKubeVersions)
	}
	path, err := RepoFile("hack/kube-binaries.sh")
	if err != nil {
		t.Fatal(err)
	}
	script, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`KUBE_VERSION="\$\{KUBE_VERSION:-(v[0-9.]+)\}"`).FindSubmatch(script)
	if m == nil {
		t.Fatal("hack/kube-binaries.sh: no KUBE_VERSION default found")
	}
	if string(m[1]) != DefaultKubeVersion {
		t.Errorf("hack/kube-binaries.sh defaults to %s, the harness to %s", m[1], DefaultKubeVersion)
	}
}
