package heartbeat

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"

	"fenced.io/fenced/pkg/identity"
	"fenced.io/fenced/pkg/vocab"
)

// Member states are vocab.MemberState. vocab.MemberSuspect is never
// reported by this version: memberlist v0.7.0 has no callback for suspicion
// and does not expose a member's state through its API (Node.State is never
// filled in, hashicorp/memberlist#293), so a member moves from alive to dead
// directly, once memberlist's suspicion timeout has run out.

// ErrShutdown is returned by operations on a Ring that has been shut down.
var ErrShutdown = errors.New("heartbeat: ring is shut down")

// AnnounceTimeout bounds how long Announce waits for its update to be
// gossiped. After it the update is still out: memberlist keeps sending it,
// and push/pull spreads it too.
const AnnounceTimeout = 5 * time.Second

// DefaultLeaveTimeout is used by Leave when it is given no timeout.
const DefaultLeaveTimeout = 5 * time.Second

// maxLeaveNotices bounds the concurrent leave notices Leave sends.
const maxLeaveNotices = 16

// leaveNoticeTTL is how long a received leave notice can turn the next
// NotifyLeave of its member into vocab.MemberLeft. The notice comes at most a
// Leave timeout before memberlist's leave broadcast, or, if that broadcast
// is lost, a suspicion timeout (up to a minute in big rings) before the
// member is found gone. The bound keeps a notice whose leave never showed
// (say, a member restarted so fast that nobody saw it go) from turning a
// real failure much later into a clean leave.
const leaveNoticeTTL = 2 * time.Minute

// leaveNoticeGrace is how long a member that announced a shutdown or a
// restart and then vanished without our having its leave notice yet is
// still reported alive: the notice travels over TCP, memberlist's leave
// broadcast over UDP gossip, and the broadcast can win by a few
// milliseconds — or a member's probe missed the agent while it left.
// Reporting dead first would send fencers to the BMC of a node that is
// shutting down cleanly, or whose agent is restarting. Members that
// announced nothing are reported dead at once.
const leaveNoticeGrace = time.Second

// leaveHint is a received leave notice.
type leaveHint struct {
	notice LeaveNotice
	at     time.Time
}

// Member is one peer as seen by this agent.
//
// Everything in it is what gossip says, and any holder of the gossip key
// can say anything in any member's name: the view is for suspicion and
// display. What may lead to a taint or a power action must be checked
// against the member's own key (Meta.Sig, Leave.Sig; see pkg/identity).
type Member struct {
	Name  string
	Addr  string // host:port
	State vocab.MemberState
	// Meta is the last metadata seen, also for dead and left members.
	Meta Meta
	// Since is when State last changed, by this agent's clock.
	Since time.Time
	// Leave is the leave notice that made the member vocab.MemberLeft (zero when
	// it is not left, or left without a notice).
	Leave LeaveNotice
	// Silent: this agent, a fencer, had beats from the alive member and
	// they stopped (beats.go); SilentSince is when its last beat came.
	// Doubt: they are late, not yet stopped (SilentSince is set then
	// too). Anyone with the gossip key can beat in its name: a forged beat
	// can only hold Silent and Doubt back.
	Silent, Doubt bool
	SilentSince   time.Time
}

// LeaveNotice is what a member that leaves on purpose sends every other
// member first, signed with its own key (identity.KindLeave).
type LeaveNotice struct {
	Node   string `json:"node"`
	BootID string `json:"boot"`
	Seq    uint64 `json:"seq,omitempty"`
	Sig    string `json:"sig,omitempty"`
}

// Statement is what Sig signs.
func (n LeaveNotice) Statement() identity.Statement {
	return identity.Statement{Kind: identity.KindLeave, Node: n.Node, BootID: n.BootID, Seq: n.Seq}
}

// Signature decodes Sig (nil when absent or malformed).
func (n LeaveNotice) Signature() []byte { return decodeSig(n.Sig) }

