package admin

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"fenced.io/fenced/pkg/identity"
	"fenced.io/fenced/pkg/identity/publish"
	"fenced.io/fenced/pkg/printer"
)

// TestStatusWatchdog: status -o wide shows each node's watchdog level as a
// fencer would take it — the armed statement for the boot the node runs,
// signed with the key its agent published; one signed with another key or
// for another boot refused, and why in -o json — and a fence order.
func TestStatusWatchdog(t *testing.T) {
	ctx := context.Background()
	e := newEnv(nil, newNode("w-1", "True"), newNode("w-2", "True"), newNode("w-3", "True"), newNode("w-4", "True"), newNode("w-5", "True"))
	e.op.LeaseNamespace = testNS
	keys := map[string]*identity.Key{}
	for _, name := range []string{"w-1", "w-2", "w-3", "w-4"} {
		k, err := identity.NewKey()
		if err != nil {
			t.Fatal(err)
		}
		keys[name] = k
		boot := bootA
		if name == "w-4" {
			boot = "an-earlier-boot" // its key Lease, and its statement, from before
		}
		if err := publish.Publish(ctx, e.cs, testNS, name, boot, k.Public(), t0); err != nil {
			t.Fatal(err)
		}
	}
	hardware := identity.Armed{Timeout: 10 * time.Second, Confirm: 30 * time.Second, Device: "i6300ESB timer"}
	software := identity.Armed{Timeout: 10 * time.Second, Confirm: 45 * time.Second, Device: "Software Watchdog", Software: true}
	forger, _ := identity.NewKey()
	for _, s := range []struct {
		node, boot string
		key        *identity.Key
		a          identity.Armed
	}{
		{"w-1", bootA, keys["w-1"], hardware},
		{"w-2", bootA, keys["w-2"], software},
		{"w-3", bootA, forger, hardware},
		{"w-4", "an-earlier-boot", keys["w-4"], hardware},
	} {
		if err := publish.PublishArmed(ctx, e.cs, testNS, s.node, s.boot, s.key, s.a); err != nil {
			t.Fatal(err)
		}
	}
	if err := publish.WriteOrder(ctx, e.cs, testNS, "w-2", bootA, "cp-1"); err != nil {
		t.Fatal(err)
	}
	s, err := e.op.Status(ctx, StatusOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	if err := printer.Print(&out, "wide", s.Doc(t0)); err != nil {
		t.Fatal(err)
	}
	cells := map[string]string{}
	for _, line := range strings.Split(out.String(), "\n") {
		f := strings.Fields(line)
		if len(f) > 0 && strings.HasPrefix(f[0], "w-") {
			cells[f[0]] = line
		}
	}
	for node, want := range map[string]string{"w-1": " armed 10s/30s ", "w-2": " armed 10s/45s SOFTWARE, ordered ", "w-3": " refused ", "w-4": " refused "} {
		if !strings.Contains(cells[node], want) {
			t.Errorf("%s: row %q, want %q in it", node, cells[node], want)
		}
	}
	if s.Nodes[4].Watchdog != nil || !strings.Contains(out.String(), "WATCHDOG") {
		t.Errorf("w-5 (nothing stated) shows %+v; the table:\n%s", s.Nodes[4].Watchdog, out.String())
	}
	raw, err := json.Marshal(s.Nodes)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"armed":{"timeout":"10s","confirm":"30s","device":"i6300ESB timer"}`, `"orderBoot":"` + bootA + `"`,
		"signature does not check", "stated for boot an-earlier-boot"} {
		if !strings.Contains(string(raw), want) {
			t.Errorf("-o json lacks %s: %s", want, raw)
		}
	}
}
