package csi

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
)

// startAttacher runs an Attacher on client until the test ends, and returns
// once its informer watches: the fake clientset drops events that happen
// between its List and its Watch.
func startAttacher(t *testing.T, client *fake.Clientset) *Attacher {
	t.Helper()
	watching := make(chan struct{})
	var once sync.Once
	client.PrependWatchReactor("volumeattachments", func(action clienttesting.Action) (bool, watch.Interface, error) {
		w, err := client.Tracker().Watch(action.GetResource(), action.GetNamespace())
		once.Do(func() { close(watching) })
		return true, w, err
	})

	a := NewAttacher(client, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		a.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	select {
	case <-watching:
	case <-time.After(10 * time.Second):
		t.Fatal("attacher does not watch VolumeAttachments")
	}
	return a
}

// waitVA waits until the VolumeAttachment satisfies cond.
func waitVA(t *testing.T, client *fake.Clientset, name, what string, cond func(*storagev1.VolumeAttachment) bool) *storagev1.VolumeAttachment {
	t.Helper()
	var va *storagev1.VolumeAttachment
	err := wait.PollUntilContextTimeout(t.Context(), 5*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		var err error
		va, err = client.StorageV1().VolumeAttachments().Get(ctx, name, metav1.GetOptions{})
		return err == nil && cond(va), err
	})
	if err != nil {
		t.Fatalf("VolumeAttachment %s never %s: %v (last %+v)", name, what, err, va)
	}
	return va
}

func newVA(name, attacher, node, pv string) *storagev1.VolumeAttachment {
	return &storagev1.VolumeAttachment{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: storagev1.VolumeAttachmentSpec{
			Attacher: attacher,
			NodeName: node,
			Source:   storagev1.VolumeAttachmentSource{PersistentVolumeName: &pv},
		},
	}
}

