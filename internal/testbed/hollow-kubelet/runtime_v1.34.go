//go:build ignore

// The CRI client as it was made until Kubernetes v1.36.

package main

import (
	"context"

	"go.opentelemetry.io/otel/trace/noop"
	internalapi "k8s.io/cri-api/pkg/apis"
	remote "k8s.io/cri-client/pkg"
	"k8s.io/klog/v2"
)

func newRuntimeService(ctx context.Context, endpoint string) (internalapi.RuntimeService, error) {
	logger := klog.FromContext(ctx)
	return remote.NewRemoteRuntimeService(endpoint, runtimeTimeout, noop.NewTracerProvider(), &logger)
}
