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
}

// NewAttacher returns an Attacher; Run runs it. A nil logger means
// slog.Default().
func NewAttacher(client kubernetes.Interface, logger *slog.Logger) *Attacher {
	if logger == nil {
		logger = slog.Default()
	}
	factory := informers.NewSharedInformerFactory(client, 0)
	inf := factory.Storage().V1().VolumeAttachments()
	a := &Attacher{
		client:  client,
		log:     logger.With("component", "attacher"),
		factory: factory,
		lister:  inf.Lister(),
		synced:  inf.Informer().HasSynced,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "csi-fenced-test-attacher"}),
	}
	enqueue := func(obj any) {
		if va, ok := obj.(*storagev1.VolumeAttachment); ok && va.Spec.Attacher == DriverName {
			a.queue.Add(va.Name)
		}
	}
	// Deletes need no handler: an object with our finalizer is updated
	// (deletionTimestamp) before it goes away.
	inf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
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
	if cached.Status.Attached && slices.Contains(cached.Finalizers, AttacherFinalizer) {
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
	if va.Status.Attached {
		return nil
	}
	va.Status.Attached = true
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
	if va.Status.Attached {
		va.Status.Attached = false
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
