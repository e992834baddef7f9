package heartbeat

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"slices"
	"time"

	"fenced.io/fenced/pkg/identity"
	"fenced.io/fenced/pkg/vocab"
)

// Liveness challenges: gossip's own view of who is alive can be forged in
// both directions by any key holder (a forged dead message for a live
// member, a forged alive for a dead one). Before a power action, a fencer
// therefore asks the member itself, at the address the Kubernetes API
// gives for its node, to sign a fresh nonce with its own key. Only the
// real agent can answer; no other member can answer for it or keep it from
// answering.

// nonceSize is the length of a challenge's nonce.
const nonceSize = 16

// maxReliableProofsPerChallenger bounds the reliable (TCP) proof sends in
// flight to one challenger. Each may wait for memberlist's TCP timeout
// when the challenger's address drops SYNs; counting them per challenger
// means forged challenges in one Node's name hold only that Node's sends,
// never a genuine fencer's. The datagram that goes first needs no slot.
const maxReliableProofsPerChallenger = 2

// challenge asks a member to prove it is alive.
type challenge struct {
	// From is the challenger's member name and ReplyTo its gossip address;
	// the proof is sent only there, and only when From is an alive member
	// at ReplyTo, so challenges cannot turn agents into reflectors.
	From    string `json:"from"`
	ReplyTo string `json:"reply"`
	Nonce   []byte `json:"nonce"`
}

// Proof is a member's answer to a liveness challenge: its name, boot, the
// state it announces, and the challenge's nonce, signed with its own key
// (identity.KindProof). Sig is empty when the member has no key.
type Proof struct {
	Node   string             `json:"node"`
	BootID string             `json:"boot"`
	State  vocab.Announcement `json:"state"`
	Seq    uint64             `json:"seq"`
	Nonce  []byte             `json:"nonce"`
	Sig    []byte             `json:"sig,omitempty"`
}

// Statement is what Sig signs.
func (p Proof) Statement() identity.Statement {
	return identity.Statement{Kind: identity.KindProof, Node: p.Node, BootID: p.BootID, State: p.State, Seq: p.Seq, Nonce: p.Nonce}
}

// EncodeChallenge is a liveness challenge in its wire form (for tools and
// tests that speak the ring's messages).
func EncodeChallenge(from, replyTo string, nonce []byte) []byte {
	return encodeMessage(msgChallenge, challenge{From: from, ReplyTo: replyTo, Nonce: nonce})
}

// EncodeProof is a proof of life in its wire form (for tools and tests).
func EncodeProof(p Proof) []byte { return encodeMessage(msgProof, p) }

func decodeChallenge(buf []byte) (challenge, bool) {
	var c challenge
	if !decodeMessage(buf, msgChallenge, &c) || c.From == "" || c.ReplyTo == "" || len(c.Nonce) != nonceSize ||
		fieldsFit(field{"challenger", len(c.From), maxNameLen}, field{"reply address", len(c.ReplyTo), maxAddrLen}) != nil {
		return challenge{}, false
	}
	return c, true
}

func decodeProof(buf []byte) (Proof, bool) {
	var p Proof
	if !decodeMessage(buf, msgProof, &p) || p.Node == "" || len(p.Nonce) != nonceSize ||
		fieldsFit(field{"proof node", len(p.Node), maxNameLen}, field{"proof boot ID", len(p.BootID), maxBootIDLen},
			field{"proof state", len(p.State), maxWordLen}, field{"proof signature", len(p.Sig), maxSigLen}) != nil {
		return Proof{}, false
	}
	return p, true
}

// ErrNoProof is wrapped by Challenge when no proof came in time.
var ErrNoProof = errors.New("no proof of life")

