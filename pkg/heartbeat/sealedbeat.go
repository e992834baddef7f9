package heartbeat

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"fmt"
	"slices"
	"time"
)

// Sealed beats: a beat on a path of its own beside memberlist's packets.
// Sent through memberlist, each of the 5000 beats a second a fencer of a
// 1000-node cluster takes is a packet memberlist decrypts with a cipher it
// builds for that packet (for each key it tries), then hands from its
// reader goroutine to its handler's; that was most of a fencer's CPU at
// rest. A sealed beat is one datagram the transport's reader opens itself,
// with ciphers built once per key, and counts where it read it.
//
// Its form: the tag sealedBeatTag, a nonce of 12 random bytes, then the
// sender's name sealed with AES-GCM under a gossip key — the key the ring
// encrypts with, as memberlist would — authenticating the tag and the
// ring's label besides: a beat of another cluster, or sealed with no key
// of this ring, opens with none of its keys and is dropped. What holds
// for a beat through memberlist holds for a sealed one: anyone with the
// gossip key can send one in any member's name, and anyone can replay one
// seen on the wire (memberlist's packets have no replay protection
// either); either can only keep a silent member looking alive for longer,
// bounded by Kubernetes' NotReady, and no beat leads to a taint or a power
// action.
//
// An agent seals its beats only for a fencer whose Meta says it reads
// them (Meta.SealedBeats), so that a fencer of an earlier version, which
// would take a sealed beat for a broken packet, keeps getting memberlist
// beats during a rolling upgrade.

// sealedBeatTag is a sealed beat's first byte. No packet of memberlist
// starts with it: a labelled packet starts with 244, an encrypted one
// with its encryption version (0 or 1), a plain one with a message type
// (below 32).
const sealedBeatTag byte = 0xFB

// beatNonceLen is AES-GCM's standard nonce size, beatOverhead what a
// sealed beat carries besides the name.
const (
	beatNonceLen = 12
	beatOverhead = 1 + beatNonceLen + 16
)

// beatKeys are the ciphers of a gossip keyring's keys, the one it
// encrypts with first, with the associated data every sealed beat of the
// ring authenticates: the tag and the label. A Ring keeps one for its
// keyring as it stands (refreshBeatKeys).
type beatKeys struct {
	keys  [][]byte
	aeads []cipher.AEAD
	ad    []byte
}

func newBeatKeys(keys [][]byte, label string) (*beatKeys, error) {
	if len(keys) == 0 {
		return nil, fmt.Errorf("heartbeat: no gossip key to seal beats with")
	}
	k := &beatKeys{ad: append([]byte{sealedBeatTag}, label...)}
	for _, key := range keys {
		block, err := aes.NewCipher(key)
		if err != nil {
			return nil, fmt.Errorf("heartbeat: gossip key %s: %w", Fingerprint(key), err)
		}
		aead, err := cipher.NewGCM(block)
		if err != nil {
			return nil, fmt.Errorf("heartbeat: gossip key %s: %w", Fingerprint(key), err)
		}
		k.keys, k.aeads = append(k.keys, slices.Clone(key)), append(k.aeads, aead)
	}
	return k, nil
}

// same reports whether k was built of keys, in that order.
func (k *beatKeys) same(keys [][]byte) bool {
	return slices.EqualFunc(k.keys, keys, func(a, b []byte) bool { return string(a) == string(b) })
}

// seal appends to dst a sealed beat in name's name, under the key the
// keyring encrypts with.
func (k *beatKeys) seal(dst []byte, name string) []byte {
	dst = append(dst, sealedBeatTag)
	n := len(dst)
	dst = append(dst, make([]byte, beatNonceLen)...)
	_, _ = rand.Read(dst[n:]) // crypto/rand's Read does not fail
	return k.aeads[0].Seal(dst, dst[n:], []byte(name), k.ad)
}

// open appends to dst the name b, a sealed beat, was sent in, and reports
// whether any of the keys opened it. b is not kept.
func (k *beatKeys) open(dst, b []byte) ([]byte, bool) {
	if len(b) <= beatOverhead || len(b) > beatOverhead+maxNameLen || b[0] != sealedBeatTag {
		return dst, false
	}
	nonce, sealed := b[1:1+beatNonceLen], b[1+beatNonceLen:]
	for _, aead := range k.aeads {
		if name, err := aead.Open(dst, nonce, sealed, k.ad); err == nil {
			return name, true
		}
	}
	return dst, false
}

// SealBeat is a sealed beat in name's name under key for a ring labelled
// label: what an agent sends, and what test beds forge with a gossip key.
func SealBeat(key []byte, label, name string) ([]byte, error) {
	k, err := newBeatKeys([][]byte{key}, label)
	if err != nil {
		return nil, err
	}
	return k.seal(nil, name), nil
}

// refreshBeatKeys builds the ring's beat ciphers anew when its keyring's
// keys changed (or were never built): at New and after every change of
// the keyring (applyKeyring).
func (r *Ring) refreshBeatKeys() {
	if r.keyring == nil {
		return
	}
	keys := r.keyring.GetKeys()
	if k := r.beatKeys.Load(); k != nil && k.same(keys) {
		return
	}
	k, err := newBeatKeys(keys, r.mc.Label)
	if err != nil {
		// memberlist took these keys, so AES takes them: not reached.
		r.log.Error("gossip: cannot seal beats with the keyring's keys; beats go through memberlist", "err", err)
		r.beatKeys.Store(nil)
		return
	}
	r.beatKeys.Store(k)
}

// sealedBeatReceived takes a sealed beat the transport read at at, in the
// transport's reader goroutine of a fencer's ring (Join): opened, it
// counts as its sender's beat (beatReceived). It reports whether any key
// opened it (the transport says those dropped).
func (r *Ring) sealedBeatReceived(b []byte, at time.Time) bool {
	k := r.beatKeys.Load()
	var name []byte
	ok := false
	if k != nil {
		name, ok = k.open(r.beatName[:0], b)
		r.beatName = name[:0]
	}
	if !ok {
		r.beatsRefused.Add(1)
		return false
	}
	r.beatsSealed.Add(1)
	r.beatReceived(string(name), at)
	return true
}
