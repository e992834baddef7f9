package admin

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"fenced.io/fenced/pkg/fencing/device"
	"fenced.io/fenced/pkg/vocab"
)

// deadlineBMC reads on and remembers how long its read was given.
type deadlineBMC struct {
	fakeBMC
	left    time.Duration
	bounded bool
}

func (b *deadlineBMC) PowerState(ctx context.Context) (vocab.PowerState, error) {
	var deadline time.Time
	deadline, b.bounded = ctx.Deadline()
	b.left = time.Until(deadline)
	return vocab.PowerOn, nil
}

type oneBMC struct{ b *deadlineBMC }

func (i oneBMC) BMC(string) (device.BMC, bool)  { return i.b, true }
func (i oneBMC) Endpoint(string) (string, bool) { return "ipmi://bmc:623", true }

// TestStatusReadsBMCsAsTheAgent: without --bmc-timeout, fenced status puts
// no bound of its own on a BMC read — the BMC's configured timeout per
// attempt and its retries bound it, as in the agent (a bound of its own
// cut the retries short: status showed a timeout where the agent read the
// BMC); with it, the read is bounded by it.
func TestStatusReadsBMCsAsTheAgent(t *testing.T) {
	tests := []struct {
		name        string
		timeout     time.Duration
		wantBounded bool
	}{
		{"no --bmc-timeout: the driver's own bounds", 0, false},
		{"--bmc-timeout 2s", 2 * time.Second, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := &deadlineBMC{}
			e := newEnv(nil, newNode("n", corev1.ConditionTrue))
			e.op.Inventory = oneBMC{b}
			s, err := e.op.Status(context.Background(), StatusOptions{BMCTimeout: tt.timeout})
			if err != nil {
				t.Fatal(err)
			}
			if s.Nodes[0].Power != string(vocab.PowerOn) {
				t.Fatalf("power %q, want on", s.Nodes[0].Power)
			}
			if b.bounded != tt.wantBounded {
				t.Fatalf("read bounded by status: %v, want %v", b.bounded, tt.wantBounded)
			}
			if tt.wantBounded && b.left > tt.timeout {
				t.Errorf("the read was given %s, want at most %s", b.left, tt.timeout)
			}
		})
	}
}
