package heartbeat

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"

	"fenced.io/fenced/pkg/vocab"
)

// TestDecodersCapFields: every decoder of peer bytes takes each field up
// to its bound and refuses it one byte over.
func TestDecodersCapFields(t *testing.T) {
	long := func(n int) string { return strings.Repeat("x", n) }
	nonce := make([]byte, nonceSize)
	meta := func(m Meta) bool {
		m.Version = MetaVersion
		b, _ := json.Marshal(m) // not Encode: it would refuse what a forger sends
		_, err := DecodeMeta(b)
		return err == nil
	}
	notice := func(n LeaveNotice) bool { _, ok := decodeLeaveNotice(EncodeLeaveNotice(n)); return ok }
	chal := func(c challenge) bool { _, ok := decodeChallenge(encodeMessage(msgChallenge, c)); return ok }
	proof := func(p Proof) bool { _, ok := decodeProof(EncodeProof(p)); return ok }
	sig := func(n int) []byte { return bytes.Repeat([]byte{1}, n) }
	cases := []struct {
		name string
		ok   bool
		got  bool
	}{
		{"meta at every bound", true, meta(Meta{Node: long(maxNameLen - 200), BootID: long(36), Role: long(maxWordLen),
			State: vocab.Announcement(long(maxWordLen)), Agent: long(100), Sig: long(88)})},
		{"meta node name of 253", true, meta(Meta{Node: long(maxNameLen)})},
		{"meta node name over", false, meta(Meta{Node: long(maxNameLen + 1)})},
		{"meta boot ID over", false, meta(Meta{Node: "a", BootID: long(maxBootIDLen + 1)})},
		{"meta role over", false, meta(Meta{Node: "a", Role: long(maxWordLen + 1)})},
		{"meta state over", false, meta(Meta{Node: "a", State: vocab.Announcement(long(maxWordLen + 1))})},
		{"meta agent over", false, meta(Meta{Node: "a", Agent: long(maxAgentLen + 1)})},
		{"meta signature over", false, meta(Meta{Node: "a", Sig: long(maxSigText + 1)})},
		{"longest fields together", true, meta(Meta{Node: "a", Agent: long(maxAgentLen), Sig: long(maxSigText), BootID: long(maxBootIDLen)})},
		{"meta over 512 bytes, fields within bounds", false, meta(Meta{Node: long(maxNameLen), Agent: long(maxAgentLen), Sig: long(maxSigText)})},
		{"meta of 16 MB", false, meta(Meta{Node: "a", Sig: long(16 << 20)})},

		{"leave notice at bounds", true, notice(LeaveNotice{Node: long(maxNameLen), BootID: long(maxBootIDLen), Sig: long(maxSigText)})},
		{"leave node over", false, notice(LeaveNotice{Node: long(maxNameLen + 1)})},
		{"leave boot ID over", false, notice(LeaveNotice{Node: "a", BootID: long(maxBootIDLen + 1)})},
		{"leave signature over", false, notice(LeaveNotice{Node: "a", Sig: long(maxSigText + 1)})},
		{"leave notice over the message bound", false, notice(LeaveNotice{Node: "a", BootID: long(maxMessage)})},

		{"challenge at bounds", true, chal(challenge{From: long(maxNameLen), ReplyTo: long(maxAddrLen), Nonce: nonce})},
		{"challenger over", false, chal(challenge{From: long(maxNameLen + 1), ReplyTo: "127.0.0.1:7946", Nonce: nonce})},
		{"reply address over", false, chal(challenge{From: "a", ReplyTo: long(maxAddrLen + 1), Nonce: nonce})},

		{"proof at bounds", true, proof(Proof{Node: long(maxNameLen), BootID: long(maxBootIDLen), State: vocab.Announcement(long(maxWordLen)),
			Nonce: nonce, Sig: sig(maxSigLen)})},
		{"proof node over", false, proof(Proof{Node: long(maxNameLen + 1), Nonce: nonce})},
		{"proof boot ID over", false, proof(Proof{Node: "a", BootID: long(maxBootIDLen + 1), Nonce: nonce})},
		{"proof state over", false, proof(Proof{Node: "a", State: vocab.Announcement(long(maxWordLen + 1)), Nonce: nonce})},
		{"proof signature over", false, proof(Proof{Node: "a", Nonce: nonce, Sig: sig(maxSigLen + 1)})},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.got != tc.ok {
				t.Errorf("decoded = %v, want %v", tc.got, tc.ok)
			}
		})
	}
}

