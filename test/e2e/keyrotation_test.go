package e2e

import (
	"crypto/rand"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"fenced.io/fenced/internal/testbed/harness"
	"fenced.io/fenced/internal/testbed/poll"
	"fenced.io/fenced/pkg/heartbeat"
	"fenced.io/fenced/pkg/vocab"
)

// suspicionEvents are the Events a fencer records on a node it suspects.
var suspicionEvents = []vocab.EventReason{
	vocab.EventNodeSuspected, vocab.EventNodeUnresponsiveButPoweredOn, vocab.EventCannotConfirmPowerState,
	vocab.EventPoweringOffUnresponsiveNode, vocab.EventNodeFenced,
}

// TestGossipKeyRotation rotates the gossip key of a running cluster the
// way docs/operations.md ("Rotate the gossip key") says, through each
// node's copy of the Secret (gossip.keyDir), each copy updated at its own
// time as each kubelet refreshes its Secret volume: the switch reaches two
// nodes before any other node holds the new key, and a node loses power
// halfway and comes back on the keys of the day. The power loss is fenced
// with bmc-power-off evidence and the workload moves; no healthy node is
// suspected — no suspicion Event, no gossip death, no memberlist suspicion
// or undecryptable packet in any agent's log — and every agent ends on
// the new key alone.
func TestGossipKeyRotation(t *testing.T) {
	harness.Parallel(t)
	const victim, spare = "w-4", "w-3"
	ctx, h := harness.StartForTest(t, harness.Options{
		Machines: []string{"cp-1", "w-1", "w-2", "w-3", "w-4"},
		Fencing:  &harness.Fencing{Fencers: []string{"cp-1"}, GossipKeyDirs: true},
	})
	old, err := h.GossipKey()
	must(t, err)
	next := make([]byte, 32)
	_, _ = rand.Read(next)
	fOld, fNext := heartbeat.Fingerprint(old), heartbeat.Fingerprint(next)
	step1 := map[string][]byte{"key": old, "next": next}
	step2 := map[string][]byte{"key": next, "previous": old}
	step3 := map[string][]byte{"key": next}
	logFrom := map[string]int{}
	for _, m := range h.Machines {
		logFrom[m.Name] = len(m.AgentLog())
	}
	tStart := time.Now()
	set := func(keys map[string][]byte, names ...string) {
		t.Helper()
		for _, n := range names {
			must(t, h.SetGossipKeys(h.Machine(n), keys))
		}
	}
	sts, oldPodUID := startWorkload(ctx, t, h, "fenced-key-rotation", victim, spare)
	waitWriter(t, h, sts.PV, victim, 3)

	// The second step first, on cp-1 and w-1: nobody else can decrypt the
	// new key, so they hold it and keep encrypting with the old one.
	tEarly := time.Now()
	set(step2, "cp-1", "w-1")
	for _, n := range []string{"cp-1", "w-1"} {
		waitGossipKeys(t, h.Machine(n), keyUse{fOld: "encrypt", fNext: "decrypt"}, false)
	}
	t.Logf("cp-1 and w-1 hold the new key %s, still encrypting with %s, %.1fs after their switch", fNext, fOld, time.Since(tEarly).Seconds())
	requireStableFor(ctx, t, h, 10*time.Second) // ten probe rounds with the switch pending

	// The first step everywhere else: now every member holds the new key,
	// and cp-1 and w-1 encrypt with it.
	tFirst := time.Now()
	set(step1, "w-2", "w-3", victim)
	for _, n := range []string{"cp-1", "w-1"} {
		waitGossipKeys(t, h.Machine(n), keyUse{fNext: "encrypt", fOld: "decrypt"}, true)
	}
	for _, n := range []string{"w-2", "w-3", victim} {
		waitGossipKeys(t, h.Machine(n), keyUse{fOld: "encrypt", fNext: "decrypt"}, true)
	}
	t.Logf("every agent holds both keys, cp-1 and w-1 encrypt with the new one, %.1fs after the first step", time.Since(tFirst).Seconds())

	// The victim loses power in the middle of the rotation.
	m := h.Machine(victim)
	bootBefore := m.BootID()
	t0 := time.Now()
	must(t, m.PowerLoss())
	requireBMCOffEvidence(t, waitTaint(ctx, t, h, victim, true), bootBefore)
	tTaint := time.Now()
	_, tVAGone, tRunning := requireMoved(ctx, t, h, sts, oldPodUID, victim, spare)
	t.Logf("power loss during the rotation (at 0): tainted %.1fs, old VolumeAttachment gone %.1fs, pod Running on %s %.1fs",
		secs(tTaint, t0), secs(tVAGone, t0), spare, secs(tRunning, t0))

	// The second step everywhere, the victim's copy too: its kubelet
	// mounts the Secret as it is when the node boots.
	set(step2, "w-2", "w-3", victim)
	for _, n := range []string{"w-2", "w-3"} {
		waitGossipKeys(t, h.Machine(n), keyUse{fNext: "encrypt", fOld: "decrypt"}, true)
	}
	must(t, m.PowerOnViaBMC())
	must(t, h.WaitNodeReady(ctx, victim, podTimeout))
	waitTaint(ctx, t, h, victim, false)
	if m.BootID() == bootBefore {
		t.Fatal("boot ID did not change across the power cycle")
	}
	_, err = h.WaitEvent(ctx, "default", victim, vocab.EventNodeRecovered, "", podTimeout)
	must(t, err)
	waitGossipKeys(t, m, keyUse{fNext: "encrypt", fOld: "decrypt"}, true)
	t.Logf("%s back on a new boot with the keys of the day, taint removed, %.1fs after the power loss", victim, time.Since(t0).Seconds())

	// The third step everywhere: the new key alone.
	tThird := time.Now()
	set(step3, "cp-1", "w-1", "w-2", "w-3", victim)
	for _, m := range h.Machines {
		waitGossipKeys(t, m, keyUse{fNext: "encrypt"}, true)
	}
	t.Logf("every agent encrypts and decrypts with the new key alone %.1fs after the third step", time.Since(tThird).Seconds())
	must(t, h.WaitRingConverged(ctx, podTimeout))
	requireStableFor(ctx, t, h, 10*time.Second)
	requireSafe(t, h, sts.PV)

	// No false suspicion, on any channel.
	requireNoSuspicionEvents(t, h, tStart, map[string]time.Time{victim: t0})
	for _, m := range h.Machines {
		log := m.AgentLog()[logFrom[m.Name]:]
		for _, l := range grepLines(log, "Decrypt packet failed") {
			t.Errorf("%s's agent could not decrypt a packet: %s", m.Name, l)
		}
		for _, l := range grepLines(log, "gossip member state changed") {
			if (strings.Contains(l, "to=dead") || strings.Contains(l, "to=left")) && !strings.Contains(l, "node="+victim+" ") {
				t.Errorf("%s's agent saw a healthy member go: %s", m.Name, l)
			}
		}
		for _, l := range grepLines(log, "Suspect ", "has failed") {
			if !strings.Contains(l, "Suspect "+victim+" ") {
				t.Errorf("%s's agent suspected a healthy member: %s", m.Name, l)
			}
		}
	}
}

