package fencing

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"strconv"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"

	"fenced.io/fenced/pkg/heartbeat"
	"fenced.io/fenced/pkg/identity/publish"
	"fenced.io/fenced/pkg/taint"
	"fenced.io/fenced/pkg/vocab"
)

// This file holds the fencer's side of "what a node says about itself
// must be provably its own" (docs/design.md §2): the signed announcements and
// leave notices of a member are checked against the key its node
// published (pkg/identity/publish), and agents are challenged for proofs
// of life before power actions. Everything else gossip says is suspicion.

// Forgery kinds, the label of fenced_gossip_forgeries_total.
const (
	// forgedUnsigned: a shutdown announcement (or the leave that follows
	// it) that carries no valid signature of the node's key.
	forgedUnsigned = "unsigned-announcement"
	// forgedBadSignature: a signature that does not verify against the
	// node's published key.
	forgedBadSignature = "bad-signature"
	// forgedOtherBoot: a signed statement about a boot other than the one
	// the node published its key for (a replay from an earlier boot).
	forgedOtherBoot = "other-boot"
	// forgedReplay: a validly signed statement older than one already
	// seen from the same key.
	forgedReplay = "replay"
	// forgedProof: an answer to a liveness challenge whose signature does
	// not verify. It still counts as an answer: only a host at the node's
	// address could echo the challenge's nonce.
	forgedProof = "bad-proof"
)

// seqSeen is the latest statement number seen from one of a node's keys.
type seqSeen struct {
	key string
	seq uint64
}

// agentKey is node's published key, if any.
func (f *Fencer) agentKey(node string) (publish.Key, bool) {
	if f.leases == nil {
		return publish.Key{}, false
	}
	l, err := f.leases.Get(publish.LeaseName(node))
	if err != nil {
		return publish.Key{}, false
	}
	k, err := publish.FromLease(l)
	if errors.Is(err, publish.ErrKeyWithdrawn) {
		return publish.Key{}, false // the agent took its word back: nothing to warn about
	}
	if err != nil {
		f.log.Warn("agent key Lease unusable: taking none of this node's word", "node", node, "err", err)
		return publish.Key{}, false
	}
	return k, true
}

// signed reports whether member m's announcement (and, when it left, its
// leave notice) is its node's own word: signed with the key node
// published for the boot the announcement is about, that key not shown
// stale by a member of its boot (stalekey.go), and not older than a
// statement already seen from that key. Claims that fail are counted and
// logged as forgeries when they matter: a shutdown announcement or a
// leave.
func (f *Fencer) signed(node string, m heartbeat.Member) bool {
	// Only claims that could change a decision are counted: a plain
	// "running" whose signature does not verify yet is what every reboot
	// looks like until the fencer sees the new boot's key.
	matters := m.Meta.State.Shutdown() || m.Meta.State == vocab.AnnounceRestarting ||
		m.State == vocab.MemberLeft
	reject := func(kind string) bool {
		if matters {
			f.forgery(node, kind, m.Meta.Sig+"/"+string(m.Meta.State)+"/"+string(m.State))
		}
		return false
	}
	if !f.policyOK.Load() {
		return false // logged by checkPolicy
	}
	k, ok := f.agentKey(node)
	// A statement in this node's name that does not verify may show the
	// Lease key stale: see sawUnverified.
	// Only statements in this node's own name count there.
	unverified := func(about, boot string, signed bool) {
		if about == node {
			f.sawUnverified(node, k, ok, boot, signed)
		}
	}
	switch {
	case !ok || m.Meta.Sig == "":
		if m.Meta.Sig == "" {
			unverified(m.Meta.Node, m.Meta.BootID, false)
		}
		return reject(forgedUnsigned)
	case m.Meta.Node != node || !k.Key.Verify(m.Meta.Statement(), m.Meta.Signature()):
		unverified(m.Meta.Node, m.Meta.BootID, true)
		return reject(forgedBadSignature)
	case m.Meta.BootID != k.BootID:
		return reject(forgedOtherBoot)
	}
	if m.State == vocab.MemberLeft {
		n := m.Leave
		switch {
		case n.Sig == "":
			unverified(n.Node, n.BootID, false)
			return reject(forgedUnsigned)
		case n.Node != node || !k.Key.Verify(n.Statement(), n.Signature()):
			unverified(n.Node, n.BootID, true)
			return reject(forgedBadSignature)
		case n.BootID != k.BootID:
			return reject(forgedOtherBoot)
		}
	}
	if f.keyStale(node, k) {
		return reject(forgedStaleKey)
	}
	f.sawVerified(node)
	f.mu.Lock()
	seen, known := f.seqs[node]
	replay := known && seen.key == k.Key.String() && m.Meta.Seq < seen.seq
	if !replay {
		f.seqs[node] = seqSeen{key: k.Key.String(), seq: m.Meta.Seq}
	}
	f.mu.Unlock()
	if replay {
		return reject(forgedReplay)
	}
	return true
}

