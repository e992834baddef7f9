package csi

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"time"

	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	storagelisters "k8s.io/client-go/listers/storage/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"
	"k8s.io/client-go/util/workqueue"
)

// AttachEventKind says what happened to a VolumeAttachment.
type AttachEventKind string

// The kinds of AttachEvent.
const (
	Attached AttachEventKind = "attached"
	Detached AttachEventKind = "detached"
)

// AttachEvent records when the Attacher attached or detached a volume.
type AttachEvent struct {
	Time time.Time
	VA   string // VolumeAttachment name
	Node string
	PV   string
	Kind AttachEventKind
}

// Attacher does for DriverName what external-attacher does for a real
// driver, with nothing to call on a storage backend: it marks
// VolumeAttachments attached (with its finalizer) and, once they are being
// deleted, detached (without the finalizer, so that they go away).
type Attacher struct {
	client kubernetes.Interface
	log    *slog.Logger

	factory informers.SharedInformerFactory
	lister  storagelisters.VolumeAttachmentLister
	synced  cache.InformerSynced
	queue   workqueue.TypedRateLimitingInterface[string]

	mu     sync.Mutex
	events []AttachEvent
	// failAttach and failDetach are the errors the "driver" reports for a
	// volume on a node (FailAttach, FailDetach).
	failAttach, failDetach map[volumeOnNode]string
	// exclusive holds the volumes that attach to one node at a time
	// (Exclusive).
	exclusive map[string]bool
}

// volumeOnNode keys the Attacher's failure knobs: a PersistentVolume on a
// node; an empty Node matches every node.
type volumeOnNode struct{ PV, Node string }

// NewAttacher returns an Attacher; Run runs it. A nil logger means
// slog.Default().
func NewAttacher(client kubernetes.Interface, logger *slog.Logger) *Attacher {
	if logger == nil {
		logger = slog.Default()
	}
	factory := informers.NewSharedInformerFactory(client, 0)
	inf := factory.Storage().V1().VolumeAttachments()
	a := &Attacher{
		client:     client,
		log:        logger.With("component", "attacher"),
		factory:    factory,
		lister:     inf.Lister(),
		synced:     inf.Informer().HasSynced,
		failAttach: map[volumeOnNode]string{},
		failDetach: map[volumeOnNode]string{},
		exclusive:  map[string]bool{},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "csi-fenced-test-attacher"}),
	}
	enqueue := func(obj any) {
		if va, ok := obj.(*storagev1.VolumeAttachment); ok && va.Spec.Attacher == DriverName {
			a.queue.Add(va.Name)
		}
	}
	// An object with our finalizer is updated (deletionTimestamp) before
	// it goes away; when it goes, an Exclusive volume's other attachments
	// may go on (also when someone removed our finalizer by hand).
	inf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if va, ok := obj.(*storagev1.VolumeAttachment); ok && va.Spec.Attacher == DriverName && va.Spec.Source.PersistentVolumeName != nil {
				a.retry(*va.Spec.Source.PersistentVolumeName)
			}
		},
	})
	return a
}

// Run handles VolumeAttachments until ctx is done, and returns once its
// goroutines have stopped.
func (a *Attacher) Run(ctx context.Context) {
	var wg sync.WaitGroup
	defer func() {
		a.queue.ShutDown()
		wg.Wait()
		a.factory.Shutdown()
	}()
	a.factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), a.synced) {
		return
	}
	wg.Go(func() {
		for a.processNext(ctx) {
		}
	})
	<-ctx.Done()
}

// Events returns the attach and detach events so far, oldest first.
func (a *Attacher) Events() []AttachEvent {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.events)
}

// FailAttach makes the "driver" fail to attach pv to node ("": any node)
// with message, as external-attacher reports a failing
// ControllerPublishVolume: status.attachError set, status.attached false.
// An empty message clears the failure, and the volume is attached.
func (a *Attacher) FailAttach(pv, node, message string) {
	a.setFailure(a.failAttach, pv, node, message)
}