// Sign sets Seq and signs the notice with key as statement seq.
func (n *LeaveNotice) Sign(key *identity.Key, seq uint64) {
	n.Seq = seq
	n.Sig = encodeSig(key.Sign(n.Statement()))
}

// Options for New and Join.
type Options struct {
	// Meta is this agent's metadata. Defaults: Node = Config.NodeName,
	// Role = RoleObserver, State = vocab.AnnounceRunning; Version is always
	// MetaVersion.
	Meta Meta
	// Seeds returns addresses ("host" or "host:port"; the default port is
	// the Config's BindPort) to join through. It is called at start and
	// again, with backoff, whenever the agent is alone in the ring. nil
	// means never join anyone: a ring of one until others join us.
	Seeds func() []string
	// IsNode reports whether name is a Node of the cluster; members that
	// are not are refused (and, to keep memberlist's view honest, so are
	// members whose metadata is not a Meta of the same name). It is called
	// from memberlist's packet handling for every alive message, so it must
	// be cheap and must not block: an informer cache lookup, synced before
	// Join. A member refused by mistake is only looked at again with its
	// next alive message or push/pull (every 30 s). nil accepts every
	// member.
	IsNode func(name string) bool
	// ChallengerAddrs returns the gossip addresses ("ip:port") the
	// Kubernetes API gives Node name — each of its addresses at the ring's
	// port — or nothing when name is no Node. This agent answers a liveness
	// challenge only when its reply address is one of them: who may
	// challenge is decided from the API, never from gossip state, which
	// any key holder can forge (a forged "the fencer is dead" would
	// otherwise silence every agent, and a silent agent may be switched
	// off). It is called from memberlist's packet handling: an informer
	// cache lookup. nil: the challenger must be an alive member at the
	// reply address in this agent's gossip view (rings without an API:
	// tests and benchmarks).
	ChallengerAddrs func(name string) []string
	// Logger receives state changes at info and memberlist's own logs at
	// debug. nil means slog.Default().
	Logger *slog.Logger
	// Key signs this agent's announcements, leave notice and liveness
	// proofs, so that fencers can tell them from forgeries. nil: nothing
	// is signed, and fencers take none of this agent's word, until UseKey
	// (the agent starts so, and gives the key once it is published).
	Key *identity.Key
	// Transport, when set, carries the ring's packets and streams instead
	// of the ring's own UDP and TCP listeners on BindAddr:BindPort
	// (transport.go; BindPort must then be where it listens). The agent
	// leaves it nil; benchmarks wrap memberlist's NetTransport to count
	// or drop packets (test/scale/gossip). Encryption and the label are
	// applied above it, so it carries what the network would.
	Transport memberlist.NodeAwareTransport
	// Memberlist, when set, adjusts memberlist's configuration after
	// Config has been applied to it. The agent leaves it nil; benchmarks
	// stretch every memberlist timer by one factor to host rings bigger
	// than their machine could at full speed (test/scale/gossip).
	Memberlist func(*memberlist.Config)
}