// signedKept is signed, except that a restart's word — the announcement
// and the leave of an agent that left the ring to restart — verified once
// counts for as long as its member stays left: the agent's next run
// publishes a key of its own on the node's Lease, against which the word
// of the run before no longer verifies, and would be taken for a forgery
// (a warning and a count) while the new run joins. The word delays a
// suspicion and no more (core.agentRestarting), so keeping it cannot lead
// to a taint or a power action.
func (f *Fencer) signedKept(node string, m heartbeat.Member) bool {
	restart := m.State == vocab.MemberLeft && m.Meta.State == vocab.AnnounceRestarting
	f.mu.Lock()
	s := f.stateOf(node)
	kept := restart && s.restartSigned.Equal(m.Since) && !m.Since.IsZero()
	if !restart {
		s.restartSigned = time.Time{}
	}
	f.mu.Unlock()
	if kept {
		return true
	}
	ok := f.signed(node, m)
	if ok && restart {
		f.mu.Lock()
		f.stateOf(node).restartSigned = m.Since
		f.mu.Unlock()
	}
	return ok
}

// forgery counts and logs a rejected claim once per distinct claim.
func (f *Fencer) forgery(node, kind, claim string) {
	id := claimOf(node, kind, claim)
	f.mu.Lock()
	_, dup := f.forged[id]
	if !dup {
		if len(f.forged) >= maxForgeriesRemembered {
			clear(f.forged)
		}
		f.forged[id] = struct{}{}
	}
	f.mu.Unlock()
	if dup {
		return
	}
	f.cfg.Metrics.Forgeries.WithLabelValues(kind).Inc()
	f.forgeryWarnings.Warn(f.log, "rejected a gossip claim not signed by the node's own key", "node", heartbeat.PeerText(node), "kind", kind,
		"why", "any holder of the gossip key can say this in the node's name; it counts for nothing")
}

// claimID identifies a rejected claim: a hash, so that what is remembered
// does not grow with what a forger sends (a claim holds its signature).
type claimID [sha256.Size]byte

func claimOf(node, kind, claim string) claimID {
	h := sha256.New()
	for _, s := range []string{node, kind, claim} {
		// Length-prefixed: no two different triples hash the same input.
		_ = binary.Write(h, binary.BigEndian, uint64(len(s)))
		_, _ = io.WriteString(h, s)
	}
	var id claimID
	h.Sum(id[:0])
	return id
}

// maxForgeriesRemembered bounds the claims remembered to count each once
// (sha256.Size bytes each).
const maxForgeriesRemembered = 4096

// forgeryWarningsPerMinute is how many forgeries a minute are logged at
// warn level; the counter counts them all.
const forgeryWarningsPerMinute = 10

