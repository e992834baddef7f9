package heartbeat

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/memberlist"

	"fenced.io/fenced/pkg/vocab"
)

// delegate is the Ring as memberlist's Delegate, EventDelegate and
// AliveDelegate, kept as a separate type so that the callbacks are not
// part of Ring's API.
//
// memberlist calls the event and alive callbacks with its node lock held:
// they must not call into memberlist and must not block. They only touch
// the Ring's view (under Ring.mu) and call the OnChange handler (with
// Ring.mu released).
type delegate Ring

var (
	_ memberlist.Delegate      = (*delegate)(nil)
	_ memberlist.EventDelegate = (*delegate)(nil)
	_ memberlist.AliveDelegate = (*delegate)(nil)
)

// maxRejectedLogged bounds the names remembered to log each refused peer
// once at warn level; beyond it refusals are logged at debug only.
const maxRejectedLogged = 1024

// refusalWarnings is how many refusals a minute are logged at warn level
// (the rest at debug): peers choose how many they send.
const refusalWarnings = 10

// NotifyAlive refuses peers that are not Nodes of the cluster or whose
// metadata is not ours. Returning an error keeps memberlist from adding
// (or updating) the peer.
//
// It is where every member state a peer sends comes in (alive messages
// and the states of a push/pull alike): what no genuine member can send —
// a name, an address or metadata over their bounds — is refused here,
// before anything in it is decoded, remembered or logged whole, so that
// memberlist never stores it and NotifyJoin and NotifyUpdate never see
// it.
func (d *delegate) NotifyAlive(peer *memberlist.Node) error {
	r := (*Ring)(d)
	if why := oversizedPeer(peer.Name, peer.Addr, peer.Meta); why != "" {
		r.oversized.Add(1)
		r.refusals.Warn(r.log, "refused an oversized gossip member state", "node", PeerText(peer.Name), "reason", why,
			"why", "no genuine member sends one; any holder of the gossip key can")
		return errors.New(why)
	}
	if peer.Name == r.self {
		// memberlist runs its own alive message through this delegate
		// too; refusing it would leave this agent out of its own ring.
		return nil
	}
	var err error
	if r.isNode != nil && !r.isNode(peer.Name) {
		err = errors.New("not a Node of this cluster")
	} else if meta, merr := DecodeMeta(peer.Meta); merr != nil {
		err = fmt.Errorf("no fenced metadata: %w", merr)
	} else if meta.Node != "" && meta.Node != peer.Name {
		err = fmt.Errorf("metadata names node %q", meta.Node)
	}
	if err == nil {
		return nil
	}
	r.mu.Lock()
	_, seen := r.rejected[peer.Name]
	if !seen && len(r.rejected) < maxRejectedLogged {
		r.rejected[peer.Name] = struct{}{}
	}
	r.mu.Unlock()
	attrs := []any{"node", PeerText(peer.Name), "addr", peer.Address(), "reason", PeerText(err.Error())}
	if seen {
		r.log.Debug("refused gossip member", attrs...) // memberlist repeats alive messages
	} else {
		r.refusals.Warn(r.log, "refused gossip member", attrs...)
	}
	return err
}

// OversizedRefused is how many member states this agent refused for a
// name, address or metadata over its bound (NotifyAlive).
func (r *Ring) OversizedRefused() uint64 { return r.oversized.Load() }

// NotifyJoin is a member that is new or back from dead or left.
func (d *delegate) NotifyJoin(n *memberlist.Node) {
	r := (*Ring)(d)
	r.mu.Lock()
	delete(r.leaving, n.Name) // a notice belongs to the previous life
	r.cancelPendingDeadLocked(n.Name)
	if n.Name == r.self {
		r.localAddr = n.Address()
	}
	r.observeLocked(n.Name, n.Address(), n.Meta, vocab.MemberAlive, LeaveNotice{})
}

// NotifyUpdate is a member whose metadata changed.
func (d *delegate) NotifyUpdate(n *memberlist.Node) {
	r := (*Ring)(d)
	r.mu.Lock()
	r.cancelPendingDeadLocked(n.Name)
	r.observeLocked(n.Name, n.Address(), n.Meta, vocab.MemberAlive, LeaveNotice{})
}