// Ring is this agent's membership in the gossip ring.
type Ring struct {
	// ml is set once by Join; memberlist's own goroutines read it (a
	// challenge answered as Join returns), hence atomic.
	ml     atomic.Pointer[memberlist.Memberlist]
	self   string
	port   int // effective bind port: the default port of seeds
	log    *slog.Logger
	isNode func(string) bool
	seeds  func() []string

	// retryMin and retryMax bound the backoff between join attempts.
	retryMin, retryMax time.Duration

	// metaMu guards the local Meta and the statement counter; memberlist
	// reads the Meta through NodeMeta.
	metaMu    sync.Mutex
	meta      Meta
	metaBytes []byte
	key       *identity.Key
	seq       uint64 // the last statement number signed with key
	// announceMu serialises Announce so updates go out in call order.
	announceMu sync.Mutex

	// mu guards the member view. memberlist calls the delegates with its
	// node lock held, so nothing may call into memberlist while holding mu.
	mu      sync.Mutex
	members map[string]*Member
	leaving map[string]leaveHint // leave notices received, by member name
	// pendingDead holds back the dead verdict on members that announced a
	// shutdown, for leaveNoticeGrace, in case their leave notice is late.
	pendingDead map[string]*time.Timer
	rejected    map[string]struct{} // names refused so far, to log each once
	// refusals rate-limits the warnings about refused peers; oversized
	// counts the member states refused for their size (NotifyAlive).
	refusals  *WarnLimiter
	oversized atomic.Uint64
	// beats counts the beats of alive members this fencer's Detector
	// took (beats.go).
	beats atomic.Uint64
	// challenges are this agent's liveness challenges waiting for a proof,
	// by nonce; proving counts the reliable proof sends in flight per
	// challenger (proof.go), challengerAddrs is Options.ChallengerAddrs.
	challenges      map[string]chan Proof
	proving         map[string]int
	challengerAddrs func(string) []string
	localAddr       string
	selfLeft        bool // set when this agent starts to leave
	// stopped is set (under mu) at Shutdown: memberlist's suspicion
	// timers may still fire afterwards, and the view no longer changes.
	stopped bool
	// onChange is called with every member change (OnChange).
	onChange func(Member)

	// beatEvery is how often this agent beats to the fencers (0: never);
	// detector, in a fencer's ring only, judges the members' beats, and
	// silentOnce marks the members it found silent at the last look
	// (beats.go).
	beatEvery  time.Duration
	detector   *Detector
	silentOnce map[string]bool
	// beatKeys are the ciphers sealed beats are sealed and opened with
	// (sealedbeat.go; nil without encryption); beatName is the buffer the
	// transport's reader opens them into, beatsSealed counts those opened
	// and beatsRefused those no key opened.
	beatKeys     atomic.Pointer[beatKeys]
	beatName     []byte
	beatsSealed  atomic.Uint64
	beatsRefused atomic.Uint64

	// mc is the memberlist configuration New built; ml is the memberlist
	// Join creates from it (nil before Join).
	mc *memberlist.Config
	// lonely is signalled when this agent becomes the only alive member,
	// waking the join loop.
	lonely chan struct{}

	// keyring is memberlist's (nil without encryption), changed in place
	// by reconcileKeys alone; keysWake wakes keysLoop on member changes.
	keyring  *memberlist.Keyring
	keysWake chan struct{}
	// keysMu guards the configured keys, when each key that left them
	// did (retainKeys), what the Meta last advertised and the last plan
	// logged; it serialises reconcileKeys.
	keysMu         sync.Mutex
	keysWanted     KeySet
	keysLeft       map[string]time.Time
	keysAdvertised string
	keysWaitLog    string
	keysRecheck    *time.Timer // wakes keysLoop when a kept key's bound runs out
	// keysState is what Keyring returns.
	keysState atomic.Pointer[KeyringState]

	// lifeMu orders Join, Leave and Shutdown: memberlist panics on a
	// Leave after Shutdown.
	lifeMu sync.Mutex
	closed bool
	done   chan struct{}
}

// newRing returns a Ring with an empty member view and no memberlist yet:
// what Join starts from, and what the delegate tests drive directly.
func newRing(self string, log *slog.Logger, isNode func(string) bool) *Ring {
	return &Ring{
		self:        self,
		log:         log,
		isNode:      isNode,
		members:     make(map[string]*Member),
		leaving:     make(map[string]leaveHint),
		rejected:    make(map[string]struct{}),
		refusals:    NewWarnLimiter(refusalWarnings),
		pendingDead: make(map[string]*time.Timer),
		challenges:  make(map[string]chan Proof),
		proving:     make(map[string]int),
		lonely:      make(chan struct{}, 1),
		keysWake:    make(chan struct{}, 1),
		silentOnce:  make(map[string]bool),
		done:        make(chan struct{}),
	}
}

