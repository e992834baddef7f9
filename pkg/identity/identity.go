// Package identity lets an agent speak for its own node in a way no other
// node can imitate.
//
// The gossip key is shared by every agent, so memberlist authenticates
// nothing per member: any key holder can say anything in any member's name
// (docs/design.md §2). What a node says about itself that can lead to a taint or
// a power action — "my shutdown got past the point where no CSI volume is
// mounted", "I am leaving", "I am alive" — is therefore signed with a key
// of that agent's own: an Ed25519 key pair made fresh each time the agent
// starts, whose public half the agent publishes through the Kubernetes API
// in an object only its own node's identity may write (see
// pkg/identity/publish). A fencer checks each Statement against that
// published key and the node's current boot; nothing shared by all nodes
// takes part in the check.
//
// This package is pure: the key, the statements, their canonical bytes and
// the signature checks, with no I/O.
package identity

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"fenced.io/fenced/pkg/vocab"
)

// Kind says what a Statement is about. The kind is part of the signed
// bytes, so a signature over one kind of statement is never valid for
// another.
type Kind uint8

// Statement kinds.
const (
	// KindState: the agent announces its host's state (running,
	// shutting-down, shutdown-complete); carried in gossip metadata.
	KindState Kind = 1
	// KindLeave: the agent is leaving the ring on purpose; carried in its
	// leave notice.
	KindLeave Kind = 2
	// KindProof: the agent answers a fencer's liveness challenge; the
	// challenge's nonce makes every proof fresh.
	KindProof Kind = 3
	// KindArmed: the agent armed its node's watchdog (Armed says how) and
	// pets it only while it confirms there is no fence order for its boot;
	// carried on its key Lease (docs/design.md §10).
	KindArmed Kind = 4
)

// String names the kind for logs.
func (k Kind) String() string {
	switch k {
	case KindState:
		return "state"
	case KindLeave:
		return "leave"
	case KindProof:
		return "proof"
	case KindArmed:
		return "armed"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Statement is one thing an agent says about its own node. Seq orders the
// statements made with one key (it starts at 1 and only grows), so that a
// replay of an older statement can be told from the latest one.
type Statement struct {
	Kind   Kind
	Node   string
	BootID string
	// State is the announced state (KindState, KindProof).
	State vocab.Announcement
	Seq   uint64
	// Nonce is the challenge a proof answers (KindProof only).
	Nonce []byte
	// Armed is the watchdog an armed statement is about (KindArmed only).
	Armed Armed
}

// Armed is what an agent states of the watchdog it armed: the timeout W
// its driver runs with, the confirm period T it pets within, and the
// device as its driver names itself, a software watchdog said as such.
type Armed struct {
	Timeout, Confirm time.Duration
	Device           string
	Software         bool
}

// domain separates fenced's signatures from any other use of Ed25519.
const domain = "fenced.io/statement/v1"

// Bytes is the canonical encoding that is signed: the domain, then every
// field, each length-prefixed, so that no two different statements share
// an encoding.
func (s Statement) Bytes() []byte {
	b := make([]byte, 0, 64+len(s.Node)+len(s.BootID)+len(s.State)+len(s.Nonce))
	field := func(p []byte) {
		b = binary.BigEndian.AppendUint32(b, uint32(len(p)))
		b = append(b, p...)
	}
	field([]byte(domain))
	b = append(b, byte(s.Kind))
	field([]byte(s.Node))
	field([]byte(s.BootID))
	field([]byte(string(s.State)))
	b = binary.BigEndian.AppendUint64(b, s.Seq)
	field(s.Nonce)
	if s.Kind == KindArmed {
		// Only armed statements carry these: the bytes of every other
		// kind are as they always were.
		b = binary.BigEndian.AppendUint64(b, uint64(s.Armed.Timeout))
		b = binary.BigEndian.AppendUint64(b, uint64(s.Armed.Confirm))
		field([]byte(s.Armed.Device))
		software := byte(0)
		if s.Armed.Software {
			software = 1
		}
		b = append(b, software)
	}
	return b
}

// Key is an agent's signing key for one run. The private half never leaves
// the process.
type Key struct {
	priv ed25519.PrivateKey
	pub  ed25519.PublicKey
}

// NewKey makes a fresh key pair.
func NewKey() (*Key, error) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("identity: generate key: %w", err)
	}
	return &Key{priv: priv, pub: pub}, nil
}

// Public is the key others verify with.
func (k *Key) Public() PublicKey { return PublicKey(k.pub) }

// Sign signs s.
func (k *Key) Sign(s Statement) []byte { return ed25519.Sign(k.priv, s.Bytes()) }

// PublicKey is an agent's published Ed25519 public key.
type PublicKey []byte

// Verify reports whether sig is pub's signature of s.
func (pub PublicKey) Verify(s Statement, sig []byte) bool {
	if len(pub) != ed25519.PublicKeySize || len(sig) != ed25519.SignatureSize {
		return false
	}
	return ed25519.Verify(ed25519.PublicKey(pub), s.Bytes(), sig)
}

// String is the key as it is published: "ed25519:" and standard base64.
func (pub PublicKey) String() string { return keyPrefix + base64.StdEncoding.EncodeToString(pub) }

const keyPrefix = "ed25519:"

// ErrBadPublicKey is wrapped by ParsePublicKey's errors.
var ErrBadPublicKey = errors.New("identity: malformed public key")

// ParsePublicKey parses a key written by PublicKey.String.
func ParsePublicKey(s string) (PublicKey, error) {
	if len(s) < len(keyPrefix) || s[:len(keyPrefix)] != keyPrefix {
		return nil, fmt.Errorf("%w: want %q and base64", ErrBadPublicKey, keyPrefix)
	}
	text := s[len(keyPrefix):]
	b, err := base64.StdEncoding.Strict().DecodeString(text)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadPublicKey, err)
	}
	// One text form per key: the decoder skips line breaks, so compare
	// with the canonical encoding.
	if base64.StdEncoding.EncodeToString(b) != text {
		return nil, fmt.Errorf("%w: not in canonical base64", ErrBadPublicKey)
	}
	if len(b) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("%w: %d bytes, want %d", ErrBadPublicKey, len(b), ed25519.PublicKeySize)
	}
	return PublicKey(b), nil
}