// NotifyLeave is a member that memberlist declared dead or that left.
// memberlist v0.7.0 does not tell which (n.State is never filled in,
// hashicorp/memberlist#293): a member is left when it sent us a leave
// notice for its current boot (see Ring.Leave) or, with a memberlist that
// fills in n.State, when that says vocab.MemberLeft. Otherwise it is dead.
func (d *delegate) NotifyLeave(n *memberlist.Node) {
	r := (*Ring)(d)
	r.mu.Lock()
	state := vocab.MemberDead
	hint, noticed := r.leaving[n.Name]
	delete(r.leaving, n.Name)
	switch {
	case n.Name == r.self && r.selfLeft:
		state = vocab.MemberLeft
	case n.State == memberlist.StateLeft:
		state = vocab.MemberLeft
	case noticed && hint.notice.BootID == r.bootIDLocked(n) && time.Since(hint.at) < leaveNoticeTTL:
		state = vocab.MemberLeft
	}
	var notice LeaveNotice
	if state == vocab.MemberLeft && noticed {
		notice = hint.notice
	}
	if state == vocab.MemberDead && n.Name != r.self && r.announcedLeavingLocked(n) {
		r.holdDeadLocked(n.Name, n.Address(), append([]byte(nil), n.Meta...))
		r.mu.Unlock()
		return
	}
	r.observeLocked(n.Name, n.Address(), n.Meta, state, notice)
}

// announcedLeavingLocked reports whether n's last metadata announced
// that its agent leaves on purpose: a shutdown (shutting-down or
// shutdown-complete) or a restart.
func (r *Ring) announcedLeavingLocked(n *memberlist.Node) bool {
	var state vocab.Announcement
	if meta, err := DecodeMeta(n.Meta); err == nil {
		state = meta.State
	} else if m, ok := r.members[n.Name]; ok {
		state = m.Meta.State
	}
	return state.Leaving()
}

// holdDeadLocked reports the member dead after leaveNoticeGrace unless its
// leave notice (NotifyMsg) or its return (NotifyJoin) comes first.
func (r *Ring) holdDeadLocked(name, addr string, rawMeta []byte) {
	r.cancelPendingDeadLocked(name)
	var timer *time.Timer
	timer = time.AfterFunc(leaveNoticeGrace, func() {
		r.mu.Lock()
		if r.pendingDead[name] != timer {
			r.mu.Unlock()
			return
		}
		delete(r.pendingDead, name)
		r.observeLocked(name, addr, rawMeta, vocab.MemberDead, LeaveNotice{})
	})
	r.pendingDead[name] = timer
}

// cancelPendingDeadLocked drops a held-back dead verdict on name.
func (r *Ring) cancelPendingDeadLocked(name string) {
	if t, ok := r.pendingDead[name]; ok {
		t.Stop()
		delete(r.pendingDead, name)
	}
}

// bootIDLocked is the boot ID of n's metadata, or the last one seen.
func (r *Ring) bootIDLocked(n *memberlist.Node) string {
	if meta, err := DecodeMeta(n.Meta); err == nil {
		return meta.BootID
	}
	if m, ok := r.members[n.Name]; ok {
		return m.Meta.BootID
	}
	return ""
}

// observeLocked records a member's address, metadata (kept as it was
// when rawMeta does not decode), state and the leave notice that made it
// left, then unlocks r.mu, calls the OnChange handler and logs the
// change.
func (r *Ring) observeLocked(name, addr string, rawMeta []byte, state vocab.MemberState, notice LeaveNotice) {
	if r.stopped { // Shutdown: the view no longer changes
		r.mu.Unlock()
		return
	}
	now := time.Now()
	m, known := r.members[name]
	if !known {
		m = &Member{Name: name}
		r.members[name] = m
	}
	prev := *m
	m.Addr = addr
	if meta, err := DecodeMeta(rawMeta); err == nil {
		m.Meta = meta
	}
	if !known || m.State != state {
		m.State = state
		m.Since = now
		// A new state is a new life for the beats too.
		m.Silent, m.Doubt, m.SilentSince = false, false, time.Time{}
	}
	m.Leave = notice
	cur := *m
	onChange := r.onChange
	wakeJoin := known && prev.State == vocab.MemberAlive && state != vocab.MemberAlive &&
		name != r.self && r.aliveLocked() <= 1
	r.mu.Unlock()

	if known && prev == cur {
		return
	}
	if name != r.self {
		r.wakeKeys()
	}
	if onChange != nil {
		// With r.mu released: the handler may read the view.
		onChange(cur)
	}
	if wakeJoin {
		select {
		case r.lonely <- struct{}{}:
		default:
		}
	}
	r.logChange(known, prev, cur)
}

// logChange logs a member's change at info level.
func (r *Ring) logChange(known bool, prev, cur Member) {
	from := string(prev.State)
	if !known {
		from = "none"
	}
	// Everything but the states is what the member (or anyone with the
	// key) said.
	attrs := []any{
		"node", PeerText(cur.Name), "from", from, "to", string(cur.State),
		"bootID", PeerText(cur.Meta.BootID), "announced", PeerText(cur.Meta.State), "addr", PeerText(cur.Addr),
	}
	switch {
	case known && prev.Meta.BootID != "" && prev.Meta.BootID != cur.Meta.BootID:
		r.log.Info("gossip member rebooted", append(attrs, "prevBootID", PeerText(prev.Meta.BootID))...)
	case !known || prev.State != cur.State:
		r.log.Info("gossip member state changed", attrs...)
	case prev.Meta != cur.Meta:
		r.log.Info("gossip member metadata changed", attrs...)
	default:
		r.log.Debug("gossip member address changed", attrs...)
	}
}