// New builds this agent's Ring from cfg and opts without touching the
// network: the configuration is checked and the member view is empty
// until Join. Register the OnChange handler between New and Join.
func New(cfg Config, opts Options) (*Ring, error) {
	mc, err := cfg.MemberlistConfig()
	if err != nil {
		return nil, err
	}
	if opts.Memberlist != nil {
		opts.Memberlist(mc)
	}
	var beatEvery time.Duration
	switch {
	case cfg.BeatInterval == 0:
		beatEvery = DefaultBeatInterval
	case cfg.BeatInterval > 0:
		beatEvery = cfg.BeatInterval
	}
	// A fencer judges its members' beats (beats.go).
	judgesBeats := beatEvery > 0 && opts.Meta.Role == RoleFencer
	if mc.Keyring != nil {
		opts.Meta.Keys = keysText(mc.Keyring.GetKeys(), nil)
		// Its own transport reads sealed beats; one given in Options
		// carries only what memberlist sends.
		opts.Meta.SealedBeats = judgesBeats && opts.Transport == nil
	}
	meta, metaBytes, err := localMeta(opts.Meta, cfg.NodeName, opts.Key, 1)
	if err != nil {
		return nil, err
	}
	base := opts.Logger
	if base == nil {
		base = slog.Default()
	}
	r := newRing(cfg.NodeName, base.With("component", "heartbeat"), opts.IsNode)
	r.port, r.seeds, r.challengerAddrs = mc.BindPort, opts.Seeds, opts.ChallengerAddrs
	r.retryMin, r.retryMax = mc.ProbeInterval, 30*mc.ProbeInterval
	r.beatEvery = beatEvery
	if judgesBeats {
		r.detector = NewDetector(DetectorConfig{Interval: beatEvery})
	}
	r.meta, r.metaBytes, r.key, r.seq = meta, metaBytes, opts.Key, 1
	r.mc = mc
	if mc.Keyring != nil {
		r.keyring, r.keysWanted, r.keysAdvertised = mc.Keyring, cfg.Keys(), meta.Keys
		r.keysLeft = map[string]time.Time{}
		r.storeKeyringState(nil, true)
		r.refreshBeatKeys()
	}
	d := (*delegate)(r)
	mc.Events = d
	mc.Alive = d
	mc.Delegate = d
	mc.Logger = memberlistLogger(base)
	if opts.Transport != nil {
		mc.Transport = opts.Transport
	}
	return r, nil
}

// Join starts this agent's memberlist and joins the ring through the
// Options' Seeds. advertise, when not empty, replaces the Config's
// AdvertiseAddr: an agent may learn it only at run time, from its Node.
// Not reaching any seed is not an error: the agent is then a ring of one
// and keeps trying in the background (logged). Join waits for the first
// join attempt to end, or for ctx. ctx bounds the join attempts only, the
// first and the background ones: cancelling it does not take the agent out
// of the ring — call Leave or Shutdown for that. A Ring joins once.
func (r *Ring) Join(ctx context.Context, advertise string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	r.lifeMu.Lock()
	switch {
	case r.closed:
		r.lifeMu.Unlock()
		return ErrShutdown
	case r.ml.Load() != nil:
		r.lifeMu.Unlock()
		return errors.New("heartbeat: joined already")
	}
	if advertise != "" {
		r.mc.AdvertiseAddr = advertise
	}
	var own *transport
	if r.mc.Transport == nil {
		t, err := newTransport(r.mc.BindAddr, r.mc.BindPort, r.log)
		if err != nil {
			r.lifeMu.Unlock()
			return fmt.Errorf("heartbeat: start gossip: %w", err)
		}
		if r.mc.BindPort == 0 {
			r.mc.BindPort, r.mc.AdvertisePort, r.port = t.port(), t.port(), t.port()
		}
		if r.detector != nil {
			beat := r.sealedBeatReceived
			t.onBeat.Store(&beat)
		}
		own, r.mc.Transport = t, t
	}
	ml, err := memberlist.Create(r.mc)
	if err != nil {
		if own != nil {
			_ = own.Shutdown()
			r.mc.Transport = nil
		}
		r.lifeMu.Unlock()
		return fmt.Errorf("heartbeat: start gossip on %s:%d: %w", r.mc.BindAddr, r.mc.BindPort, err)
	}
	r.ml.Store(ml)
	r.lifeMu.Unlock()
	if r.keyring != nil {
		go r.keysLoop()
	}
	if r.beatEvery > 0 {
		go r.beatLoop(ml, own)
		if r.detector != nil {
			go r.silenceLoop()
		}
	}

	if r.seeds != nil {
		first := make(chan struct{})
		// The join loop is not waited for by Shutdown: an attempt can sit
		// in a TCP dial for memberlist's TCPTimeout. The loop ends on its
		// own after the attempt.
		go r.joinLoop(ctx, first)
		select {
		case <-first:
		case <-ctx.Done():
		}
	}
	return nil
}

