package heartbeat

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"fenced.io/fenced/pkg/vocab"
)

// ErrInsecure is returned by SetKeys on a ring without encryption.
var ErrInsecure = errors.New("heartbeat: gossip is not encrypted (--insecure-gossip): there are no keys to change")

// SetKeys makes keys the ring's gossip keys from now on, in place: the
// memberlist keyring gains the new keys and loses those keys no longer
// holds (but for one a member still encrypts with, kept to decrypt for
// at most keyRetention: retainKeys), and keys' primary encrypts as soon
// as every alive member can decrypt it (planKeys) — until then another
// key of keys that all of them hold does. It logs what changed, by
// fingerprint.
// keys must share a key with the ones in use for the ring to stay whole
// while the other agents read theirs: the rotation is add, switch,
// remove (docs/operations.md, "Rotate the gossip key").
func (r *Ring) SetKeys(keys KeySet) error {
	if r.keyring == nil {
		return ErrInsecure
	}
	if err := keys.Validate(); err != nil {
		return err
	}
	r.keysMu.Lock()
	prev := r.keysWanted
	r.keysWanted = keys
	r.keysMu.Unlock()
	if !prev.Equal(keys) {
		r.log.Debug("gossip keys set", "keys", keys.String(), "before", prev.String())
	}
	r.reconcileKeys()
	return nil
}

// KeyringState is what a Ring's keyring holds, by fingerprint.
type KeyringState struct {
	// Encrypt is the key that seals what this agent sends.
	Encrypt string
	// Decrypt are the other keys it opens what it receives with, Leaving
	// among them.
	Decrypt []string
	// Leaving are the keys no longer set that it keeps decrypting with
	// while a member still encrypts with them (at most keyRetention).
	Leaving []string
	// AsSet is true when the keyring is the set given to New or SetKeys
	// with its primary encrypting; false while a member cannot decrypt
	// the primary yet or still encrypts with a key that left.
	AsSet bool
}

// Keyring returns the keys in use, and whether they are the ones last
// set; the zero KeyringState without encryption.
func (r *Ring) Keyring() KeyringState {
	if s := r.keysState.Load(); s != nil {
		return *s
	}
	return KeyringState{}
}

// storeKeyringState records the keyring's state for Keyring.
func (r *Ring) storeKeyringState(leaving [][]byte, asSet bool) {
	keys := fingerprints(r.keyring.GetKeys())
	r.keysState.Store(&KeyringState{Encrypt: keys[0], Decrypt: keys[1:], Leaving: fingerprints(leaving), AsSet: asSet})
}

// wakeKeys asks keysLoop to look at the keys again: a member changed.
// It never blocks (memberlist's callbacks call it).
func (r *Ring) wakeKeys() {
	if r.keyring == nil {
		return
	}
	select {
	case r.keysWake <- struct{}{}:
	default:
	}
}

// keysLoop reconciles the keyring with what the members hold whenever one
// of them changes, until the ring shuts down. It runs from Join: the
// callbacks that wake it hold memberlist's lock, under which the ring
// must not gossip its Meta.
func (r *Ring) keysLoop() {
	for {
		select {
		case <-r.keysWake:
			r.reconcileKeys()
		case <-r.done:
			return
		}
	}
}

