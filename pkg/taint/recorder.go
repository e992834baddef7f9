package taint

import (
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"

	"fenced.io/fenced/pkg/vocab"
)

// flushTimeout bounds how long the stop function of NewRecorder waits for
// queued Events to be written. client-go retries an unreachable API server
// for minutes; a shutting-down process should not.
const flushTimeout = 5 * time.Second

// NewRecorder returns an EventRecorder that writes Events to the API server
// through client, as component, and a stop function to call when done.
//
// Recording is asynchronous. stop first waits (up to 5 s) until every Event
// recorded before it has been handed to the API server, then shuts the
// broadcaster down: a short-lived command such as `fenced confirm` would
// otherwise exit before its Event, part of the evidence trail, is written.
//
// Events about Nodes go to the "default" namespace; they need the RBAC verbs
// create and patch on events (patch when client-go folds repeats into a
// count).
func NewRecorder(client kubernetes.Interface, component string) (record.EventRecorder, func()) {
	b := record.NewBroadcaster(record.WithCorrelatorOptions(record.CorrelatorOptions{
		BurstSize: eventBurst, QPS: eventRefillPerSecond,
	}))
	sink := &flushSink{
		EventSink: &typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")},
		waiting:   map[types.UID]chan struct{}{},
	}
	b.StartRecordingToSink(sink)
	rec := b.NewRecorder(scheme.Scheme, corev1.EventSource{Component: component})
	var once sync.Once
	stop := func() {
		once.Do(func() {
			sink.flush(rec, flushTimeout)
			b.Shutdown()
		})
	}
	return rec, stop
}

// client-go drops Events beyond a budget per involved object and type (25,
// then one per 5 minutes), there to shield the API server from a crashing
// pod's Events. A node in trouble gets many Warnings from fenced — every
// changed reason it cannot read the power, a voided reading, an alarm —
// and the one that matters (CannotBeFencedAutomatically, a safety alarm)
// can come late in an outage: fenced's budget is larger and refills
// faster. The fencer dedupes its own repeats (one Event per situation).
const (
	eventBurst           = 100
	eventRefillPerSecond = 1.0 / 30
)

// flushMarkerKind is the involvedObject kind of the marker Events flushSink
// swallows. Not a real kind, so no real Event can be mistaken for one.
const flushMarkerKind = "fenced.io/FlushMarker"

// flushSink passes Events on to the API server, except flush markers: the
// broadcaster hands Events to the sink one at a time, in order, so when a
// marker arrives every Event recorded before it has been written (or given
// up on).
type flushSink struct {
	record.EventSink
	seq     atomic.Uint64
	mu      sync.Mutex
	waiting map[types.UID]chan struct{}
}

// flush records a marker and waits until it reaches the sink or timeout
// passes.
func (s *flushSink) flush(rec record.EventRecorder, timeout time.Duration) {
	// A fresh object per marker: the correlator rate-limits and aggregates
	// per object, and must not swallow a marker as a repeat.
	uid := types.UID("flush-" + strconv.FormatUint(s.seq.Add(1), 10))
	ch := make(chan struct{})
	s.mu.Lock()
	s.waiting[uid] = ch
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.waiting, uid)
		s.mu.Unlock()
	}()
	rec.Event(&corev1.ObjectReference{Kind: flushMarkerKind, Name: string(uid), UID: uid}, corev1.EventTypeNormal, string(vocab.EventFlush), "flush")
	select {
	case <-ch:
	case <-time.After(timeout):
	}
}

// marker reports whether e is a flush marker and, if so, wakes its waiter.
func (s *flushSink) marker(e *corev1.Event) bool {
	if e.InvolvedObject.Kind != flushMarkerKind {
		return false
	}
	s.mu.Lock()
	if ch, ok := s.waiting[e.InvolvedObject.UID]; ok {
		close(ch)
		delete(s.waiting, e.InvolvedObject.UID)
	}
	s.mu.Unlock()
	return true
}

func (s *flushSink) Create(e *corev1.Event) (*corev1.Event, error) {
	if s.marker(e) {
		return e, nil
	}
	return s.EventSink.Create(e)
}

func (s *flushSink) Update(e *corev1.Event) (*corev1.Event, error) {
	if s.marker(e) {
		return e, nil
	}
	return s.EventSink.Update(e)
}

func (s *flushSink) Patch(e *corev1.Event, data []byte) (*corev1.Event, error) {
	if s.marker(e) {
		return e, nil
	}
	return s.EventSink.Patch(e, data)
}