// OnChange registers fn to be called with every change of any member, this
// agent included: a new member, a state change, or new metadata — as an
// informer calls its event handlers. Each call says "this member now looks
// like this"; nothing is queued or coalesced, so fn sees every change.
//
// fn is called from memberlist's callbacks, with memberlist's node lock
// held (and none of the Ring's locks): it must return quickly, must not
// block, and must not call Join, Announce, Leave, Shutdown or Challenge,
// nor take a lock that is held while calling any of them; reading the view
// (Member, Members, Alive) is fine. Register it before Join: changes made
// before are not replayed. It replaces an earlier fn.
func (r *Ring) OnChange(fn func(Member)) {
	r.mu.Lock()
	r.onChange = fn
	r.mu.Unlock()
}

// Done is closed once the Ring is shut down (Shutdown, or the end of
// Leave).
func (r *Ring) Done() <-chan struct{} { return r.done }

// Members returns all members ever seen, this agent included, also dead
// and left ones (with their last Meta), sorted by name.
func (r *Ring) Members() []Member {
	r.mu.Lock()
	out := make([]Member, 0, len(r.members))
	for _, m := range r.members {
		out = append(out, *m)
	}
	r.mu.Unlock()
	slices.SortFunc(out, func(a, b Member) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// Member returns the member called name, if it was ever seen.
func (r *Ring) Member(name string) (Member, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	m, ok := r.members[name]
	if !ok {
		return Member{}, false
	}
	return *m, true
}

// Alive returns the number of members currently alive, this agent
// included.
func (r *Ring) Alive() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.aliveLocked()
}

func (r *Ring) aliveLocked() int {
	n := 0
	for _, m := range r.members {
		if m.State == vocab.MemberAlive {
			n++
		}
	}
	return n
}

// LocalAddr returns the host:port other members reach this agent at.
func (r *Ring) LocalAddr() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.localAddr
}

// Announce sets the State of this agent's Meta and gossips it, waiting up to AnnounceTimeout for the update to
// go out. On a timeout error the new state is still in effect and keeps
// spreading.
func (r *Ring) Announce(state vocab.Announcement) error {
	if !state.Valid() {
		return fmt.Errorf("heartbeat: unknown announced state %q", state)
	}
	r.announceMu.Lock()
	defer r.announceMu.Unlock()
	r.lifeMu.Lock()
	closed := r.closed
	r.lifeMu.Unlock()
	if closed {
		return ErrShutdown
	}
	ml := r.ml.Load()
	if ml == nil {
		return errors.New("heartbeat: announce before Join")
	}
	if err := r.signMeta(state, nil); err != nil {
		return err
	}
	return r.gossipMeta(ml, state)
}