// FailDetach makes the "driver" fail to detach pv from node ("": any node)
// with message, as external-attacher reports a failing
// ControllerUnpublishVolume: the VolumeAttachment, once deleted, keeps its
// finalizer, status.attached stays true and status.detachError is set — a
// stale VolumeAttachment that blocks the volume on that node. An empty
// message clears the failure, and the pending detach completes.
func (a *Attacher) FailDetach(pv, node, message string) {
	a.setFailure(a.failDetach, pv, node, message)
}

// Exclusive makes pv a single-attach volume, as a block device of most
// storage backends (EBS, Azure Disk, a Mayastor nexus) is: while it is
// attached to one node, attaching it to another fails with AlreadyPublished
// in status.attachError, until the first attachment is detached. Without
// it, the Attacher attaches anything the attach/detach controller asks
// for.
func (a *Attacher) Exclusive(pv string) {
	a.mu.Lock()
	a.exclusive[pv] = true
	a.mu.Unlock()
}

// AlreadyPublished is the attach error of an Exclusive volume that is
// attached to another node; the node's name follows.
const AlreadyPublished = "rpc error: code = FailedPrecondition desc = ControllerPublishVolume: volume is published on another node (test driver, single-attach): "

// publishedElsewhere returns the node other than va's that va's Exclusive
// volume is attached to, or "".
func (a *Attacher) publishedElsewhere(va *storagev1.VolumeAttachment) string {
	pv := va.Spec.Source.PersistentVolumeName
	if pv == nil {
		return ""
	}
	a.mu.Lock()
	exclusive := a.exclusive[*pv]
	a.mu.Unlock()
	if !exclusive {
		return ""
	}
	// From the API server, not the cache: two attaches in a row must see
	// each other.
	list, err := a.client.StorageV1().VolumeAttachments().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		return "(unknown: " + err.Error() + ")"
	}
	for _, o := range list.Items {
		if o.Name != va.Name && o.Spec.Source.PersistentVolumeName != nil && *o.Spec.Source.PersistentVolumeName == *pv && o.Status.Attached {
			return o.Spec.NodeName
		}
	}
	return ""
}

func (a *Attacher) setFailure(m map[volumeOnNode]string, pv, node, message string) {
	a.mu.Lock()
	if message == "" {
		delete(m, volumeOnNode{pv, node})
	} else {
		m[volumeOnNode{pv, node}] = message
	}
	a.mu.Unlock()
	a.retry(pv)
}

// retry queues every VolumeAttachment of pv, as external-attacher retries
// with backoff until the driver succeeds.
func (a *Attacher) retry(pv string) {
	vas, err := a.lister.List(labels.Everything())
	if err != nil {
		return
	}
	for _, va := range vas {
		if va.Spec.Attacher == DriverName && va.Spec.Source.PersistentVolumeName != nil && *va.Spec.Source.PersistentVolumeName == pv {
			a.queue.Add(va.Name)
		}
	}
}

// failure returns the error the knobs in m set for va's volume on its
// node, or "".
func (a *Attacher) failure(m map[volumeOnNode]string, va *storagev1.VolumeAttachment) string {
	if va.Spec.Source.PersistentVolumeName == nil {
		return ""
	}
	pv := *va.Spec.Source.PersistentVolumeName
	a.mu.Lock()
	defer a.mu.Unlock()
	if msg, ok := m[volumeOnNode{pv, va.Spec.NodeName}]; ok {
		return msg
	}
	return m[volumeOnNode{pv, ""}]
}

func (a *Attacher) processNext(ctx context.Context) bool {
	name, quit := a.queue.Get()
	if quit {
		return false
	}
	defer a.queue.Done(name)
	if err := a.sync(ctx, name); err != nil {
		a.log.Error("sync VolumeAttachment", "va", name, "err", err)
		a.queue.AddRateLimited(name)
		return true
	}
	a.queue.Forget(name)
	return true
}

func (a *Attacher) sync(ctx context.Context, name string) error {
	cached, err := a.lister.Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if cached.DeletionTimestamp != nil {
		if !slices.Contains(cached.Finalizers, AttacherFinalizer) {
			return nil
		}
		return a.update(ctx, name, a.detach)
	}
	if cached.Status.Attached && cached.Status.AttachError == nil && slices.Contains(cached.Finalizers, AttacherFinalizer) {
		return nil
	}
	return a.update(ctx, name, a.attach)
}