// reconcileKeys makes memberlist's keyring the keys set, encrypting with
// the key planKeys picks from what the alive members advertise, plus the
// keys retainKeys keeps for members still encrypting with them; it gossips
// this agent's Meta when its keyring changed.
func (r *Ring) reconcileKeys() {
	r.keysMu.Lock()
	defer r.keysMu.Unlock()
	want := r.keysWanted
	current := slices.Clone(r.keyring.GetKeys())
	peers := map[string]string{}
	r.mu.Lock()
	for _, m := range r.members {
		if m.Name != r.self && m.State == vocab.MemberAlive {
			peers[m.Name] = m.Meta.Keys
		}
	}
	r.mu.Unlock()
	var encrypting []byte
	if len(current) > 0 {
		encrypting = current[0]
	}
	plan := planKeys(want, encrypting, peers)
	leaving, recheck := retainKeys(current, want, r.keysLeft, peers, time.Now())
	if recheck > 0 {
		// The bound runs out with no member change to wake the loop.
		if r.keysRecheck == nil {
			r.keysRecheck = time.AfterFunc(recheck, r.wakeKeys)
		} else {
			r.keysRecheck.Reset(recheck)
		}
	}
	add, use, remove := keyringSteps(current, append(want.keys(), leaving...), plan.encrypt)
	if err := r.applyKeyring(add, use, remove, plan.encrypt); err != nil {
		// Cannot happen: every key was validated, and the key to encrypt
		// with is added before it is used.
		r.log.Error("gossip keyring not changed", "err", err)
		return
	}
	r.storeKeyringState(leaving, bytes.Equal(plan.encrypt, want.Primary) && len(leaving) == 0)
	r.logKeyPlan(plan, want)
	text := keysText(r.keyring.GetKeys(), leaving)
	if text == r.keysAdvertised {
		return
	}
	now := r.keyring.GetKeys()
	r.log.Info("gossip keyring changed", "encrypt", Fingerprint(now[0]),
		"decrypt", strings.Join(fingerprints(now[1:]), " "), "leaving", strings.Join(fingerprints(leaving), " "),
		"added", strings.Join(fingerprints(add), " "), "removed", strings.Join(fingerprints(remove), " "))
	r.keysAdvertised = text
	r.advertiseKeys(text)
}

// applyKeyring makes the calls keyringSteps listed.
func (r *Ring) applyKeyring(add [][]byte, use bool, remove [][]byte, encrypt []byte) error {
	defer r.refreshBeatKeys() // whatever was applied of them
	for _, k := range add {
		if err := r.keyring.AddKey(k); err != nil {
			return fmt.Errorf("add %s: %w", Fingerprint(k), err)
		}
	}
	if use {
		if err := r.keyring.UseKey(encrypt); err != nil {
			return fmt.Errorf("encrypt with %s: %w", Fingerprint(encrypt), err)
		}
	}
	for _, k := range remove {
		if err := r.keyring.RemoveKey(k); err != nil {
			return fmt.Errorf("remove %s: %w", Fingerprint(k), err)
		}
	}
	return nil
}

// logKeyPlan says, once per change, why the primary set does not
// encrypt: which members cannot decrypt it yet.
func (r *Ring) logKeyPlan(plan keyPlan, want KeySet) {
	text := ""
	if len(plan.waitFor) > 0 {
		text = fmt.Sprintf("%s %s %v %v", Fingerprint(plan.encrypt), Fingerprint(want.Primary), plan.lacking, plan.waitFor)
	}
	if text == r.keysWaitLog {
		return
	}
	r.keysWaitLog = text
	members := make([]any, len(plan.waitFor))
	for i, n := range plan.waitFor {
		members[i] = PeerText(n)
	}
	switch {
	case text == "":
		return
	case plan.lacking:
		r.log.Warn("gossip: encrypting with the primary key although members cannot decrypt it: they share no key with this agent's",
			"primary", Fingerprint(want.Primary), "members", members,
			"why", "they drop what this agent sends until they read the same key files; a rotation adds the new key everywhere before it switches")
	default:
		r.log.Info("gossip: encrypting with another key until every member can decrypt the primary",
			"encrypt", Fingerprint(plan.encrypt), "primary", Fingerprint(want.Primary), "waitingFor", members)
	}
}

// advertiseKeys puts keys (keysText) in this agent's Meta and gossips it.
// The Meta keeps its signature: Keys is not part of what is signed.
func (r *Ring) advertiseKeys(keys string) {
	r.announceMu.Lock()
	defer r.announceMu.Unlock()
	r.metaMu.Lock()
	meta := r.meta
	meta.Keys = keys
	b, err := meta.Encode()
	if err == nil {
		r.meta, r.metaBytes = meta, b
	}
	r.metaMu.Unlock()
	if err != nil {
		r.log.Error("gossip keyring changed but cannot be advertised", "err", err)
		return
	}
	r.lifeMu.Lock()
	closed, ml := r.closed, r.ml.Load()
	r.lifeMu.Unlock()
	if closed || ml == nil {
		return // before Join, the join carries it
	}
	if err := ml.UpdateNode(AnnounceTimeout); err != nil {
		r.log.Warn("gossip keyring change advertised late", "err", err)
	}
}