// Challenge asks the agent of node name, reached at addr ("ip:port": an
// address the caller trusts for that node, such as its InternalIP from the
// API, never one taken from gossip), to prove that it is alive, and waits
// for its proof until ctx ends. The proof is returned as received: the
// caller checks it against the node's published key. An error wrapping
// ErrNoProof means no answer came: the agent is down, hung or cut off from
// this one.
func (r *Ring) Challenge(ctx context.Context, name, addr string) (Proof, error) {
	node, err := nodeOf(name, addr)
	if err != nil {
		return Proof{}, fmt.Errorf("heartbeat: challenge %s: address %q: %w", name, addr, err)
	}
	if r.ml.Load() == nil {
		return Proof{}, fmt.Errorf("heartbeat: challenge %s before Join: %w", name, ErrNoProof)
	}
	nonce := make([]byte, nonceSize)
	_, _ = rand.Read(nonce) // never fails (crypto/rand)
	answer := make(chan Proof, 1)
	r.mu.Lock()
	r.challenges[string(nonce)] = answer
	reply := r.localAddr
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		delete(r.challenges, string(nonce))
		r.mu.Unlock()
	}()
	msg := encodeMessage(msgChallenge, challenge{From: r.self, ReplyTo: reply, Nonce: nonce})
	sent := make(chan error, 1)
	// SendReliable dials TCP and may wait for memberlist's TCP timeout: do
	// not hold the caller past ctx for it.
	go func() { sent <- r.ml.Load().SendReliable(node, msg) }()
	for {
		select {
		case err := <-sent:
			if err != nil {
				return Proof{}, fmt.Errorf("heartbeat: challenge %s at %s: %w: %v", name, addr, ErrNoProof, err)
			}
			sent = nil
		case p := <-answer:
			// Whoever answered received the nonce at addr; the caller
			// checks the name and signature against the node's key.
			return p, nil
		case <-ctx.Done():
			return Proof{}, fmt.Errorf("heartbeat: challenge %s at %s: %w within the time allowed", name, addr, ErrNoProof)
		}
	}
}

// proofReceived hands a proof to the challenge waiting for its nonce.
func (r *Ring) proofReceived(p Proof) {
	r.mu.Lock()
	answer, ok := r.challenges[string(p.Nonce)]
	r.mu.Unlock()
	if !ok {
		r.log.Debug("ignored a proof of life nobody asked for", "node", PeerText(p.Node))
		return
	}
	select {
	case answer <- p:
	default: // answered already
	}
}

// answerChallenge signs the challenge's nonce and sends the proof back to
// the challenger, when the Kubernetes API (or, without one, the gossip
// view) says the reply address is the challenger's own: so challenges
// cannot turn agents into reflectors, and no gossip message can keep an
// agent from answering a fencer. The proof goes out at once as a datagram
// — nothing to wait for, so no address that drops SYNs and no flood holds
// it up — and then reliably, so that one lost datagram does not look like
// silence; the reliable send runs in the background (NotifyMsg must not
// block) within the challenger's own bound.
func (r *Ring) answerChallenge(c challenge) {
	ml := r.ml.Load()
	if ml == nil {
		return // a Ring without memberlist (tests of the view)
	}
	if why := r.refuseChallenger(c); why != "" {
		r.log.Debug("ignored a liveness challenge", "from", c.From, "replyTo", c.ReplyTo, "why", why)
		return
	}
	node, err := nodeOf(c.From, c.ReplyTo)
	if err != nil {
		return
	}
	r.metaMu.Lock()
	p := Proof{Node: r.self, BootID: r.meta.BootID, State: r.meta.State, Nonce: c.Nonce}
	if r.key != nil {
		r.seq++
		p.Seq = r.seq
		p.Sig = r.key.Sign(p.Statement())
	}
	r.metaMu.Unlock()
	msg := encodeMessage(msgProof, p)
	if err := ml.SendBestEffort(node, msg); err != nil {
		r.log.Debug("proof of life datagram not sent", "to", c.From, "err", err)
	}
	r.mu.Lock()
	busy := r.proving[c.From] >= maxReliableProofsPerChallenger
	if !busy {
		r.proving[c.From]++
	}
	r.mu.Unlock()
	if busy {
		r.log.Debug("proof of life sent as a datagram only: reliable sends to this challenger busy", "to", c.From)
		return
	}
	go func() {
		defer func() {
			r.mu.Lock()
			if r.proving[c.From]--; r.proving[c.From] <= 0 {
				delete(r.proving, c.From)
			}
			r.mu.Unlock()
		}()
		start := time.Now()
		if err := ml.SendReliable(node, msg); err != nil {
			r.log.Debug("proof of life not delivered reliably", "to", c.From, "err", err, "after", time.Since(start))
		}
	}()
}

// refuseChallenger returns why challenge c is not answered, or "": the
// challenger must be another member whose reply address the API gives its
// Node (ChallengerAddrs), or, for a Ring without an API, an alive member
// at that address in this agent's view.
func (r *Ring) refuseChallenger(c challenge) string {
	if c.From == r.self {
		return "from this agent's own name"
	}
	if r.challengerAddrs != nil {
		if slices.Contains(r.challengerAddrs(c.From), c.ReplyTo) {
			return ""
		}
		return "the reply address is not one the Kubernetes API gives that Node"
	}
	r.mu.Lock()
	m, ok := r.members[c.From]
	r.mu.Unlock()
	if !ok || m.State != vocab.MemberAlive || m.Addr != c.ReplyTo {
		return "not an alive member at the reply address"
	}
	return ""
}
