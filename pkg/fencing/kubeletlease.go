package fencing

import (
	"context"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	coordinformers "k8s.io/client-go/informers/coordination/v1"
	"k8s.io/client-go/tools/cache"

	"fenced.io/fenced/pkg/fencing/core"
	"fenced.io/fenced/pkg/vocab"
)

// A kubelet renews its node Lease every 10 s: at 1000 Nodes a watch of
// them all delivers 100 renewals a second, and decoding and handing each
// on was a third of an idle fencer's CPU. A renewal matters to a decision
// only for a node the fencer has reason to look at — one under suspicion,
// fenced or coming back (a renewal after a power reading voids it), or
// one whose agent left the ring (a restart is waited for only while the
// kubelet renews) — so the fencer watches the Lease of those nodes only,
// one watch each (a field selector on the Lease's name), opened when a
// decision finds the node of interest and closed when it no longer is.
//
// A watch opens with a list: it starts from the Lease as the API server
// has it then, so no renewal from before it is missed; until its list is
// in, and for a node not watched, the renew time is unknown (zero), which
// no rule takes for a sign of life (core.LifeAfter), as an informer that
// lags after an API outage gives an old one. What that could let pass is
// caught where it matters: before a taint is written the Lease is read
// from the API server (evidenceCheck), and a reading's baseline is read
// from it too (kubeletRenewBefore).

// leaseInterest reports whether node's decision reads its kubelet's Lease:
// its phase is not Healthy, or its gossip member is known and not alive.
func leaseInterest(phase core.Phase, m core.MemberObs) bool {
	return phase != core.PhaseHealthy || (m.Known && m.State != vocab.MemberAlive)
}

// kubeletLeaseWatch is the watch of one node's kubelet Lease.
type kubeletLeaseWatch struct {
	informer cache.SharedIndexInformer
	stop     context.CancelFunc
}

// watchKubeletLease opens or closes the watch of node's kubelet Lease as
// want says; s is the node's state, f.mu held. Every change the watch
// delivers queues the node. The watch ends with ctx (the fencer's run) at
// the latest.
func (f *Fencer) watchKubeletLease(ctx context.Context, node string, s *nodeState, want bool) {
	switch {
	case want && s.kubeletLease == nil && f.kubeletLeaseClient != nil:
		inf := coordinformers.NewFilteredLeaseInformer(f.kubeletLeaseClient, KubeletLeaseNamespace, 0, nil, func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", node).String()
		})
		_ = inf.SetTransform(TrimForCache) // not started yet: cannot fail
		enqueue := func(o any) {
			// Only this node's Lease: a client that ignores field
			// selectors (client-go's fake) sends every Lease.
			if metaName(o) == node {
				f.queue.Add(node)
			}
		}
		if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    enqueue,
			UpdateFunc: func(_, o any) { enqueue(o) },
			DeleteFunc: enqueue,
		}); err != nil {
			f.log.Error("fencer: cannot watch the kubelet's Lease; its renewals are not seen", "node", node, "err", err)
			return
		}
		wctx, stop := context.WithCancel(ctx)
		s.kubeletLease = &kubeletLeaseWatch{informer: inf, stop: stop}
		f.cfg.Metrics.KubeletLeaseWatches.Inc()
		f.bg.Add(1)
		go func() {
			defer f.bg.Done()
			inf.RunWithContext(wctx)
		}()
	case !want:
		f.unwatchKubeletLease(s)
	}
}

// unwatchKubeletLease closes the watch of the node's kubelet Lease, if
// one is open; s is the node's state, f.mu held.
func (f *Fencer) unwatchKubeletLease(s *nodeState) {
	if s.kubeletLease != nil {
		s.kubeletLease.stop()
		s.kubeletLease = nil
		f.cfg.Metrics.KubeletLeaseWatches.Dec()
	}
}

// unwatchKubeletLeases closes every kubelet Lease watch: at Run's end,
// and in a test that decides with sync alone (a watch lives as long as
// the context of the sync that opened it, or until it is closed).
func (f *Fencer) unwatchKubeletLeases() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, s := range f.state {
		f.unwatchKubeletLease(s)
	}
}

// kubeletRenew is the renew time of node's kubelet Lease as its watch has
// it; zero when the node's Lease is not watched, the watch's list is not
// in yet, or the Lease has none.
func (f *Fencer) kubeletRenew(node string) time.Time {
	f.mu.Lock()
	var w *kubeletLeaseWatch
	if s, ok := f.state[node]; ok {
		w = s.kubeletLease
	}
	f.mu.Unlock()
	if w == nil || !w.informer.HasSynced() {
		return time.Time{}
	}
	o, ok, err := w.informer.GetStore().GetByKey(KubeletLeaseNamespace + "/" + node)
	if err != nil || !ok {
		return time.Time{}
	}
	if l, ok := o.(*coordinationv1.Lease); ok && l.Spec.RenewTime != nil {
		return l.Spec.RenewTime.Time
	}
	return time.Time{}
}
