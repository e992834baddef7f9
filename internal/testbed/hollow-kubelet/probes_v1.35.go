//go:build ignore

// Kubernetes v1.35: the probe manager's UpdatePodStatus takes a context.

package main

import (
	"context"

	v1 "k8s.io/api/core/v1"
)

func (honestProbes) UpdatePodStatus(_ context.Context, _ *v1.Pod, status *v1.PodStatus) {
	honest(status)
}
