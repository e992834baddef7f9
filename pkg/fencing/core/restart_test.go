package core

import (
	"slices"
	"strings"
	"testing"
	"time"

	"fenced.io/fenced/pkg/vocab"
)

// restarting is a healthy node whose agent left the ring at t0 announcing
// a restart, signed, for its current boot; its kubelet renewed its Lease
// at t0 and still says Ready.
func restarting() Observation {
	o := healthy()
	o.Member.State, o.Member.Since, o.Member.Announced = vocab.MemberLeft, t0, vocab.AnnounceRestarting
	o.Node.KubeletRenew = t0
	o.Cluster.GossipAlive = 4
	return o
}

// TestAgentRestartIsLeftAlone: an agent that leaves the ring for a
// restart, in its own signed word, while its kubelet stays Ready and
// renews, costs no suspicion, no power read and no Event — until
// RestartWait has passed. Anything that voids the word or shows the host
// down makes it an ordinary suspicion at once: a word that is not signed
// (any gossip-key holder could send it), about another boot, a kubelet
// that is not Ready or has stopped renewing, or another announcement.
func TestAgentRestartIsLeftAlone(t *testing.T) {
	p := testPolicy(vocab.ModeConfirmOnly)
	tests := []struct {
		name string
		// at: when the node is looked at, after the leave at t0.
		at     time.Duration
		change func(*Observation)
		// quiet: left alone (no suspicion, read or Event).
		quiet bool
		// restartWait replaces the policy's when set.
		restartWait *time.Duration
	}{
		{"just left", time.Second, nil, true, nil},
		{"within restartWait, kubelet renewing", p.RestartWait - time.Second, func(o *Observation) { o.Node.KubeletRenew = o.Now.Add(-10 * time.Second) }, true, nil},
		{"kubelet Lease unknown (not readable): Ready decides", 30 * time.Second, func(o *Observation) { o.Node.KubeletRenew = time.Time{} }, true, nil},
		{"restartWait passed", p.RestartWait + time.Second, func(o *Observation) { o.Node.KubeletRenew = o.Now }, false, nil},
		{"not signed: anyone's word", time.Second, func(o *Observation) { o.Member.Signed = false }, false, nil},
		{"about another boot", time.Second, func(o *Observation) { o.Member.BootID = "boot-0" }, false, nil},
		{"kubelet not Ready", time.Second, func(o *Observation) { o.Node.Ready, o.Node.ReadySince = ReadyUnknown, t0 }, false, nil},
		{"kubelet silent past KubeletSilent", KubeletSilent + time.Second, nil, false, nil},
		{"a plain leave, no restart announced", time.Second, func(o *Observation) { o.Member.Announced = vocab.AnnounceRunning }, false, nil},
		{"dead, not left", time.Second, func(o *Observation) { o.Member.State = vocab.MemberDead }, false, nil},
		{"restartWait 0: no wait", time.Second, nil, false, new(time.Duration(0))},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := p
			if tc.restartWait != nil {
				p.RestartWait = *tc.restartWait
			}
			o := restarting()
			o.Now = t0.Add(tc.at)
			if tc.change != nil {
				tc.change(&o)
			}
			tgt := &Target{Name: "node-a"}
			d := tgt.Step(o, p)
			quiet := d.Phase == PhaseHealthy && !has(d.Actions, ActReadPower) && len(events(d.Actions)) == 0
			if quiet != tc.quiet {
				t.Fatalf("phase %s, actions %v, events %v (reason %q); want quiet=%v", d.Phase, kinds(d.Actions), events(d.Actions), d.Reason, tc.quiet)
			}
			if !tc.quiet {
				if !slices.Contains(events(d.Actions), vocab.EventNodeSuspected) {
					t.Errorf("events %v: want the ordinary suspicion", events(d.Actions))
				}
				return
			}
			// Looked at again when the wait ends, not before nor never.
			r := find(d.Actions, ActRequeue)
			if r == nil || !o.Now.Add(r.After).Equal(t0.Add(p.RestartWait)) {
				t.Errorf("requeue %+v; want at the end of restartWait, %s", r, t0.Add(p.RestartWait))
			}
		})
	}
}

// TestAgentRestartThatDoesNotComeBack: the restart wait ends by itself —
// the node is then suspected like any other, its power read, the Event
// saying why; a node that dies during the wait is suspected once its
// kubelet has been silent for KubeletSilent; and a suspicion already under
// way when the restart's word arrives ends with NodeResponsive.
func TestAgentRestartThatDoesNotComeBack(t *testing.T) {
	p := testPolicy(vocab.ModeConfirmOnly)
	t.Run("not back within restartWait", func(t *testing.T) {
		tgt := &Target{Name: "node-a"}
		o := restarting()
		o.Now = t0.Add(time.Second)
		if d := tgt.Step(o, p); d.Phase != PhaseHealthy {
			t.Fatalf("phase %s", d.Phase)
		}
		o.Now, o.Node.KubeletRenew = t0.Add(p.RestartWait), t0.Add(p.RestartWait-5*time.Second)
		d := tgt.Step(o, p)
		ev := find(d.Actions, ActEvent)
		if d.Phase == PhaseHealthy || !has(d.Actions, ActReadPower) || ev == nil || ev.Reason != vocab.EventNodeSuspected {
			t.Fatalf("phase %s, actions %v (reason %q)", d.Phase, kinds(d.Actions), d.Reason)
		}
		if want := "gossip left for a restart 2m0s ago, not back"; !strings.Contains(ev.Message, want) {
			t.Errorf("message %q, want it to say %q", ev.Message, want)
		}
	})
	t.Run("power lost during the wait", func(t *testing.T) {
		tgt := &Target{Name: "node-a"}
		o := restarting()
		for s := time.Second; s <= KubeletSilent; s += time.Second {
			o.Now = t0.Add(s)
			if d := tgt.Step(o, p); d.Phase != PhaseHealthy || has(d.Actions, ActReadPower) {
				t.Fatalf("at %s: phase %s, actions %v", s, d.Phase, kinds(d.Actions))
			}
		}
		o.Now = t0.Add(KubeletSilent + time.Second)
		if d := tgt.Step(o, p); !has(d.Actions, ActReadPower) {
			t.Fatalf("kubelet silent for %s: actions %v (reason %q)", KubeletSilent+time.Second, kinds(d.Actions), d.Reason)
		}
	})
	t.Run("a suspicion under way ends quietly", func(t *testing.T) {
		tgt := &Target{Name: "node-a"}
		o := restarting()
		o.Member.Announced = vocab.AnnounceRunning // the leave's announcement not seen yet
		o.Now = t0.Add(time.Second)
		if d := tgt.Step(o, p); d.Phase == PhaseHealthy {
			t.Fatalf("a plain leave: phase %s", d.Phase)
		}
		o.Member.Announced = vocab.AnnounceRestarting
		o.Now = t0.Add(2 * time.Second)
		d := tgt.Step(o, p)
		if d.Phase != PhaseHealthy || !slices.Equal(events(d.Actions), []vocab.EventReason{vocab.EventNodeResponsive}) {
			t.Fatalf("phase %s, events %v", d.Phase, events(d.Actions))
		}
	})
}