// UseKey makes key this agent's signing key from now on and gossips its
// Meta signed with it (before Join: the Meta the join will carry).
//
// An agent starts its Ring without a key and calls UseKey once its key is
// on its key Lease (pkg/agent): until then no fencer can check its words,
// and while the Lease still holds an earlier run's key of the same boot a
// fencer would judge them against that one; words signed before the key
// lands would count, and could be replayed, from the moment it lands.
func (r *Ring) UseKey(key *identity.Key) error {
	if key == nil {
		return errors.New("heartbeat: UseKey without a key")
	}
	r.announceMu.Lock()
	defer r.announceMu.Unlock()
	// Join holds lifeMu from creating memberlist until it is stored: the
	// join reads the new Meta, or UpdateNode sends it.
	r.lifeMu.Lock()
	if r.closed {
		r.lifeMu.Unlock()
		return ErrShutdown
	}
	err := r.signMeta("", key)
	ml := r.ml.Load()
	r.lifeMu.Unlock()
	if err != nil || ml == nil {
		return err
	}
	return r.gossipMeta(ml, "")
}

// signMeta signs this agent's Meta as the next statement, with state as
// its State ("" keeps it) and key as the signing key from now on (nil
// keeps the key).
func (r *Ring) signMeta(state vocab.Announcement, key *identity.Key) error {
	r.metaMu.Lock()
	defer r.metaMu.Unlock()
	if key == nil {
		key = r.key
	}
	meta := r.meta
	if state != "" {
		meta.State = state
	}
	meta.Sign(key, r.seq+1)
	b, err := meta.Encode()
	if err != nil {
		return err
	}
	r.meta, r.metaBytes, r.key = meta, b, key
	r.seq = max(r.seq, meta.Seq)
	return nil
}

// gossipMeta sends the Meta out, waiting up to AnnounceTimeout. UpdateNode
// calls back into NodeMeta and NotifyUpdate: no lock of ours may be held
// here except announceMu.
func (r *Ring) gossipMeta(ml *memberlist.Memberlist, state vocab.Announcement) error {
	if err := ml.UpdateNode(AnnounceTimeout); err != nil {
		if state == "" {
			return fmt.Errorf("heartbeat: gossip signed metadata: %w", err)
		}
		return fmt.Errorf("heartbeat: announce %q: %w", state, err)
	}
	return nil
}

// Leave leaves the ring cleanly, so that the others see this agent as
// vocab.MemberLeft rather than vocab.MemberDead, and then shuts it down. timeout bounds
// the whole leave (<= 0 means DefaultLeaveTimeout); the agent is shut down
// even when the leave fails.
//
// memberlist does not tell its delegates whether a member left or died
// (hashicorp/memberlist#293), so Leave first sends every alive member a
// leave notice over memberlist's reliable (TCP, encrypted, labelled)
// channel; a member records it and reports this agent as left once
// memberlist reports it gone. Then it broadcasts memberlist's own leave,
// which makes the others drop this agent at once instead of after a
// suspicion timeout. A member that missed the notice sees vocab.MemberDead: the
// safe side, as dead only starts the work of getting evidence.
func (r *Ring) Leave(timeout time.Duration) error {
	if timeout <= 0 {
		timeout = DefaultLeaveTimeout
	}
	deadline := time.Now().Add(timeout)
	r.lifeMu.Lock()
	defer r.lifeMu.Unlock()
	if r.closed {
		return ErrShutdown
	}
	if r.ml.Load() == nil {
		return r.shutdownLocked() // never joined: nobody to tell
	}
	r.mu.Lock()
	r.selfLeft = true
	r.mu.Unlock()

	// Half of the time for the notices, the rest for the broadcast.
	noticeErr := r.sendLeaveNotices(time.Now().Add(timeout / 2))
	left := time.Until(deadline)
	if left < time.Millisecond {
		left = time.Millisecond // memberlist takes 0 as "wait forever"
	}
	leaveErr := r.ml.Load().Leave(left)
	if leaveErr != nil {
		leaveErr = fmt.Errorf("heartbeat: leave: %w", leaveErr)
	}
	return errors.Join(noticeErr, leaveErr, r.shutdownLocked())
}