// TestLocalMetaWithinPeersBounds: an agent refuses to start with
// metadata its peers would refuse.
func TestLocalMetaWithinPeersBounds(t *testing.T) {
	if _, _, err := localMeta(Meta{BootID: strings.Repeat("b", maxBootIDLen+1)}, "a", nil, 0); err == nil ||
		!strings.Contains(err.Error(), "boot ID") {
		t.Fatalf("localMeta with an oversized boot ID: %v", err)
	}
}

// TestNotifyAliveRefusesOversized: member states with a name, address or
// metadata no genuine member sends are refused before they are decoded —
// also in this agent's own name — counted, and logged clipped.
func TestNotifyAliveRefusesOversized(t *testing.T) {
	var logs recordLog
	r := newRing("self", logs.logger(), func(string) bool { return true })
	d := (*delegate)(r)
	huge := strings.Repeat("n", 1<<20)
	ip := net.IPv4(127, 0, 0, 1)
	valid := func(name string) []byte {
		b, err := Meta{Version: MetaVersion, Node: name, BootID: "b"}.Encode()
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	oversizedMeta, _ := json.Marshal(Meta{Version: MetaVersion, Node: "x", BootID: "b", Sig: strings.Repeat("A", 1<<20)})
	cases := []struct {
		name      string
		node      memberlist.Node
		oversized bool // refused and counted for its size
	}{
		{"genuine", memberlist.Node{Name: "x", Addr: ip, Meta: valid("x")}, false},
		{"name of 253", memberlist.Node{Name: strings.Repeat("n", maxNameLen), Addr: ip, Meta: valid(strings.Repeat("n", maxNameLen))}, false},
		{"name over 253", memberlist.Node{Name: strings.Repeat("n", maxNameLen+1), Addr: ip, Meta: valid("x")}, true},
		{"1 MB name", memberlist.Node{Name: huge, Addr: ip, Meta: valid("x")}, true},
		{"IPv6 address", memberlist.Node{Name: "x", Addr: net.IPv6loopback, Meta: valid("x")}, false},
		{"1 MB address", memberlist.Node{Name: "x", Addr: make(net.IP, 1<<20), Meta: valid("x")}, true},
		{"meta of 513 bytes", memberlist.Node{Name: "x", Addr: ip, Meta: append(valid("x"), make([]byte, MaxMetaSize+1-len(valid("x")))...)}, true},
		{"1 MB meta", memberlist.Node{Name: "x", Addr: ip, Meta: oversizedMeta}, true},
		{"1 MB meta in this agent's own name", memberlist.Node{Name: "self", Addr: ip, Meta: oversizedMeta}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := r.OversizedRefused()
			logs.reset()
			err := d.NotifyAlive(&tc.node)
			if refused := r.OversizedRefused() > before; refused != tc.oversized || (err != nil) != tc.oversized {
				t.Fatalf("NotifyAlive = %v, counted %v; want refused for its size: %v", err, refused, tc.oversized)
			}
			if largest := logs.largest(); largest > 2*maxLoggedPeerText+256 {
				t.Errorf("a log record of %d bytes", largest)
			}
		})
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for name := range r.rejected {
		if len(name) > maxNameLen {
			t.Errorf("remembered a refused name of %d bytes", len(name))
		}
	}
}

// TestRefusalWarningsRateLimited: a flood of refused members (each one
// new) gives refusalWarnings warnings a minute; the rest go to debug.
func TestRefusalWarningsRateLimited(t *testing.T) {
	var logs recordLog
	r := newRing("self", logs.logger(), func(string) bool { return false })
	d := (*delegate)(r)
	for i := range 100 {
		name := strings.Repeat("n", i+1)
		_ = d.NotifyAlive(&memberlist.Node{Name: name, Meta: []byte(`{"v":1}`)})
		_ = d.NotifyAlive(&memberlist.Node{Name: name + strings.Repeat("x", maxNameLen)})
	}
	if n := logs.count(slog.LevelWarn); n != refusalWarnings {
		t.Errorf("%d warnings for 200 refusals in a minute; want %d", n, refusalWarnings)
	}
	if n := logs.count(slog.LevelDebug); n != 200-refusalWarnings {
		t.Errorf("%d refusals at debug; want %d", n, 200-refusalWarnings)
	}
}

func TestPeerTextClips(t *testing.T) {
	cases := []struct {
		name string
		in   string
		want string
	}{
		{"short", "worker-1", "worker-1"},
		{"at the bound", strings.Repeat("a", maxLoggedPeerText), strings.Repeat("a", maxLoggedPeerText)},
		{"one over", strings.Repeat("a", maxLoggedPeerText+1), strings.Repeat("a", maxLoggedPeerText) + "…(257 bytes)"},
		{"16 MB", strings.Repeat("a", 16<<20), strings.Repeat("a", maxLoggedPeerText) + "…(16777216 bytes)"},
		// "é" is 2 bytes: a cut inside it moves back to its start.
		{"cut on a rune boundary", "a" + strings.Repeat("é", maxLoggedPeerText), "a" + strings.Repeat("é", (maxLoggedPeerText-1)/2) + "…(513 bytes)"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := PeerText(tc.in).LogValue().String(); got != tc.want {
				t.Errorf("got %q (%d bytes), want %q", clip(got, 40), len(got), clip(tc.want, 40))
			}
		})
	}
}

