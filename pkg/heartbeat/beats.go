package heartbeat

import (
	"time"

	"github.com/hashicorp/memberlist"

	"fenced.io/fenced/pkg/vocab"
)

// Beats: every agent sends each fencer a tiny message every BeatInterval,
// over memberlist's best-effort packets (UDP, encrypted with the gossip
// key and labelled like all gossip). A fencer's Detector learns each
// member's pace from them and says, within about a second of a node's
// power loss whatever the ring's size, that its beats stopped — where
// gossip's own verdict of dead takes SuspicionMult × log10(N) probe
// intervals. Gossip stays for membership and the signed announcements.
//
// A beat says nothing but its sender's name, and anyone with the gossip
// key can send one in any member's name: a forged beat can only keep a
// silent member looking alive for longer, as a forged gossip alive can.
// Only beats of members alive in this agent's view are counted, so that
// what a forger sends cannot grow the Detector.

// DefaultBeatInterval is how often an agent beats to each fencer.
const DefaultBeatInterval = 200 * time.Millisecond

// msgBeat is a beat's tag; the sender's name follows, raw.
const msgBeat byte = 4

// EncodeBeat is a beat in name's name, as an agent sends it (and as the
// test beds forge it).
func EncodeBeat(name string) []byte { return append([]byte{msgBeat}, name...) }

func decodeBeat(buf []byte) (string, bool) {
	if len(buf) < 2 || len(buf) > 1+maxNameLen || buf[0] != msgBeat {
		return "", false
	}
	return string(buf[1:]), true
}

// beatLoop sends this agent's beats to every fencer alive in its view
// (but itself) until the ring shuts down: sealed, through own (the ring's
// transport; nil when Options gave one), to a fencer that reads them
// (Meta.SealedBeats), else through memberlist.
func (r *Ring) beatLoop(ml *memberlist.Memberlist, own *transport) {
	t := time.NewTicker(r.beatEvery)
	defer t.Stop()
	msg := EncodeBeat(r.self)
	var sealed []byte
	type fencer struct {
		node   *memberlist.Node
		sealed bool
	}
	for {
		select {
		case <-r.done:
			return
		case <-t.C:
		}
		var to []fencer
		r.mu.Lock()
		for _, m := range r.members {
			if m.Name == r.self || m.State != vocab.MemberAlive || m.Meta.Role != RoleFencer {
				continue
			}
			if n, err := nodeOf(m.Name, m.Addr); err == nil {
				to = append(to, fencer{n, m.Meta.SealedBeats})
			}
		}
		r.mu.Unlock()
		keys := r.beatKeys.Load()
		// A lost beat is what the Detector is for: errors are not kept.
		for _, f := range to {
			if f.sealed && keys != nil && own != nil {
				sealed = keys.seal(sealed[:0], r.self)
				_, _ = own.WriteTo(sealed, f.node.Address())
				continue
			}
			_ = ml.SendBestEffort(f.node, msg)
		}
	}
}

// beatReceived counts a beat of member name received at now; a member
// that was silent beats again.
func (r *Ring) beatReceived(name string, now time.Time) {
	r.mu.Lock()
	m, ok := r.members[name]
	if !ok || name == r.self || m.State != vocab.MemberAlive || r.stopped {
		r.mu.Unlock()
		return
	}
	r.detector.Beat(name, now)
	r.beats.Add(1)
	if !m.Silent && !m.Doubt {
		r.mu.Unlock()
		return
	}
	wasSilent := m.Silent
	m.Silent, m.Doubt, m.SilentSince = false, false, time.Time{}
	delete(r.silentOnce, name)
	cur, onChange := *m, r.onChange
	r.mu.Unlock()
	if wasSilent {
		r.log.Info("gossip member beats again", "node", PeerText(name))
	}
	if onChange != nil {
		onChange(cur)
	}
}

// BeatsReceived is how many beats of alive members this fencer took.
func (r *Ring) BeatsReceived() uint64 { return r.beats.Load() }

// BeatsRefused is how many sealed beats no key of this ring opened.
func (r *Ring) BeatsRefused() uint64 { return r.beatsRefused.Load() }

// silenceLoop looks at every alive member's beats twice per interval and
// reports those that stopped: a member is silent once the Detector says so
// on two looks in a row, and a look that comes late — this agent was not
// scheduled, and beats may wait unread in its socket — starts the count
// over, so that a stalled fencer does not take its own stall for everyone
// else's silence.
func (r *Ring) silenceLoop() {
	every := r.beatEvery / 2
	t := time.NewTicker(every)
	defer t.Stop()
	last := time.Now()
	for {
		var now time.Time
		select {
		case <-r.done:
			return
		case now = <-t.C:
		}
		late := now.Sub(last) > 2*every
		last = now
		changed, onChange := r.lookForSilence(now, late)
		for _, m := range changed {
			if m.Silent {
				r.log.Info("gossip member stopped beating", "node", PeerText(m.Name), "lastBeat", m.SilentSince.Format(time.RFC3339Nano))
			} else {
				r.log.Debug("gossip member's beats are late", "node", PeerText(m.Name), "lastBeat", m.SilentSince.Format(time.RFC3339Nano))
			}
			if onChange != nil {
				onChange(m)
			}
		}
	}
}

// lookForSilence is one look of silenceLoop at now (late: the look came
// late, which starts every count over): the members found in doubt on
// this look, or silent on this look and the last, marked so, and the
// callback to tell them to.
func (r *Ring) lookForSilence(now time.Time, late bool) ([]Member, func(Member)) {
	var changed []Member
	r.mu.Lock()
	defer r.mu.Unlock()
	if late {
		clear(r.silentOnce)
	}
	for name, m := range r.members {
		if name == r.self || m.Silent {
			continue
		}
		if m.State != vocab.MemberAlive {
			r.detector.Forget(name) // its next life starts a history of its own
			delete(r.silentOnce, name)
			continue
		}
		s := r.detector.Silence(name, now)
		switch {
		case !s.Known || !s.Doubt || late:
			delete(r.silentOnce, name)
		case !s.Silent && !m.Doubt:
			// Late beats: one look is enough to ask the agent.
			m.Doubt, m.SilentSince = true, s.Last
			changed = append(changed, *m)
		case !s.Silent:
		case !r.silentOnce[name]:
			r.silentOnce[name] = true
		default:
			m.Silent, m.Doubt, m.SilentSince = true, true, s.Last
			delete(r.silentOnce, name)
			changed = append(changed, *m)
		}
	}
	return changed, r.onChange
}