// update applies change to the live object, from a fresh GET on every
// conflict: the cache may lag behind our own previous writes.
func (a *Attacher) update(ctx context.Context, name string, change func(context.Context, *storagev1.VolumeAttachment) error) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		va, err := a.client.StorageV1().VolumeAttachments().Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		return change(ctx, va)
	})
}

// attach adds the finalizer first, so that the VolumeAttachment cannot go
// away while the volume counts as attached, then sets status.attached.
func (a *Attacher) attach(ctx context.Context, va *storagev1.VolumeAttachment) error {
	if va.DeletionTimestamp != nil {
		return nil // the update that set it queues a detach
	}
	vas := a.client.StorageV1().VolumeAttachments()
	var err error
	if !slices.Contains(va.Finalizers, AttacherFinalizer) {
		va.Finalizers = append(va.Finalizers, AttacherFinalizer)
		if va, err = vas.Update(ctx, va, metav1.UpdateOptions{}); err != nil {
			return err
		}
	}
	msg := a.failure(a.failAttach, va)
	if other := a.publishedElsewhere(va); msg == "" && other != "" {
		msg = AlreadyPublished + other
	}
	if msg != "" {
		if va.Status.AttachError != nil && va.Status.AttachError.Message == msg && !va.Status.Attached {
			return nil
		}
		va.Status.Attached = false
		va.Status.AttachError = &storagev1.VolumeError{Time: metav1.Now(), Message: msg}
		_, err = vas.UpdateStatus(ctx, va, metav1.UpdateOptions{})
		if err == nil {
			a.log.Info("attach failed", "va", va.Name, "node", va.Spec.NodeName, "err", msg)
		}
		return err
	}
	if va.Status.Attached && va.Status.AttachError == nil {
		return nil
	}
	va.Status.Attached = true
	va.Status.AttachError = nil
	if _, err = vas.UpdateStatus(ctx, va, metav1.UpdateOptions{}); err != nil {
		return err
	}
	a.record(va, Attached)
	return nil
}

// detach clears status.attached, then removes the finalizer, which lets the
// API server delete the object.
func (a *Attacher) detach(ctx context.Context, va *storagev1.VolumeAttachment) error {
	vas := a.client.StorageV1().VolumeAttachments()
	var err error
	if msg := a.failure(a.failDetach, va); msg != "" && va.Status.Attached {
		// The finalizer stays: the volume may still be attached.
		if va.Status.DetachError != nil && va.Status.DetachError.Message == msg {
			return nil
		}
		va.Status.DetachError = &storagev1.VolumeError{Time: metav1.Now(), Message: msg}
		_, err = vas.UpdateStatus(ctx, va, metav1.UpdateOptions{})
		if err == nil {
			a.log.Info("detach failed", "va", va.Name, "node", va.Spec.NodeName, "err", msg)
		}
		return err
	}
	if va.Status.Attached || va.Status.DetachError != nil {
		va.Status.Attached = false
		va.Status.DetachError = nil
		if va, err = vas.UpdateStatus(ctx, va, metav1.UpdateOptions{}); err != nil {
			return err
		}
	}
	i := slices.Index(va.Finalizers, AttacherFinalizer)
	if i < 0 {
		return nil
	}
	va.Finalizers = slices.Delete(va.Finalizers, i, i+1)
	if _, err = vas.Update(ctx, va, metav1.UpdateOptions{}); err != nil {
		return err
	}
	a.record(va, Detached)
	if pv := va.Spec.Source.PersistentVolumeName; pv != nil {
		a.retry(*pv) // an Exclusive volume's other attachments may go on now
	}
	return nil
}

func (a *Attacher) record(va *storagev1.VolumeAttachment, kind AttachEventKind) {
	e := AttachEvent{Time: time.Now(), VA: va.Name, Node: va.Spec.NodeName, Kind: kind}
	if pv := va.Spec.Source.PersistentVolumeName; pv != nil {
		e.PV = *pv
	}
	a.log.Info("volume "+string(kind), "va", e.VA, "node", e.Node, "pv", e.PV)
	a.mu.Lock()
	a.events = append(a.events, e)
	a.mu.Unlock()
}
