package agent

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"fenced.io/fenced/internal/testbed/poll"
	"fenced.io/fenced/pkg/identity"
	"fenced.io/fenced/pkg/identity/publish"
	"fenced.io/fenced/pkg/shutdown"
)

const (
	ownKeyNS   = "fenced-system"
	ownKeyNode = "node-a"
	ownKeyBoot = "boot-1"
)

// ringSpy is the ring as ownKey sees it: it records the key it was given
// and what the Lease held at that moment.
type ringSpy struct {
	client *fake.Clientset
	mu     sync.Mutex
	used   *identity.Key
	lease  string // the Lease's key when UseKey was called
}

func (r *ringSpy) UseKey(k *identity.Key) error {
	got, err := publish.Read(context.Background(), r.client, ownKeyNS, ownKeyNode)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.used = k
	if err == nil {
		r.lease = got.Key.String()
	}
	return nil
}

func (r *ringSpy) key() (*identity.Key, string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.used, r.lease
}

// ownKeyBed is a fake API whose Lease writes fail while refuse is set,
// with the key Lease holding an earlier run's key of this boot.
type ownKeyBed struct {
	client  *fake.Clientset
	refuse  atomic.Bool
	earlier *identity.Key
	ring    *ringSpy
	gauge   prometheus.Gauge
	logs    *lockedBuffer
	k       *ownKey
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func newOwnKeyBed(t *testing.T) *ownKeyBed {
	t.Helper()
	b := &ownKeyBed{client: fake.NewClientset(), logs: &lockedBuffer{},
		gauge: prometheus.NewGauge(prometheus.GaugeOpts{Name: "fenced_agent_key_published"})}
	var err error
	if b.earlier, err = identity.NewKey(); err != nil {
		t.Fatal(err)
	}
	if err := publish.Publish(t.Context(), b.client, ownKeyNS, ownKeyNode, ownKeyBoot, b.earlier.Public(), time.Now()); err != nil {
		t.Fatal(err)
	}
	b.client.PrependReactor("*", "leases", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if b.refuse.Load() && (a.GetVerb() == "update" || a.GetVerb() == "create") {
			return true, nil, apierrors.NewServiceUnavailable("the API server is overloaded")
		}
		return false, nil, nil
	})
	key, err := identity.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	b.ring = &ringSpy{client: b.client}
	b.k = &ownKey{client: b.client, ns: ownKeyNS, node: ownKeyNode, boot: ownKeyBoot, key: key, ring: b.ring,
		published: b.gauge, log: slog.New(slog.NewTextHandler(b.logs, nil)), wait: 100 * time.Millisecond}
	return b
}

func (b *ownKeyBed) leaseKey(t *testing.T) (string, error) {
	t.Helper()
	k, err := publish.Read(context.Background(), b.client, ownKeyNS, ownKeyNode)
	return k.Key.String(), err
}

// TestOwnKeySignsNothingUntilPublished: while the key Lease holds an
// earlier run's key of the same boot and this run's key cannot be written,
// the agent goes on (joins) without giving the ring any key, and says so;
// the ring gets the key only once the Lease holds it, replacing the
// earlier run's.
func TestOwnKeySignsNothingUntilPublished(t *testing.T) {
	b := newOwnKeyBed(t)
	b.refuse.Store(true)
	ctx, cancel := context.WithCancel(t.Context())
	t.Cleanup(cancel)
	b.k.start(ctx)
	t.Cleanup(func() { cancel(); <-b.k.done })

	if used, _ := b.ring.key(); used != nil {
		t.Fatal("the ring got a key while the Lease held an earlier run's key of this boot")
	}
	if got := testutil.ToFloat64(b.gauge); got != 0 {
		t.Fatalf("fenced_agent_key_published = %v before the key was published", got)
	}
	logs := b.logs.String()
	for _, want := range []string{
		"the key Lease holds an earlier run's key of this boot: replacing it before this agent signs anything",
		"signing nothing until it is",
		`leaseHolds="` + b.earlier.Public().String() + `"`, // quoted: base64 ends in =
	} {
		if !strings.Contains(logs, want) {
			t.Errorf("the log does not say %q:\n%s", want, logs)
		}
	}

	b.refuse.Store(false)
	poll.Until(t, 20*time.Second, "the ring signs with this run's key", func() bool { used, _ := b.ring.key(); return used != nil })
	used, leaseThen := b.ring.key()
	if used != b.k.key {
		t.Fatal("the ring got another key than this run's")
	}
	if leaseThen != b.k.key.Public().String() {
		t.Fatalf("the ring got the key while the Lease held %q, not this run's key", leaseThen)
	}
	if got := testutil.ToFloat64(b.gauge); got != 1 {
		t.Fatalf("fenced_agent_key_published = %v after the key was published", got)
	}
}