// sendLeaveNotices tells every alive member that this agent is leaving.
func (r *Ring) sendLeaveNotices(deadline time.Time) error {
	r.metaMu.Lock()
	notice := LeaveNotice{Node: r.self, BootID: r.meta.BootID}
	if r.key != nil {
		r.seq++
		notice.Sign(r.key, r.seq)
	}
	msg := EncodeLeaveNotice(notice)
	r.metaMu.Unlock()

	var peers []*memberlist.Node
	r.mu.Lock()
	for _, m := range r.members {
		if m.Name == r.self || m.State != vocab.MemberAlive {
			continue
		}
		// Copies built from our own view: memberlist's Members() returns
		// pointers into its state, which it rewrites under its own lock.
		n, err := nodeOf(m.Name, m.Addr)
		if err != nil {
			continue
		}
		peers = append(peers, n)
	}
	r.mu.Unlock()
	if len(peers) == 0 {
		return nil
	}

	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	sem := make(chan struct{}, maxLeaveNotices)
	var (
		mu        sync.Mutex
		failed    []string
		delivered int
		wg        sync.WaitGroup
	)
	fail := func(name string) {
		mu.Lock()
		failed = append(failed, name)
		mu.Unlock()
	}
	for _, n := range peers {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			fail(n.Name)
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if err := r.ml.Load().SendReliable(n, msg); err != nil {
				r.log.Debug("leave notice not delivered", "node", n.Name, "err", err)
				fail(n.Name)
				return
			}
			mu.Lock()
			delivered++
			mu.Unlock()
		}()
	}
	// Sends still running at the deadline are abandoned: they end with
	// memberlist's TCP timeout, and their peers will see dead instead.
	allSent := make(chan struct{})
	go func() {
		wg.Wait()
		close(allSent)
	}()
	select {
	case <-allSent:
	case <-ctx.Done():
		mu.Lock()
		defer mu.Unlock()
		return fmt.Errorf("heartbeat: leave notices: timed out with %d of %d delivered: the rest will see this agent dead", delivered, len(peers))
	}
	mu.Lock()
	defer mu.Unlock()
	if len(failed) > 0 {
		slices.Sort(failed)
		return fmt.Errorf("heartbeat: leave notice not delivered to %s: they will see this agent dead", strings.Join(failed, ", "))
	}
	return nil
}

// Shutdown stops gossiping at once, without leaving: the others see this
// agent dead after their suspicion timeout. It closes Done. Calling it
// again does nothing.
func (r *Ring) Shutdown() error {
	r.lifeMu.Lock()
	defer r.lifeMu.Unlock()
	return r.shutdownLocked()
}

func (r *Ring) shutdownLocked() error {
	if r.closed {
		return nil
	}
	r.closed = true
	var err error
	if r.ml.Load() != nil {
		err = r.ml.Load().Shutdown()
	}
	// The view dies with the ring: memberlist's suspicion timers and our
	// held-back dead verdicts, fired later, would report (and log) members
	// of a ring that is gone.
	r.mu.Lock()
	r.stopped = true
	for name := range r.pendingDead {
		r.cancelPendingDeadLocked(name)
	}
	r.mu.Unlock()
	close(r.done)
	if err != nil {
		return fmt.Errorf("heartbeat: shutdown: %w", err)
	}
	return nil
}

// nodeOf builds the memberlist address of a member from our view.
func nodeOf(name, addr string) (*memberlist.Node, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	ip := net.ParseIP(host)
	if ip == nil {
		return nil, fmt.Errorf("not an IP: %q", host)
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return nil, err
	}
	return &memberlist.Node{Name: name, Addr: ip, Port: uint16(p)}, nil
}
