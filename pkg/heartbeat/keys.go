package heartbeat

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// The ring's gossip keys and their rotation.
//
// memberlist encrypts every packet and stream with the first key of its
// keyring (the primary) and decrypts with each key of the keyring in turn
// until one fits. A member that lacks the key a packet was sealed with
// drops it: the keys a member encrypts with must be in every member's
// keyring first. So a key is rotated in three steps, each taken on every
// agent before the next: add the new key as a secondary (everyone can
// then decrypt it), make it the primary (everyone encrypts with it), remove
// the old one (nobody encrypts with it any more).
//
// Each step arrives at each agent on its own time (a Kubernetes Secret
// reaches each node's kubelet within a minute or so), and an operator may
// take the second step before every agent has taken the first. memberlist
// alone would then split the ring: the agents that switched seal with a key
// the late ones cannot open, and those drop their probes' answers and
// suspect them. So the ring advertises, in its Meta, the fingerprints of
// the keys it holds, and an agent encrypts with its configured primary only
// once every alive member says it holds it; until then it keeps encrypting
// with a key every member holds (its current one while that stays
// configured). See planKeys.
//
// The third step taken too early is the mirror image: a member whose files
// still name the old key primary keeps encrypting with it, and those that
// dropped it would drop its packets. So a key the files no longer hold
// stays in the keyring, to decrypt only and advertised as leaving, while an
// alive member still encrypts with it — for at most keyRetention, since
// that member's word is gossip, which every holder of the leaving key (a
// leaked one, say) can forge. A member seeing the others leave a key
// follows them to one they all hold (planKeys). See retainKeys.

// MaxKeys bounds a KeySet: memberlist tries the keys of its keyring in
// turn on every packet it receives, and each key's fingerprint travels in
// the Meta. A rotation needs two.
const MaxKeys = 4

// KeySet is the ring's gossip keys: Primary encrypts and authenticates
// what this agent sends; every key, Primary and Secondary, decrypts what
// it receives (AES-GCM; 16, 24 or 32 bytes each).
type KeySet struct {
	Primary   []byte
	Secondary [][]byte
}

// keys returns every key of s, Primary first.
func (s KeySet) keys() [][]byte {
	return append([][]byte{s.Primary}, s.Secondary...)
}

// Validate checks s: a primary key, every key 16, 24 or 32 bytes, no key
// twice, at most MaxKeys keys. Its errors name keys by Fingerprint.
func (s KeySet) Validate() error {
	if len(s.Primary) == 0 {
		return errors.New("heartbeat: no gossip encryption key: provide one (16, 24 or 32 bytes) or pass --insecure-gossip")
	}
	if n := 1 + len(s.Secondary); n > MaxKeys {
		return fmt.Errorf("heartbeat: %d gossip keys; at most %d (a rotation needs two)", n, MaxKeys)
	}
	for i, k := range s.keys() {
		switch len(k) {
		case 16, 24, 32:
		default:
			if i == 0 {
				return fmt.Errorf("heartbeat: gossip key is %d bytes; want 16, 24 or 32", len(k))
			}
			return fmt.Errorf("heartbeat: secondary gossip key %d is %d bytes; want 16, 24 or 32", i, len(k))
		}
		for _, earlier := range s.keys()[:i] {
			if bytes.Equal(earlier, k) {
				return fmt.Errorf("heartbeat: gossip key %s is given twice", Fingerprint(k))
			}
		}
	}
	return nil
}

// Equal reports whether s and o hold the same keys with the same primary
// (the order of the secondaries does not matter).
func (s KeySet) Equal(o KeySet) bool {
	if !bytes.Equal(s.Primary, o.Primary) || len(s.Secondary) != len(o.Secondary) {
		return false
	}
	for _, k := range s.Secondary {
		if !slices.ContainsFunc(o.Secondary, func(x []byte) bool { return bytes.Equal(x, k) }) {
			return false
		}
	}
	return true
}

// String names the keys by fingerprint, never by their bytes.
func (s KeySet) String() string {
	if len(s.Primary) == 0 {
		return "no key"
	}
	out := "primary " + Fingerprint(s.Primary)
	if len(s.Secondary) > 0 {
		out += ", secondary " + strings.Join(fingerprints(s.Secondary), " ")
	}
	return out
}

// Fingerprint names a gossip key in logs, metrics and the Meta without
// giving it away: 48 bits of a SHA-256 of it, which tell the few keys of
// a rotation apart and help nobody guess a key of 128 bits or more.
func Fingerprint(key []byte) string {
	h := sha256.Sum256(append([]byte("fenced gossip key\x00"), key...))
	return base64.RawURLEncoding.EncodeToString(h[:6])
}

func fingerprints(keys [][]byte) []string {
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = Fingerprint(k)
	}
	return out
}

// keysText is the Meta's Keys field for a keyring: the fingerprints of
// its keys, the one it encrypts with first, separated by commas; a key
// in leaving (kept to decrypt only, retainKeys) is marked with a leading
// "-", and other members count it as not held.
func keysText(keyring [][]byte, leaving [][]byte) string {
	out := make([]string, len(keyring))
	for i, k := range keyring {
		out[i] = Fingerprint(k)
		if slices.ContainsFunc(leaving, func(x []byte) bool { return bytes.Equal(x, k) }) {
			out[i] = "-" + out[i]
		}
	}
	return strings.Join(out, ",")
}

// maxKeysText bounds Meta.Keys as received: room for twice MaxKeys
// fingerprints, each maybe marked leaving, for agents of later versions.
const maxKeysText = 2 * MaxKeys * 10

