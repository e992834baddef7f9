package fencing

import "fenced.io/fenced/pkg/identity/publish"

// A node's key Lease names the key its agent signs with, but only until
// the agent restarts: every run makes a fresh key, and the new run's key
// reaches the Lease only when the API server takes it. In between, the
// Lease still holds the previous run's key, and when the host stayed up
// in the same boot (a shutdown cancelled after the agent had left), that
// run's last words — shutdown-complete and a leave notice, genuinely
// signed — would pass every check if replayed: a running node tainted.
//
// The new run shows the key is stale before its own key lands: it is a
// member of the same boot whose statements do not verify against the
// Lease key — it signs nothing until its key is published (pkg/agent), or,
// as agents before that did, signs with a key the Lease does not hold. So
// from the first such statement this fencer stops trusting that Lease key
// until the Lease holds another one (or the key's holder answers a
// liveness challenge with it: only a live process has its private half).
//
// Anyone holding the gossip key can send such a statement in any node's
// name too. That only takes trust away: the node's clean shutdowns then
// need the BMC (or an operator's confirm) until its agent publishes a new
// key, which is slower but never unsafe.

// forgedStaleKey: a statement that verifies against the node's Lease key
// after a member of the same boot showed that key is no longer the one its
// agent signs with (a replay of an earlier run's words).
const forgedStaleKey = "stale-key"

// keyTrust is what the fencer learned about nodes' Lease keys from their
// members' statements; guarded by Fencer.mu, maps made on first use.
type keyTrust struct {
	// stale holds, per node, the Lease key (identity.PublicKey.String)
	// this fencer no longer trusts.
	stale map[string]string
	// unsignedUnder holds, per node whose member has spoken without a
	// signature since it last spoke with a valid one, the Lease key in
	// place when this fencer first heard it ("" for none). A key that
	// reached the Lease after that is presumably that run's own, published
	// late: its run signs with it as soon as it knows (Ring.UseKey), so
	// its unsigned statements in between prove nothing against it.
	unsignedUnder map[string]string
}

// sawUnverified is told that node's member, speaking for boot, made a
// statement that does not verify against k (none when !haveKey): signed
// says whether it carried a signature at all. A member of the Lease key's
// own boot that does not sign with it shows that key stale.
func (f *Fencer) sawUnverified(node string, k publish.Key, haveKey bool, boot string, signed bool) {
	key := ""
	if haveKey {
		key = k.Key.String()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	t := &f.keys
	if !signed {
		if t.unsignedUnder == nil {
			t.unsignedUnder = map[string]string{}
		}
		under, heard := t.unsignedUnder[node]
		if !heard {
			t.unsignedUnder[node], under = key, key
		}
		if under != key {
			return // the Lease changed while its member was unsigned
		}
	}
	if !haveKey || boot != k.BootID || t.stale[node] == key {
		return
	}
	if t.stale == nil {
		t.stale = map[string]string{}
	}
	t.stale[node] = key
	f.log.Info("no longer trusting the node's published key: a member of the same boot does not sign with it",
		"node", node, "boot", boot, "key", key, "signed", signed,
		"why", "the key is an earlier run's; its words, replayed, count for nothing until the Lease holds the new run's key")
}

// sawVerified is told that node's member spoke with a valid signature of
// a trusted key.
func (f *Fencer) sawVerified(node string) {
	f.mu.Lock()
	delete(f.keys.unsignedUnder, node)
	f.mu.Unlock()
}

// keyStale reports whether k, node's Lease key, is one this fencer no
// longer trusts; a mark for a key the Lease no longer holds is dropped.
func (f *Fencer) keyStale(node string, k publish.Key) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	key, ok := f.keys.stale[node]
	if ok && key != k.Key.String() {
		delete(f.keys.stale, node)
		return false
	}
	return ok
}

// keyProven is told that node's agent answered a liveness challenge with a
// proof signed by k, its Lease key, for the Lease's boot: the key's
// private half is in a live process, so the key is trusted again.
func (f *Fencer) keyProven(node string, k publish.Key) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.keys.stale[node] == k.Key.String() {
		delete(f.keys.stale, node)
		f.log.Info("trusting the node's published key again: its agent proved it holds it", "node", node, "key", k.Key.String())
	}
}
