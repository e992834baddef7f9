package fencing

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"log/slog"
	"net"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"

	"fenced.io/fenced/internal/testbed/hostile"
	"fenced.io/fenced/pkg/heartbeat"
	"fenced.io/fenced/pkg/vocab"
)

// Flood parameters: each push/pull carries one member state whose
// attacker-sized field is floodFieldSize bytes (memberlist accepts push/
// pulls of up to 20 MB; its 512-byte metadata limit binds only senders).
// floodPushPulls is kept small so that the run on code without the bounds
// does not eat the machine: there, every push/pull stays in the heap.
const (
	floodPushPulls = 10
	floodFieldSize = 16 << 20
	// floodHeapBound is the most the process's live heap may grow across
	// the flood: the field-conditions goal for the fencer.
	floodHeapBound = 20 << 20
	// floodLogBound is the most all agents together may log during the
	// flood, and floodRecordBound the largest single log record.
	floodLogBound    = 256 << 10
	floodRecordBound = 4 << 10
)

// TestOversizedGossipFloodBounded: a gossip-key holder pushes member
// states with 16 MB fields (a shutdown-complete's signature, a boot ID, a
// member name) at the fencer's ring through memberlist's push/pull. The
// fencer's live heap grows by at most floodHeapBound and what is logged
// stays small; a normal-sized forgery sent afterwards is still seen and
// counted, so the ring and the fencer kept working.
func TestOversizedGossipFloodBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("real gossip rings and a 160 MB flood")
	}
	logs := &logMeter{}
	b := newHostileBedLogging(t, testPolicy(vocab.ModeConfirmOnly), logs.logger, "victim-1")
	v := b.victims["victim-1"]
	to := b.ring.LocalAddr()
	// A victim at the fencer's end only: its own ring would refute the
	// forged alives about itself, replacing them before the fencer acts.
	v.ring.Shutdown()
	b.waitFor(20*time.Second, "the fencer's ring sees victim-1 gone", func() bool {
		m, _ := b.ring.Member(v.name)
		return m.State.Gone()
	})
	b.waitFor(20*time.Second, "the fencer is idle", func() bool { return b.fencer.queue.Len() == 0 })

	before := liveHeap()
	logsBefore, _ := logs.totals()
	// Each state has a higher incarnation than the last, so that
	// memberlist takes it as news.
	incarnation := uint32(1000)
	for i := range floodPushPulls {
		incarnation++
		state := hostile.State{Name: v.name, Addr: net.ParseIP(v.ip), Port: uint16(b.port), Incarnation: incarnation, State: memberlist.StateAlive}
		meta := heartbeat.Meta{Version: heartbeat.MetaVersion, Node: v.name, BootID: v.boot, State: vocab.AnnounceShutdownComplete}
		switch i % 3 {
		case 0: // kept by the fencer's forgery dedup (keyed by the claim)
			meta.Sig = randomText(t, floodFieldSize)
		case 1: // logged by the ring with every member change
			meta.BootID = randomText(t, floodFieldSize)
		case 2: // a member name: remembered and logged when refused
			state.Name = randomText(t, floodFieldSize)
		}
		raw, err := json.Marshal(meta)
		if err != nil {
			t.Fatal(err)
		}
		state.Meta = raw
		if _, err := b.forger.PushPull(to, hostile.PushPull{Nodes: []hostile.State{state}}); err != nil {
			t.Fatalf("push/pull %d: %v", i, err)
		}
	}
	// A normal-sized unsigned shutdown-complete last: once the fencer has
	// counted it, the flood before it has been merged and handled.
	unsigned := b.forgeries(forgedUnsigned)
	incarnation++
	if _, err := b.forger.PushPull(to, hostile.PushPull{Nodes: []hostile.State{{Name: v.name, Addr: net.ParseIP(v.ip), Port: uint16(b.port),
		Incarnation: incarnation, State: memberlist.StateAlive, Meta: metaFor(t, v, vocab.AnnounceShutdownComplete, v.boot, nil, 0)}}}); err != nil {
		t.Fatal(err)
	}
	b.waitFor(30*time.Second, "the fencer counts the normal-sized forgery sent after the flood", func() bool {
		return b.forgeries(forgedUnsigned) > unsigned
	})
	b.waitFor(30*time.Second, "the fencer is idle", func() bool { return b.fencer.queue.Len() == 0 })

	after := liveHeap()
	logsAfter, largest := logs.totals()
	growth := int64(after) - int64(before)
	t.Logf("live heap %.1f MB before, %.1f MB after %d push/pulls of %d MB fields: %+.1f MB; logged %d bytes, largest record %d bytes",
		mb(before), mb(after), floodPushPulls, floodFieldSize>>20, float64(growth)/(1<<20), logsAfter-logsBefore, largest)
	if growth > floodHeapBound {
		t.Errorf("live heap grew by %.1f MB under the flood; the bound is %d MB", float64(growth)/(1<<20), floodHeapBound>>20)
	}
	if n := logsAfter - logsBefore; n > floodLogBound {
		t.Errorf("%d bytes logged during the flood; the bound is %d", n, floodLogBound)
	}
	if largest > floodRecordBound {
		t.Errorf("a log record of %d bytes; the bound is %d", largest, floodRecordBound)
	}
	b.assertNoHarm(time.Second)
}

// liveHeap is the bytes of live heap objects after a full collection.
func liveHeap() uint64 {
	runtime.GC()
	runtime.GC() // the first may leave objects of finalizers behind
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

func mb(n uint64) float64 { return float64(n) / (1 << 20) }

// randomText is n bytes of base64 text, different on every call.
func randomText(t *testing.T, n int) string {
	t.Helper()
	raw := make([]byte, base64.StdEncoding.DecodedLen(n))
	if _, err := rand.Read(raw); err != nil {
		t.Fatal(err)
	}
	return base64.StdEncoding.EncodeToString(raw)[:n]
}

// logMeter counts what the agents log, keeping none of it.
type logMeter struct {
	mu      sync.Mutex
	bytes   int
	largest int
}

func (l *logMeter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.bytes += len(p)
	l.largest = max(l.largest, len(p))
	return len(p), nil
}

// totals is the bytes logged so far and the largest record.
func (l *logMeter) totals() (bytes, largest int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.bytes, l.largest
}

// logger is an agent's logger at info level (the default) into l.
func (l *logMeter) logger(_ *testing.T, member string) *slog.Logger {
	return slog.New(slog.NewTextHandler(l, &slog.HandlerOptions{Level: slog.LevelInfo})).With("member", member)
}