// holds reports whether a member whose Meta.Keys is text can decrypt the
// key of fingerprint fp, and will go on to. A member that advertises no
// keys (an agent of an earlier version, or one without encryption) holds
// none that this agent can count on.
func holds(text, fp string) bool {
	if text == "" {
		return false
	}
	return slices.Contains(strings.Split(text, ","), fp)
}

// encryptsWith is the fingerprint of the key a member whose Meta.Keys is
// text encrypts with ("" when it advertises none).
func encryptsWith(text string) string {
	first, _, _ := strings.Cut(text, ",")
	return first
}

// keyRetention bounds how long a key the files dropped keeps decrypting
// for members that still encrypt with it. A member switches within a
// gossip round of seeing the others leave the key; the bound is for a
// member that says so falsely.
const keyRetention = 30 * time.Second

// retainKeys returns the keys of the keyring current that configured no
// longer holds but that an alive member (peers: name → Meta.Keys) still
// encrypts with, each for at most keyRetention after it left the
// configuration, and when to look again (0: no key is retained); the
// keyring stays within MaxKeys, so that the Meta's Keys does too. left
// records when each key (by fingerprint) left: retainKeys adds the keys
// leaving now and forgets those gone or configured again.
func retainKeys(current [][]byte, configured KeySet, left map[string]time.Time, peers map[string]string, now time.Time) (keep [][]byte, recheck time.Duration) {
	inUse := map[string]bool{}
	for _, text := range peers {
		inUse[encryptsWith(text)] = true
	}
	stillLeaving := map[string]bool{}
	for _, k := range current {
		if slices.ContainsFunc(configured.keys(), func(x []byte) bool { return bytes.Equal(x, k) }) {
			continue
		}
		fp := Fingerprint(k)
		since, ok := left[fp]
		if !ok {
			since, left[fp] = now, now
		}
		remaining := keyRetention - now.Sub(since)
		if !inUse[fp] || remaining <= 0 || len(keep)+len(configured.keys()) >= MaxKeys {
			continue
		}
		stillLeaving[fp] = true
		keep = append(keep, k)
		if recheck == 0 || remaining < recheck {
			recheck = remaining
		}
	}
	for fp := range left {
		if !stillLeaving[fp] {
			delete(left, fp)
		}
	}
	return keep, recheck
}

// keyPlan is the key an agent should encrypt with, given its key files
// and what the other members hold.
type keyPlan struct {
	// encrypt is the key to seal packets with: one of the configured keys.
	encrypt []byte
	// waitFor names the alive members that cannot decrypt the configured
	// primary yet, sorted; empty when the primary is what encrypts, or
	// when it encrypts although they cannot decrypt it (lacking holds all
	// of them then).
	waitFor []string
	// lacking is true when no configured key is held by every alive
	// member: the primary encrypts, and the members in waitFor drop what
	// this agent sends until they read the same key files.
	lacking bool
}

// planKeys picks the key to encrypt with: the first of the configured
// primary, the key encrypting now (if still configured) and the configured
// secondaries, in that order, that every alive member (peers: name → its
// Meta.Keys, this agent left out) holds; else the configured primary. The
// configured set is the keyring whatever this says: only which of its
// keys encrypts is decided here.
//
// So the second step of a rotation taken too early keeps the old key
// encrypting until the last member has the new one, and a member that
// still has the old key as its configured primary when the others have
// dropped it (a late third step) follows them to the new one.
func planKeys(configured KeySet, current []byte, peers map[string]string) keyPlan {
	candidates := [][]byte{configured.Primary}
	if current != nil && slices.ContainsFunc(configured.keys(), func(k []byte) bool { return bytes.Equal(k, current) }) {
		candidates = append(candidates, current)
	}
	candidates = append(candidates, configured.Secondary...)
	var lackPrimary []string
	fp := Fingerprint(configured.Primary)
	for name, text := range peers {
		if !holds(text, fp) {
			lackPrimary = append(lackPrimary, name)
		}
	}
	slices.Sort(lackPrimary)
	for _, k := range candidates {
		fp := Fingerprint(k)
		all := true
		for _, text := range peers {
			if !holds(text, fp) {
				all = false
				break
			}
		}
		if all {
			plan := keyPlan{encrypt: k}
			if !bytes.Equal(k, configured.Primary) {
				plan.waitFor = lackPrimary
			}
			return plan
		}
	}
	return keyPlan{encrypt: configured.Primary, waitFor: lackPrimary, lacking: true}
}

// keyringSteps are the memberlist Keyring calls that turn the keyring
// current (its primary first) into want's keys encrypting with encrypt:
// AddKey for each key to add, then UseKey(encrypt) when use, then
// RemoveKey for each key to remove, in that order — a key is never
// removed while it encrypts, and the one that is to encrypt is in the
// keyring before it does.
//
// The removals come last to first: memberlist's RemoveKey closes the gap
// in the slice that its readers (every packet's decryption) may hold, in
// place, unless the key removed is the last. After a rotation's switch the
// old key is the last, so the third step moves nothing under a reader.
func keyringSteps(current, want [][]byte, encrypt []byte) (add [][]byte, use bool, remove [][]byte) {
	has := func(set [][]byte, k []byte) bool {
		return slices.ContainsFunc(set, func(x []byte) bool { return bytes.Equal(x, k) })
	}
	for _, k := range want {
		if !has(current, k) {
			add = append(add, k)
		}
	}
	use = len(current) == 0 || !bytes.Equal(current[0], encrypt)
	for i := len(current) - 1; i >= 0; i-- {
		if !has(want, current[i]) {
			remove = append(remove, current[i])
		}
	}
	return add, use, remove
}
