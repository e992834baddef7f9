package fencing

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/informers"
)

// TrimForCache is the transform of every informer of an agent: it drops
// from each object what no part of fenced reads and the API server sends
// with every one — the managed fields (the server-side apply bookkeeping,
// often the largest part of an object) and, of a Node, its list of
// container images (up to 50 entries a node). A fencer caches every Node,
// every kubelet Lease and every VolumeAttachment of the cluster. No Node
// is written from a cache (every Node write reads it from the API server
// first); the one object updated from a cache, an expired power Lease
// taken over, goes without managed fields, which the API server takes as
// "keep them as they are".
func TrimForCache(o any) (any, error) {
	if m, err := meta.Accessor(o); err == nil {
		m.SetManagedFields(nil)
	}
	if n, ok := o.(*corev1.Node); ok {
		n.Status.Images = nil
	}
	return o, nil
}

// trimmed is the informer factory option of TrimForCache.
var trimmed = informers.WithTransform(TrimForCache)
