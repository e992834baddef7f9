package fencing

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"fenced.io/fenced/pkg/fencing/core"
	"fenced.io/fenced/pkg/taint"
)

// A fenced node's Node object can be deleted — by a person, or a tool that
// cleans up dead nodes — and its taint and evidence go with it. The core
// reports it (core.ActNodeDeleted) and the fencer remembers the fence here,
// by node name, for the node's return: a Node of that name registering
// again is reported once (core.ActNodeRegistered), with the safety alarm
// if it answers with the boot it was fenced at. The memory is this
// process's: a fencer restarted in between does not report the return.

// deletedFenceMemory is how long a deleted fenced Node is remembered for
// its return: a node back after a day is a new machine to everyone.
const deletedFenceMemory = 24 * time.Hour

// deletedFence is the fence a deleted Node carried, and when it went.
type deletedFence struct {
	evidence core.Evidence
	at       time.Time
}

// rememberDeleted remembers node's fence, forgetting those past
// deletedFenceMemory; f.mu held.
func (f *Fencer) rememberDeleted(node string, ev core.Evidence, now time.Time) {
	for n, d := range f.deleted {
		if now.Sub(d.at) > deletedFenceMemory {
			delete(f.deleted, n)
		}
	}
	f.deleted[node] = deletedFence{evidence: ev, at: now}
}

// fencedWhenDeleted is the fence node's Node carried when it was deleted,
// if this fencer remembers one; f.mu held.
func (f *Fencer) fencedWhenDeleted(node string, now time.Time) *core.Evidence {
	d, ok := f.deleted[node]
	if !ok || now.Sub(d.at) > deletedFenceMemory {
		return nil
	}
	ev := d.evidence
	return &ev
}

// nodeDeleted and nodeRegistered carry out the core's two actions: the
// memory, a log line and the fence history's entry, whose reason is the
// core's (why).
func (f *Fencer) nodeDeleted(name string, ev *core.Evidence, why string) {
	now := f.cfg.Now()
	f.mu.Lock()
	f.rememberDeleted(name, *ev, now)
	f.mu.Unlock()
	f.log.Warn("the Node object of a fenced node was deleted: its taint and evidence went with it", "node", name, "evidence", ev.Method, "boot", ev.BootID)
	f.recordHistory(taint.HistoryEntry{Node: name, Action: taint.HistoryNodeDeleted, At: now, By: f.cfg.Identity,
		Method: ev.Method, Evidence: ev.Summary(), Reason: why})
}

func (f *Fencer) nodeRegistered(name string, ev *core.Evidence, why string) {
	f.mu.Lock()
	delete(f.deleted, name)
	f.mu.Unlock()
	f.log.Info("a node whose Node object was deleted while fenced registered again: "+why, "node", name, "fencedAtBoot", ev.BootID)
	f.recordHistory(taint.HistoryEntry{Node: name, Action: taint.HistoryNodeRegistered, At: f.cfg.Now(), By: f.cfg.Identity,
		Method: ev.Method, Evidence: ev.Summary(), Reason: why})
}

// eventTarget is what an Event about node is recorded on: its Node, or —
// once it is deleted — a reference by name, as the kubelet names its Node
// in its own Events (the UID is the node's name), which `kubectl get
// events --field-selector involvedObject.name=NODE` finds.
func eventTarget(name string, node *corev1.Node) runtime.Object {
	if node != nil {
		return node
	}
	return &corev1.ObjectReference{Kind: "Node", APIVersion: "v1", Name: name, UID: types.UID(name)}
}