// keyUse is an agent's gossip keys by fingerprint: "encrypt", "decrypt"
// or "leaving" (fenced_gossip_keys' use label).
type keyUse map[string]string

var (
	gossipKeyLine    = regexp.MustCompile(`(?m)^fenced_gossip_keys\{fingerprint="([^"]+)",use="([^"]+)"\} 1$`)
	asConfiguredLine = regexp.MustCompile(`(?m)^fenced_gossip_keys_as_configured \S+$`)
)

// waitGossipKeys waits until m's agent holds exactly the keys of want and
// reports fenced_gossip_keys_as_configured as asConfigured.
func waitGossipKeys(t *testing.T, m *harness.Machine, want keyUse, asConfigured bool) {
	t.Helper()
	wantConf := "fenced_gossip_keys_as_configured 0"
	if asConfigured {
		wantConf = "fenced_gossip_keys_as_configured 1"
	}
	last := ""
	poll.Until(t, time.Minute, fmt.Sprintf("%s's agent holds %v, %s", m.Name, want, wantConf), func() bool {
		text, err := m.Metrics()
		if err != nil {
			return false
		}
		got := keyUse{}
		for _, g := range gossipKeyLine.FindAllStringSubmatch(text, -1) {
			got[g[1]] = g[2]
		}
		if seen := fmt.Sprintf("%v, %s", got, asConfiguredLine.FindString(text)); seen != last {
			last = seen
			t.Logf("%s's agent: %s", m.Name, seen)
		}
		if len(got) != len(want) {
			return false
		}
		for fp, use := range want {
			if got[fp] != use {
				return false
			}
		}
		return strings.Contains(text, wantConf+"\n")
	})
}

// requireNoSuspicionEvents fails on any suspicion Event recorded since
// on a node, except on the nodes of after from the time given there.
func requireNoSuspicionEvents(t *testing.T, h *harness.Harness, since time.Time, after map[string]time.Time) {
	t.Helper()
	evs, err := h.Cluster.Client().CoreV1().Events("default").List(t.Context(), metav1.ListOptions{})
	must(t, err)
	for _, e := range evs.Items {
		if e.InvolvedObject.Kind != "Node" || !slices.Contains(suspicionEvents, vocab.EventReason(e.Reason)) {
			continue
		}
		at := eventTime(e)
		if at.Before(since.Add(-time.Second)) {
			continue
		}
		if from, ok := after[e.InvolvedObject.Name]; ok && !at.Before(from.Add(-time.Second)) {
			continue
		}
		t.Errorf("a healthy node was suspected: %s %s at %s: %s", e.InvolvedObject.Name, e.Reason, at.Format(time.RFC3339Nano), e.Message)
	}
}

// eventTime is when an Event was first recorded.
func eventTime(e corev1.Event) time.Time {
	if !e.EventTime.IsZero() {
		return e.EventTime.Time
	}
	return e.FirstTimestamp.Time
}
