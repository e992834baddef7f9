package metrics

import (
	"fmt"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"fenced.io/fenced/pkg/vocab"
)

// TestMembers: fenced_members is read from the ring at each scrape, with
// all four states present, 0 or not; a change shows at the next scrape
// without any update call.
func TestMembers(t *testing.T) {
	// exposition is fenced_members as scraped, labels in sorted order.
	exposition := func(alive, dead, left, suspect int) string {
		return "# HELP fenced_members Gossip ring members by state (alive, suspect, dead, left) as this agent sees them.\n" +
			"# TYPE fenced_members gauge\n" +
			fmt.Sprintf("fenced_members{state=\"alive\"} %d\nfenced_members{state=\"dead\"} %d\n", alive, dead) +
			fmt.Sprintf("fenced_members{state=\"left\"} %d\nfenced_members{state=\"suspect\"} %d\n", left, suspect)
	}
	tests := []struct {
		name   string
		states []vocab.MemberState
		want   string
	}{
		{"empty ring", nil, exposition(0, 0, 0, 0)},
		{"mixed", []vocab.MemberState{vocab.MemberAlive, vocab.MemberAlive, vocab.MemberDead, vocab.MemberLeft, vocab.MemberAlive},
			exposition(3, 1, 1, 0)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			states := tt.states
			reg := prometheus.NewRegistry()
			reg.MustRegister(NewMembers(func() []vocab.MemberState { return states }))
			if err := testutil.GatherAndCompare(reg, strings.NewReader(tt.want), MembersMetric); err != nil {
				t.Error(err)
			}
			states = []vocab.MemberState{vocab.MemberSuspect, vocab.MemberAlive}
			if err := testutil.GatherAndCompare(reg, strings.NewReader(exposition(1, 0, 0, 1)), MembersMetric); err != nil {
				t.Errorf("after a change: %v", err)
			}
		})
	}
}