// checkPolicy keeps policyOK up to date: whether the admission policy
// that binds agent keys to nodes is in force. Without it any agent could
// publish a key in another node's name, so no node's signed word counts
// (clean shutdowns then need the BMC). Checked at start, then every
// policyRecheck (policyRetry while it is missing).
func (f *Fencer) checkPolicy(ctx context.Context) {
	for {
		err := publish.PolicyInForce(ctx, f.cfg.Client, f.cfg.LeaseNamespace)
		was := f.policyOK.Swap(err == nil)
		switch {
		case err != nil && (was || !f.policyChecked):
			f.log.Error("not taking any node's signed word: clean shutdowns will need the BMC", "err", err,
				"fix", "kubectl apply -f deploy/daemonset/base/agent-identity-policy.yaml")
		case err == nil && !was:
			f.log.Info("agent identity policy in force: nodes' signed announcements count", "policy", publish.PolicyName)
		}
		orderErr := publish.OrderPolicyInForce(ctx, f.cfg.Client, f.cfg.LeaseNamespace)
		wasOrders := f.orderPolicyOK.Swap(orderErr == nil)
		// Said as a warning, and looked at again soon, only where a node
		// has a watchdog level: elsewhere the policy guards nothing used.
		needed := f.usesWatchdog()
		switch {
		case orderErr != nil && (wasOrders || !f.policyChecked) && needed:
			f.log.Warn("fence orders' admission policy not in force: no node is fenced on its watchdog level", "err", orderErr,
				"fix", "kubectl apply -f deploy/daemonset/base/fence-order-policy.yaml")
		case orderErr != nil && !f.policyChecked:
			f.log.Info("fence orders' admission policy not in force; no node has a watchdog level, so nothing needs it", "err", orderErr)
		case orderErr == nil && !wasOrders:
			f.log.Info("fence order policy in force: the watchdog level may order resets", "policy", publish.OrderPolicyName)
		}
		f.policyChecked = true
		wait := policyRecheck
		if err != nil || orderErr != nil && needed {
			wait = policyRetry
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

const (
	policyRecheck = 10 * time.Minute
	policyRetry   = time.Minute
)

// startChallenge asks node's agent, at the node's InternalIP and the
// gossip port, for a proof of life, in the background; the outcome is
// stored for the next Observation and the node queued again. within
// bounds the wait for the answer (0: ChallengeTimeout).
func (f *Fencer) startChallenge(ctx context.Context, name string, node *corev1.Node, within time.Duration) {
	if within <= 0 {
		within = f.cfg.ChallengeTimeout
	}
	addr := f.agentAddr(node)
	if addr == "" {
		// Without an address from the API there is nobody to ask; silence
		// would prove nothing, so none is recorded.
		f.log.Warn("cannot challenge the node's agent: its Node has no InternalIP", "node", name)
		return
	}
	st, begun := f.begin(name, func(s *nodeState) *bool { return &s.agent.Challenging })
	if !begun {
		return
	}

	f.bg.Add(1)
	go func() {
		defer f.bg.Done()
		sent := f.cfg.Now()
		cctx, cancel := context.WithTimeout(ctx, within)
		proof, err := f.cfg.Members.Challenge(cctx, name, addr)
		cancel()
		if err == nil {
			if k, ok := f.agentKey(name); ok && (proof.BootID != k.BootID || !k.Key.Verify(proof.Statement(), proof.Sig)) {
				f.forgery(name, forgedProof, string(proof.Nonce))
			} else if ok {
				f.keyProven(name, k)
			}
		}
		f.mu.Lock()
		a := &st.agent
		a.Challenging = false
		if err == nil {
			a.LastProof, a.SilentSince, a.LastSilent, a.SilentUntil = f.cfg.Now(), time.Time{}, time.Time{}, time.Time{}
		} else {
			if a.SilentSince.IsZero() {
				a.SilentSince = sent
			}
			a.LastSilent, a.SilentUntil = sent, f.cfg.Now()
		}
		f.mu.Unlock()
		switch {
		case err == nil:
			f.cfg.Metrics.Challenges.WithLabelValues("answered").Inc()
			f.log.Info("agent answered a liveness challenge", "node", name, "addr", addr, "boot", proof.BootID)
		case errors.Is(err, heartbeat.ErrNoProof) || errors.Is(err, context.DeadlineExceeded):
			f.cfg.Metrics.Challenges.WithLabelValues("silent").Inc()
			f.log.Info("agent silent to a liveness challenge", "node", name, "addr", addr, "err", err)
		default:
			f.cfg.Metrics.Challenges.WithLabelValues("failed").Inc()
			f.log.Warn("liveness challenge failed", "node", name, "addr", addr, "err", err)
		}
		if ctx.Err() == nil {
			f.queue.Add(name)
		}
	}()
}

// agentAddr is where node's agent answers liveness challenges: its
// InternalIP, as the API gives it, at the gossip port; "" when the Node
// (nil: gone) has none.
func (f *Fencer) agentAddr(node *corev1.Node) string {
	if node == nil || taint.InternalIP(node) == "" {
		return ""
	}
	return net.JoinHostPort(taint.InternalIP(node), strconv.Itoa(f.cfg.GossipPort))
}

// leaseTarget maps a Lease in the lease namespace to the node it is
// about: a power Lease, an agent key Lease or a fence order ("" for
// others).
func leaseTarget(l *coordinationv1.Lease) string {
	for _, prefix := range []string{LeasePrefix, publish.LeasePrefix, publish.OrderLeasePrefix} {
		if len(l.Name) > len(prefix) && l.Name[:len(prefix)] == prefix {
			return l.Name[len(prefix):]
		}
	}
	return ""
}
