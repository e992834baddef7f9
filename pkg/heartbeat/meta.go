package heartbeat

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/hashicorp/memberlist"

	"fenced.io/fenced/pkg/identity"
	"fenced.io/fenced/pkg/vocab"
)

// MetaVersion is the version of the Meta format this package writes.
//
// Versions only ever add fields: a field keeps its name and meaning for
// good, so an agent can read the fields it knows from a newer agent's Meta
// during a rolling upgrade and ignore the rest. Version 2 adds Keys,
// version 3 SealedBeats.
const MetaVersion = 3

// MaxMetaSize is the largest encoded Meta memberlist carries: its node
// metadata limit.
const MaxMetaSize = memberlist.MetaMaxSize

// Roles of an agent.
const (
	// RoleObserver is an agent that only gossips and announces its host's
	// state.
	RoleObserver = "observer"
	// RoleFencer is an agent that also holds BMC credentials and fences.
	RoleFencer = "fencer"
)

// Meta is what every member publishes about itself, carried as
// memberlist node metadata. It is encoded as JSON with short keys and a
// version field, and must fit MaxMetaSize bytes.
type Meta struct {
	// Version is the format version (MetaVersion when written by this
	// package).
	Version int `json:"v"`
	// Node is the Kubernetes node name (the same as the member name).
	Node string `json:"node,omitempty"`
	// BootID is the host's boot ID (/proc/sys/kernel/random/boot_id): a new
	// one after a member comes back means the host rebooted.
	BootID string `json:"boot,omitempty"`
	// Role is RoleObserver or RoleFencer. It is for people reading `fenced
	// status`: any key holder can claim any role, so nothing is decided on
	// it (a fencer is a Node labelled as one).
	Role string `json:"role,omitempty"`
	// State is what the agent announces about its host.
	State vocab.Announcement `json:"state,omitempty"`
	// Agent is the fenced version string.
	Agent string `json:"agent,omitempty"`
	// Keys are the fingerprints (Fingerprint) of the gossip keys this
	// member can decrypt, the one it encrypts with first, separated by
	// commas: other members encrypt with a new key only once every member
	// holds it (keys.go). Empty for a member without encryption or of an
	// earlier version. Not signed: it decides no more than which of its
	// own keys a member encrypts with, and a forgery costs at worst the
	// gossip a split would, suspicions and power reads, never a taint.
	Keys string `json:"keys,omitempty"`
	// SealedBeats says that this member reads sealed beats (sealedbeat.go):
	// agents send it their beats so rather than through memberlist. Not
	// signed, as Keys: a forgery costs at worst a fencer's beats of a
	// member, the power reads a silence costs, never a taint.
	SealedBeats bool `json:"sbeats,omitempty"`
	// Seq and Sig sign Node, BootID and State with the agent's own key
	// (identity.KindState): the announcement is the node's own word only
	// when Sig verifies against the key its node published. Seq grows with
	// every statement the key signs, so an older one replayed is told from
	// the latest. Sig is standard base64 (a string keeps Meta comparable).
	Seq uint64 `json:"seq,omitempty"`
	Sig string `json:"sig,omitempty"`
}

// Statement is what Sig signs.
func (m Meta) Statement() identity.Statement {
	return identity.Statement{Kind: identity.KindState, Node: m.Node, BootID: m.BootID, State: m.State, Seq: m.Seq}
}

// Signature decodes Sig (nil when absent or malformed).
func (m Meta) Signature() []byte { return decodeSig(m.Sig) }

// Sign sets Seq and signs the Meta with key as statement seq; a nil key
// leaves it unsigned.
func (m *Meta) Sign(key *identity.Key, seq uint64) {
	if key == nil {
		return
	}
	m.Seq = seq
	m.Sig = encodeSig(key.Sign(m.Statement()))
}

func encodeSig(b []byte) string { return base64.StdEncoding.EncodeToString(b) }

func decodeSig(s string) []byte {
	if s == "" {
		return nil
	}
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return nil
	}
	return b
}

// Encode returns m in its wire form. It fails when m has no version or
// does not fit memberlist's metadata limit: memberlist would panic on
// oversized metadata, so it must be caught before it gets there.
func (m Meta) Encode() ([]byte, error) {
	if m.Version < 1 {
		return nil, errors.New("heartbeat: meta has no version")
	}
	b, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("heartbeat: encode meta: %w", err)
	}
	if len(b) > MaxMetaSize {
		return nil, fmt.Errorf("heartbeat: meta is %d bytes encoded; the limit is %d", len(b), MaxMetaSize)
	}
	return b, nil
}

// DecodeMeta parses a Meta written by Encode. A Meta of a newer version
// decodes too: the fields this version knows are kept and unknown ones
// are ignored. Meta larger than memberlist's limit, which no genuine
// member can send, is refused undecoded, and so is a field over its
// bound (limits.go).
func DecodeMeta(b []byte) (Meta, error) {
	var m Meta
	if len(b) == 0 {
		return m, errors.New("heartbeat: empty meta")
	}
	if len(b) > MaxMetaSize {
		return m, fmt.Errorf("heartbeat: meta is %d bytes; the limit is %d", len(b), MaxMetaSize)
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return Meta{}, fmt.Errorf("heartbeat: decode meta: %w", err)
	}
	if m.Version < 1 {
		return Meta{}, errors.New("heartbeat: meta has no version")
	}
	if err := m.fieldsFit(); err != nil {
		return Meta{}, err
	}
	return m, nil
}

// fieldsFit checks each field against its bound (limits.go): what peers
// refuse to decode, this agent must not send either.
func (m Meta) fieldsFit() error {
	return fieldsFit(
		field{"meta node", len(m.Node), maxNameLen},
		field{"meta boot ID", len(m.BootID), maxBootIDLen},
		field{"meta role", len(m.Role), maxWordLen},
		field{"meta state", len(m.State), maxWordLen},
		field{"meta agent", len(m.Agent), maxAgentLen},
		field{"meta keys", len(m.Keys), maxKeysText},
		field{"meta signature", len(m.Sig), maxSigText},
	)
}

// localMeta fills in the defaults of an agent's own Meta, signs it with
// key (when set) as statement seq, and checks it.
func localMeta(m Meta, nodeName string, key *identity.Key, seq uint64) (Meta, []byte, error) {
	m.Version = MetaVersion
	if m.Node == "" {
		m.Node = nodeName
	}
	if m.Node != nodeName {
		return Meta{}, nil, fmt.Errorf("heartbeat: meta names node %q but the member is %q", m.Node, nodeName)
	}
	if m.Role == "" {
		m.Role = RoleObserver
	}
	if m.Role != RoleObserver && m.Role != RoleFencer {
		return Meta{}, nil, fmt.Errorf("heartbeat: unknown role %q", m.Role)
	}
	if m.State == "" {
		m.State = vocab.AnnounceRunning
	}
	if !m.State.Valid() {
		return Meta{}, nil, fmt.Errorf("heartbeat: unknown announced state %q", m.State)
	}
	m.Sign(key, seq)
	if err := m.fieldsFit(); err != nil {
		return Meta{}, nil, err
	}
	b, err := m.Encode()
	if err != nil {
		return Meta{}, nil, err
	}
	return m, b, nil
}