// TestOwnKeyWithdraw: a run whose host's shutdown was cancelled after it
// left takes its key off the Lease on the way out — also when the key was
// still being published: that write is stopped first and never lands
// later — and leaves a later run's key alone.
func TestOwnKeyWithdraw(t *testing.T) {
	for _, tc := range []struct {
		name      string
		published bool // the key reached the Lease before the withdrawal
	}{
		{name: "published", published: true},
		{name: "still being published"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newOwnKeyBed(t)
			b.refuse.Store(!tc.published)
			b.k.start(t.Context())
			if tc.published {
				poll.Until(t, 20*time.Second, "the key is published", func() bool { k, _ := b.leaseKey(t); return k == b.k.key.Public().String() })
			}
			b.refuse.Store(false)
			p := &parts{ownKey: b.k}
			p.watcherFailed(shutdown.ErrCancelledAfterLeave)
			select {
			case <-b.k.done:
			default:
				t.Fatal("the key is still being published after the withdrawal")
			}
			if tc.published {
				if k, err := b.leaseKey(t); !errors.Is(err, publish.ErrKeyWithdrawn) {
					t.Fatalf("after the withdrawal the Lease holds %q (%v); want no key", k, err)
				}
			} else if k, _ := b.leaseKey(t); k != b.earlier.Public().String() {
				// Withdraw leaves the earlier run's key: not this run's to
				// take, and a fencer that saw this run unsigned no longer
				// trusts it.
				t.Fatalf("after the withdrawal the Lease holds %q; want the earlier run's key untouched", k)
			}
			if got := testutil.ToFloat64(b.gauge); got != 0 {
				t.Fatalf("fenced_agent_key_published = %v after the withdrawal", got)
			}
		})
	}

	t.Run("other watcher errors keep the key", func(t *testing.T) {
		b := newOwnKeyBed(t)
		b.k.start(t.Context())
		poll.Until(t, 20*time.Second, "the key is published", func() bool { k, _ := b.leaseKey(t); return k == b.k.key.Public().String() })
		(&parts{ownKey: b.k}).watcherFailed(errors.New("logind went away"))
		if k, err := b.leaseKey(t); err != nil || k != b.k.key.Public().String() {
			t.Fatalf("the Lease holds %q (%v); want this run's key", k, err)
		}
	})

	t.Run("a later run's key is left alone", func(t *testing.T) {
		b := newOwnKeyBed(t)
		b.k.start(t.Context())
		poll.Until(t, 20*time.Second, "the key is published", func() bool { k, _ := b.leaseKey(t); return k == b.k.key.Public().String() })
		later, _ := identity.NewKey()
		if err := publish.Publish(t.Context(), b.client, ownKeyNS, ownKeyNode, ownKeyBoot, later.Public(), time.Now()); err != nil {
			t.Fatal(err)
		}
		if err := b.k.withdraw(t.Context()); err != nil || !strings.Contains(b.logs.String(), "left it alone") {
			t.Fatal(err)
		}
		if k, err := b.leaseKey(t); err != nil || k != later.Public().String() {
			t.Fatalf("the Lease holds %q (%v); want the later run's key", k, err)
		}
	})
}