// NodeMeta returns this agent's encoded Meta, which Encode has already
// kept within memberlist's limit.
func (d *delegate) NodeMeta(limit int) []byte {
	r := (*Ring)(d)
	r.metaMu.Lock()
	defer r.metaMu.Unlock()
	if len(r.metaBytes) > limit {
		return nil // cannot happen: Encode enforces MaxMetaSize
	}
	return append([]byte(nil), r.metaBytes...)
}

// NotifyMsg receives the user messages of this package: leave notices,
// liveness challenges and proofs, beats. Every byte of them may come from
// any holder of the gossip key.
func (d *delegate) NotifyMsg(buf []byte) {
	r := (*Ring)(d)
	if len(buf) == 0 {
		return
	}
	switch buf[0] {
	case msgLeaveNotice:
		if notice, ok := decodeLeaveNotice(buf); ok {
			r.leaveNoticed(notice)
			return
		}
	case msgChallenge:
		if c, ok := decodeChallenge(buf); ok {
			r.answerChallenge(c)
			return
		}
	case msgProof:
		if p, ok := decodeProof(buf); ok {
			r.proofReceived(p)
			return
		}
	case msgBeat:
		if name, ok := decodeBeat(buf); ok {
			if r.detector != nil {
				r.beatReceived(name, time.Now())
			}
			return
		}
	}
	r.log.Debug("ignored unknown gossip message", "len", len(buf))
}

// leaveNoticed records a member's leave notice.
func (r *Ring) leaveNoticed(notice LeaveNotice) {
	name, boot := notice.Node, notice.BootID
	r.mu.Lock()
	m, known := r.members[name]
	_, held := r.pendingDead[name]
	switch {
	case !known || name == r.self:
		r.mu.Unlock()
	case held && m.Meta.BootID == boot:
		// memberlist reported it gone a moment ago and the notice was
		// late (holdDeadLocked): it left, and was never reported dead.
		r.cancelPendingDeadLocked(name)
		r.observeLocked(name, m.Addr, nil, vocab.MemberLeft, notice)
	case m.State == vocab.MemberAlive:
		// The usual order: remember it until memberlist reports the
		// member gone (NotifyLeave).
		r.leaving[name] = leaveHint{notice: notice, at: time.Now()}
		r.mu.Unlock()
	case m.State == vocab.MemberDead && m.Meta.BootID == boot:
		// The notice and memberlist's leave broadcast travel on different
		// paths (TCP and UDP gossip) and the broadcast won. A member that
		// sends a leave notice is up and leaving on purpose, so dead was
		// a misreading: correct it.
		r.observeLocked(name, m.Addr, nil, vocab.MemberLeft, notice)
	default:
		r.mu.Unlock()
	}
}

// GetBroadcasts is unused: this package sends no gossip of its own.
func (d *delegate) GetBroadcasts(overhead, limit int) [][]byte { return nil }

// LocalState is unused: there is no state to push/pull beyond Meta.
func (d *delegate) LocalState(join bool) []byte { return nil }

// MergeRemoteState is unused, see LocalState.
func (d *delegate) MergeRemoteState(buf []byte, join bool) {}

// Message tags: the first byte of every user message of this package
// (msgBeat: beats.go). Other values are reserved for future messages and
// ignored.
const (
	msgLeaveNotice byte = 1
	msgChallenge   byte = 2
	msgProof       byte = 3
)

// maxMessage bounds the user messages this package decodes: its own are
// far smaller, and a forged one must not make the decoder work hard.
const maxMessage = 4096

func encodeMessage(tag byte, v any) []byte {
	b, _ := json.Marshal(v) // cannot fail: plain structs of strings, numbers and bytes
	return append([]byte{tag}, b...)
}

// decodeMessage decodes a user message tagged tag into v.
func decodeMessage(buf []byte, tag byte, v any) bool {
	if len(buf) < 2 || len(buf) > maxMessage || buf[0] != tag {
		return false
	}
	return json.Unmarshal(buf[1:], v) == nil
}

// EncodeLeaveNotice is a leave notice in its wire form, as Leave sends it
// (exported for tools and tests that speak the ring's messages).
func EncodeLeaveNotice(n LeaveNotice) []byte { return encodeMessage(msgLeaveNotice, n) }

func decodeLeaveNotice(buf []byte) (LeaveNotice, bool) {
	var n LeaveNotice
	if !decodeMessage(buf, msgLeaveNotice, &n) || n.Node == "" ||
		fieldsFit(field{"leave node", len(n.Node), maxNameLen}, field{"leave boot ID", len(n.BootID), maxBootIDLen},
			field{"leave signature", len(n.Sig), maxSigText}) != nil {
		return LeaveNotice{}, false
	}
	return n, true
}