func TestAttacher(t *testing.T) {
	// One VA exists before the attacher starts, one is created after.
	client := fake.NewClientset(newVA("va-a", DriverName, "node-a", "pv1"))
	a := startAttacher(t, client)
	vas := client.StorageV1().VolumeAttachments()
	for _, va := range []*storagev1.VolumeAttachment{
		newVA("va-b", DriverName, "node-b", "pv2"),
		newVA("va-other", "other.driver", "node-a", "pv3"),
	} {
		if _, err := vas.Create(t.Context(), va, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	attached := func(va *storagev1.VolumeAttachment) bool {
		return va.Status.Attached && slices.Contains(va.Finalizers, AttacherFinalizer)
	}
	for _, name := range []string{"va-a", "va-b"} {
		waitVA(t, client, name, "attached", attached)
	}

	// Deleting an object with finalizers only sets deletionTimestamp; the
	// fake deletes at once, so set it as the API server would.
	va := waitVA(t, client, "va-a", "attached", attached)
	va.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	if _, err := vas.Update(t.Context(), va, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitVA(t, client, "va-a", "detached", func(va *storagev1.VolumeAttachment) bool {
		return !va.Status.Attached && !slices.Contains(va.Finalizers, AttacherFinalizer)
	})

	// The other driver's VA was left alone.
	other, err := vas.Get(t.Context(), "va-other", metav1.GetOptions{})
	if err != nil || other.Status.Attached || len(other.Finalizers) != 0 {
		t.Errorf("va-other = %+v, %v", other, err)
	}

	// An event is recorded just after the update that the wait above saw.
	var events []AttachEvent
	wait.PollUntilContextTimeout(t.Context(), 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		events = a.Events()
		return len(events) >= 3, nil
	})
	var got []string
	for _, e := range events {
		got = append(got, e.VA+" "+e.Node+" "+e.PV+" "+string(e.Kind))
		if e.Time.IsZero() {
			t.Errorf("event %+v has no time", e)
		}
	}
	slices.Sort(got)
	want := []string{"va-a node-a pv1 attached", "va-a node-a pv1 detached", "va-b node-b pv2 attached"}
	if !slices.Equal(got, want) {
		t.Errorf("events = %q, want %q", got, want)
	}
}

func TestAttacherRetriesOnConflict(t *testing.T) {
	client := fake.NewClientset()
	// The first status update conflicts, as when another writer got there
	// first.
	var conflicted atomic.Bool
	client.PrependReactor("update", "volumeattachments", func(action clienttesting.Action) (bool, runtime.Object, error) {
		if action.GetSubresource() == "status" && conflicted.CompareAndSwap(false, true) {
			return true, nil, apierrors.NewConflict(storagev1.Resource("volumeattachments"), "va", errors.New("test"))
		}
		return false, nil, nil
	})
	startAttacher(t, client)
	if _, err := client.StorageV1().VolumeAttachments().Create(t.Context(), newVA("va", DriverName, "n", "pv"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitVA(t, client, "va", "attached", func(va *storagev1.VolumeAttachment) bool { return va.Status.Attached })
	if !conflicted.Load() {
		t.Error("the status update never conflicted")
	}
}

func TestAttacherFailures(t *testing.T) {
	client := fake.NewClientset()
	a := startAttacher(t, client)
	vas := client.StorageV1().VolumeAttachments()
	const attachErr, detachErr = "rpc error: code = Internal desc = no path to node-b", "rpc error: code = Internal desc = still published"
	a.FailAttach("pv1", "node-b", attachErr)
	a.FailDetach("pv1", "node-a", detachErr)
	for _, va := range []*storagev1.VolumeAttachment{newVA("va-a", DriverName, "node-a", "pv1"), newVA("va-b", DriverName, "node-b", "pv1")} {
		if _, err := vas.Create(t.Context(), va, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	// node-b: the attach fails with the driver's error, finalizer kept.
	waitVA(t, client, "va-b", "failed to attach", func(va *storagev1.VolumeAttachment) bool {
		return !va.Status.Attached && va.Status.AttachError != nil && va.Status.AttachError.Message == attachErr &&
			slices.Contains(va.Finalizers, AttacherFinalizer)
	})
	// node-a: attached; once deleted, the detach fails and the object stays.
	va := waitVA(t, client, "va-a", "attached", func(va *storagev1.VolumeAttachment) bool { return va.Status.Attached })
	va.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	if _, err := vas.Update(t.Context(), va, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitVA(t, client, "va-a", "failed to detach", func(va *storagev1.VolumeAttachment) bool {
		return va.Status.Attached && va.Status.DetachError != nil && va.Status.DetachError.Message == detachErr &&
			slices.Contains(va.Finalizers, AttacherFinalizer)
	})

	// The driver recovers: both complete.
	a.FailAttach("pv1", "node-b", "")
	a.FailDetach("pv1", "node-a", "")
	waitVA(t, client, "va-b", "attached", func(va *storagev1.VolumeAttachment) bool {
		return va.Status.Attached && va.Status.AttachError == nil
	})
	waitVA(t, client, "va-a", "detached", func(va *storagev1.VolumeAttachment) bool {
		return !va.Status.Attached && va.Status.DetachError == nil && !slices.Contains(va.Finalizers, AttacherFinalizer)
	})
}

func TestAttacherExclusive(t *testing.T) {
	client := fake.NewClientset()
	a := startAttacher(t, client)
	a.Exclusive("pv1")
	vas := client.StorageV1().VolumeAttachments()
	if _, err := vas.Create(t.Context(), newVA("va-a", DriverName, "node-a", "pv1"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitVA(t, client, "va-a", "attached", func(va *storagev1.VolumeAttachment) bool { return va.Status.Attached })
	if _, err := vas.Create(t.Context(), newVA("va-b", DriverName, "node-b", "pv1"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitVA(t, client, "va-b", "refused", func(va *storagev1.VolumeAttachment) bool {
		return !va.Status.Attached && va.Status.AttachError != nil && va.Status.AttachError.Message == AlreadyPublished+"node-a"
	})
	// va-a goes (its finalizer removed by hand, the fake deletes at once):
	// va-b attaches.
	if err := vas.Delete(t.Context(), "va-a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitVA(t, client, "va-b", "attached", func(va *storagev1.VolumeAttachment) bool {
		return va.Status.Attached && va.Status.AttachError == nil
	})
}