func TestMemberlistLinesClipped(t *testing.T) {
	var logs recordLog
	memberlistLogger(logs.logger()).Printf("[WARN] memberlist: ignoring alive message for '%s'", strings.Repeat("n", 1<<20))
	if n := logs.largest(); n > maxMemberlistLine+256 {
		t.Errorf("a memberlist line logged as %d bytes", n)
	}
	if n := logs.count(slog.LevelDebug); n != 1 {
		t.Errorf("%d lines logged, want 1", n)
	}
}

// TestWarnLimiter: burst warnings a minute, the rest at debug, and the
// next warning says how many were held back.
func TestWarnLimiter(t *testing.T) {
	var logs recordLog
	l := logs.logger()
	now := time.Unix(1_700_000_000, 0)
	w := NewWarnLimiter(2)
	w.now = func() time.Time { return now }
	steps := []struct {
		advance  time.Duration
		level    slog.Level
		heldBack int64
	}{
		{0, slog.LevelWarn, 0},
		{time.Second, slog.LevelWarn, 0},
		{time.Second, slog.LevelDebug, 0},
		{time.Second, slog.LevelDebug, 0},
		{56 * time.Second, slog.LevelDebug, 0}, // 59 s into the minute
		{time.Second, slog.LevelWarn, 3},       // a new minute
		{0, slog.LevelWarn, 0},
		{0, slog.LevelDebug, 0},
	}
	for i, s := range steps {
		now = now.Add(s.advance)
		logs.reset()
		w.Warn(l, "refused", "node", "x")
		recs := logs.all()
		if len(recs) != 1 || recs[0].Level != s.level {
			t.Fatalf("step %d: logged %+v, want one record at %v", i, recs, s.level)
		}
		var held int64
		recs[0].Attrs(func(a slog.Attr) bool {
			if a.Key == "heldBack" {
				held = a.Value.Int64()
			}
			return true
		})
		if held != s.heldBack {
			t.Errorf("step %d: heldBack=%d, want %d", i, held, s.heldBack)
		}
	}
}

// recordLog is a slog handler that keeps each record and its size as the
// text handler writes it.
type recordLog struct {
	mu    sync.Mutex
	recs  []slog.Record
	sizes []int
}

func (l *recordLog) logger() *slog.Logger { return slog.New(recordHandler{l: l}) }

func (l *recordLog) reset() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.recs, l.sizes = nil, nil
}

func (l *recordLog) all() []slog.Record {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]slog.Record(nil), l.recs...)
}

func (l *recordLog) count(level slog.Level) int {
	n := 0
	for _, r := range l.all() {
		if r.Level == level {
			n++
		}
	}
	return n
}

func (l *recordLog) largest() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	m := 0
	for _, s := range l.sizes {
		m = max(m, s)
	}
	return m
}

type recordHandler struct {
	l     *recordLog
	attrs []slog.Attr
}

func (h recordHandler) Enabled(_ context.Context, _ slog.Level) bool { return true }

func (h recordHandler) Handle(ctx context.Context, r slog.Record) error {
	r = r.Clone()
	r.AddAttrs(h.attrs...)
	var buf bytes.Buffer
	if err := slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}).Handle(ctx, r); err != nil {
		return err
	}
	h.l.mu.Lock()
	defer h.l.mu.Unlock()
	h.l.recs = append(h.l.recs, r)
	h.l.sizes = append(h.l.sizes, buf.Len())
	return nil
}

func (h recordHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return recordHandler{l: h.l, attrs: append(append([]slog.Attr(nil), h.attrs...), as...)}
}

func (h recordHandler) WithGroup(string) slog.Handler { return h }
