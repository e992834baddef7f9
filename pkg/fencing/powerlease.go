package fencing

import (
	"context"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// The fencers' power Leases: one per target (LeasePrefix + node) in the
// lease namespace, held by the fencer that acts on the target and renewed
// while it acts, so that at most one fencer switches a node's power and a
// fencer that dies mid-action loses the Lease within one duration.

// LeasePrefix names the per-target power Leases: fenced-power-<node>.
const LeasePrefix = "fenced-power-"

// leaseActive returns the holder of node's power Lease if it has not
// expired, else "".
func (f *Fencer) leaseActive(node string, now time.Time) string {
	l, err := f.leases.Get(LeasePrefix + node)
	if err != nil || l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "" ||
		l.Spec.RenewTime == nil || l.Spec.LeaseDurationSeconds == nil {
		return ""
	}
	expiry := l.Spec.RenewTime.Add(time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second)
	if now.After(expiry) {
		return ""
	}
	return *l.Spec.HolderIdentity
}

// acquireLease takes node's power Lease if it is free or expired.
func (f *Fencer) acquireLease(ctx context.Context, node string) error {
	now := metav1.NewMicroTime(f.cfg.Now())
	duration := f.settings().LeaseDuration
	dur := int32(duration / time.Second)
	leases := f.cfg.Client.CoordinationV1().Leases(f.cfg.LeaseNamespace)
	holder := f.leaseActive(node, now.Time)
	if holder != "" && holder != f.cfg.Identity {
		return nil // another fencer acts; the core waits
	}
	spec := coordinationv1.LeaseSpec{HolderIdentity: ptr.To(f.cfg.Identity), LeaseDurationSeconds: &dur, AcquireTime: &now, RenewTime: &now}
	existing, err := f.leases.Get(LeasePrefix + node)
	switch {
	case apierrors.IsNotFound(err):
		_, err = leases.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: LeasePrefix + node}, Spec: spec}, metav1.CreateOptions{})
	case err == nil:
		l := existing.DeepCopy()
		l.Spec = spec
		// ResourceVersion makes this a compare-and-swap: of two fencers
		// racing for an expired Lease, exactly one wins.
		_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
	}
	if apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) {
		f.log.Info("power Lease taken by another fencer", "node", node)
		return nil
	}
	if err != nil {
		return err
	}
	f.log.Info("power Lease acquired", "node", node, "duration", duration)
	f.startRenewal(ctx, node, duration)
	return nil
}

// startRenewal renews node's Lease every third of its duration until
// released, so a fencer that dies mid-action loses it within one duration.
func (f *Fencer) startRenewal(ctx context.Context, node string, duration time.Duration) {
	f.mu.Lock()
	s := f.stateOf(node)
	if s.renew != nil {
		f.mu.Unlock()
		return
	}
	rctx, cancel := context.WithCancel(ctx)
	s.renew = cancel
	f.mu.Unlock()
	f.bg.Add(1)
	go func() {
		defer f.bg.Done()
		tick := time.NewTicker(duration / 3)
		defer tick.Stop()
		for {
			select {
			case <-rctx.Done():
				return
			case <-tick.C:
			}
			l, err := f.cfg.Client.CoordinationV1().Leases(f.cfg.LeaseNamespace).Get(rctx, LeasePrefix+node, metav1.GetOptions{})
			if err != nil || l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != f.cfg.Identity {
				f.log.Warn("power Lease lost", "node", node, "err", err)
				f.stopRenewal(node)
				f.queue.Add(node)
				return
			}
			l.Spec.RenewTime = ptr.To(metav1.NewMicroTime(f.cfg.Now()))
			if _, err := f.cfg.Client.CoordinationV1().Leases(f.cfg.LeaseNamespace).Update(rctx, l, metav1.UpdateOptions{}); err != nil {
				f.log.Warn("power Lease renewal failed", "node", node, "err", err)
			}
		}
	}()
}

func (f *Fencer) stopRenewal(node string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if s, ok := f.state[node]; ok && s.renew != nil {
		s.renew()
		s.renew = nil
	}
}

// releaseLease gives node's Lease back (deletes it if we hold it).
func (f *Fencer) releaseLease(ctx context.Context, node string) error {
	f.stopRenewal(node)
	l, err := f.leases.Get(LeasePrefix + node)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != f.cfg.Identity {
		return nil
	}
	err = f.cfg.Client.CoordinationV1().Leases(f.cfg.LeaseNamespace).Delete(ctx, l.Name,
		metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &l.ResourceVersion}})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil
	}
	if err == nil {
		f.log.Info("power Lease released", "node", node)
	}
	return err
}
