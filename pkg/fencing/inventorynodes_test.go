package fencing

import (
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"

	"fenced.io/fenced/internal/testbed/poll"
	"fenced.io/fenced/pkg/config"
	"fenced.io/fenced/pkg/fencing/device"
	"fenced.io/fenced/pkg/taint"
	"fenced.io/fenced/pkg/vocab"
)

// TestInventoryNodes: a fencer counts the Nodes its inventory, built from
// the configuration as the agent builds it, gives a fencing level
// (fenced_inventory_nodes) — not the entries of the configuration: BMC
// entries under short host names fence no Node registered under its FQDN,
// and topology defaults give every Node levels.
func TestInventoryNodes(t *testing.T) {
	t.Setenv("FENCED_TEST_BMC_PASSWORD", "pw")
	const header = "apiVersion: fenced.io/v1alpha1\nkind: FencedConfiguration\n" +
		"bmc:\n  defaults: {protocol: ipmi, username: fenced, passwordEnv: FENCED_TEST_BMC_PASSWORD}\n  nodes:\n"
	for _, tc := range []struct {
		name, config string
		want         int
	}{
		{"BMCs under short names", header + "    - {name: worker-1, address: 192.0.2.1}\n    - {name: worker-2, address: 192.0.2.2}\n", 0},
		{"one BMC under the Node's name", header + "    - {name: worker-1.example.com, address: 192.0.2.1}\n    - {name: worker-2, address: 192.0.2.2}\n", 1},
		{"topology defaults", header + "    - {name: worker-1, address: 192.0.2.1}\ntopology:\n  defaults: [[bmc]]\n", 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := config.Parse([]byte(tc.config), "test.yaml")
			if err != nil {
				t.Fatal(err)
			}
			log := slog.New(slog.NewTextHandler(io.Discard, nil))
			inv, err := device.NewInventory(cfg, log)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = inv.Close() })
			client := fake.NewClientset(
				hostileNode("worker-1.example.com", "boot-1", "127.0.0.1", corev1.ConditionTrue),
				hostileNode("worker-2.example.com", "boot-2", "127.0.0.2", corev1.ConditionTrue),
				hostileNode("cp-1.example.com", "boot-3", "127.0.0.3", corev1.ConditionTrue))
			f := startFencer(t, Config{
				Identity: "cp-1.example.com", Client: client, Inventory: inv, Members: stillMembers{},
				Tainter: taint.NewTainter(client, "cp-1.example.com", nil), Recorder: record.NewFakeRecorder(100),
				Policy: testPolicy(vocab.ModeConfirmOnly), LeaseNamespace: hostileNS,
				Metrics: NewMetrics(prometheus.NewRegistry()), Logger: log,
			})
			poll.Until(t, 10*time.Second, "the fencer's Node cache holds the three Nodes", func() bool {
				nodes, _ := f.nodes.List(labels.Everything())
				return len(nodes) == 3
			})
			if got := f.InventoryNodes(); got != tc.want {
				t.Errorf("InventoryNodes() = %d, want %d", got, tc.want)
			}
		})
	}
}
