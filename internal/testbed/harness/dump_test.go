package harness

import (
	"strings"
	"testing"
)

func TestLastDecisions(t *testing.T) {
	log := strings.Join([]string{
		`time=1 level=INFO msg=decision node=w-2 from=Watching phase=Suspect reason="first"`,
		`time=2 level=INFO msg="power Lease acquired" node=w-1 duration=15s`,
		`time=3 level=INFO msg=decision node=w-1 from=Confirming phase=Confirming reason="storm: 3 of 7 nodes are down"`,
		`time=4 level=INFO msg=decision node=w-2 from=Suspect phase=Confirming reason="second"`,
	}, "\n")
	want := `time=3 level=INFO msg=decision node=w-1 from=Confirming phase=Confirming reason="storm: 3 of 7 nodes are down"` + "\n" +
		`time=4 level=INFO msg=decision node=w-2 from=Suspect phase=Confirming reason="second"`
	if got := lastDecisions(log); got != want {
		t.Errorf("lastDecisions:\n%s\nwant\n%s", got, want)
	}
	if got := lastDecisions("time=1 msg=booting\n"); got != "(no decision logged)" {
		t.Errorf("lastDecisions of a log without decisions = %q", got)
	}
}

func TestWithoutKubeletNoise(t *testing.T) {
	text := strings.Join([]string{
		`I1 kubelet.go:1] "started"`,
		`E2 eviction_manager.go:259] "Eviction manager: failed to get HasDedicatedImageFs" err="imagefs device is not found"`,
		`E3 kubelet.go:1611] "Image garbage collection failed multiple times in a row" err="imageFs information is unavailable"`,
		`I4 kubelet.go:2] "node not ready"`,
		`I5 kubelet.go:3] "shutting down"`,
	}, "\n")
	if got, want := withoutKubeletNoise(text, 2), "I4 kubelet.go:2] \"node not ready\"\nI5 kubelet.go:3] \"shutting down\""; got != want {
		t.Errorf("withoutKubeletNoise(…, 2) = %q, want %q", got, want)
	}
	if got := withoutKubeletNoise(text, 10); strings.Count(got, "\n") != 2 {
		t.Errorf("withoutKubeletNoise(…, 10) kept %q, want the 3 lines that are not noise", got)
	}
}
