package fencing

import (
	"context"
	"errors"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"fenced.io/fenced/pkg/fencing/core"
	"fenced.io/fenced/pkg/identity/publish"
)

// The I/O half of the watchdog level (core's watchdoglevel.go,
// docs/design.md §10): the node's armed statement and its fence order, read
// from the Lease informer of fenced's namespace, and the orders written and
// withdrawn.

// watchdogLevels is an Inventory that knows which nodes end in a watchdog
// level (device.Inventory does; an inventory without it has none).
type watchdogLevels interface {
	WatchdogLevel(node string) int
}

// watchdogLevel is the number of node's watchdog level in inv, 0: none.
func watchdogLevel(inv Inventory, node string) int {
	if w, ok := inv.(watchdogLevels); ok {
		return w.WatchdogLevel(node)
	}
	return 0
}

// usesWatchdog reports whether any Node the fencer knows has a watchdog
// level.
func (f *Fencer) usesWatchdog() bool {
	if f.nodes == nil {
		return false
	}
	nodes, err := f.nodes.List(labels.Everything())
	if err != nil {
		return false
	}
	inv := f.settings().Inventory
	return slices.ContainsFunc(nodes, func(n *corev1.Node) bool { return watchdogLevel(inv, n.Name) > 0 })
}

// seenOrder is a fence order as this fencer first saw it: the object (its
// UID), when, and the kubelet renewal it knew then.
type seenOrder struct {
	uid   types.UID
	at    time.Time
	renew time.Time
}

// watchdogObs is what this fencer knows now of node's watchdog level
// (number level): its armed statement for the key's boot, checked against
// that key, and the fence order standing for it, dated from when this
// fencer first saw that very object (renew: the kubelet renewal known
// now, the baseline of a first sighting). Both count only while their
// admission policies are in force: they alone keep other nodes from
// writing the statement, and anyone but fencers from writing or deleting
// orders.
func (f *Fencer) watchdogObs(name string, level int, now, renew time.Time) core.WatchdogObs {
	o := core.WatchdogObs{Level: level}
	if f.leases == nil {
		return o
	}
	switch {
	case !f.policyOK.Load():
		o.Refused = "the agent identity admission policy is not in force (see the fencer's log)"
		return o
	case !f.orderPolicyOK.Load():
		o.Refused = "the fence orders' admission policy " + publish.OrderPolicyName + " is not in force (see the fencer's log)"
		return o
	}
	if l, err := f.leases.Get(publish.LeaseName(name)); err == nil {
		boot, a, err := publish.ArmedOf(l)
		switch {
		case errors.Is(err, publish.ErrNotArmed) || errors.Is(err, publish.ErrKeyWithdrawn):
		case err != nil:
			o.Refused = err.Error()
		default:
			o.Arm = &core.WatchdogArm{BootID: boot, Timeout: a.Timeout, Confirm: a.Confirm, Device: a.Device, Software: a.Software}
		}
	}
	var ord publish.Order
	var ok bool
	if l, err := f.leases.Get(publish.OrderLeaseName(name)); err == nil {
		ord, ok = publish.OrderOf(l)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.stateOf(name)
	if !ok {
		s.order = seenOrder{}
		return o
	}
	if s.order.at.IsZero() || s.order.uid != ord.UID {
		s.order = seenOrder{uid: ord.UID, at: now, renew: renew}
		f.log.Info("fence order seen: the node's watchdog is to reset it", "node", name, "boot", ord.BootID, "by", ord.By)
	}
	o.Order = &core.FenceOrder{BootID: ord.BootID, SeenAt: s.order.at, KubeletRenewAtSeen: s.order.renew}
	return o
}

// ordered reports whether a fence order stands for n's current boot: its
// watchdog is resetting it, so it counts as down (one control-plane node
// at a time), though the power Lease of the order went back.
func (f *Fencer) ordered(n *corev1.Node) bool {
	if f.leases == nil {
		return false
	}
	l, err := f.leases.Get(publish.OrderLeaseName(n.Name))
	if err != nil {
		return false
	}
	o, ok := publish.OrderOf(l)
	return ok && o.BootID == n.Status.NodeInfo.BootID
}

// writeOrder writes the fence order a asks for, in this fencer's name.
func (f *Fencer) writeOrder(ctx context.Context, name string, a core.Action) error {
	err := publish.WriteOrder(ctx, f.cfg.Client, f.cfg.LeaseNamespace, name, a.BootID, f.cfg.Identity)
	f.cfg.Metrics.fenceOrder("write", err)
	if err != nil {
		return err
	}
	f.log.Warn("fence order written: the node's watchdog is to reset it", "node", name, "boot", a.BootID, "why", a.Message)
	return nil
}

// withdrawOrder withdraws the fence order of a boot that is over.
func (f *Fencer) withdrawOrder(ctx context.Context, name string, a core.Action) error {
	withdrawn, err := publish.WithdrawOrder(ctx, f.cfg.Client, f.cfg.LeaseNamespace, name, a.BootID)
	if err != nil || withdrawn {
		f.cfg.Metrics.fenceOrder("withdraw", err)
	}
	if withdrawn {
		f.log.Info("fence order withdrawn", "node", name, "boot", a.BootID, "why", a.Message)
	}
	return err
}
