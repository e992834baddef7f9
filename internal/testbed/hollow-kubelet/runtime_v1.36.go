//go:build ignore

// Kubernetes v1.36: the CRI client takes a context (for its logger) and
// whether to list by streaming, which kubemark leaves off.

package main

import (
	"context"

	"go.opentelemetry.io/otel/trace/noop"
	internalapi "k8s.io/cri-api/pkg/apis"
	remote "k8s.io/cri-client/pkg"
)

func newRuntimeService(ctx context.Context, endpoint string) (internalapi.RuntimeService, error) {
	return remote.NewRemoteRuntimeService(ctx, endpoint, runtimeTimeout, noop.NewTracerProvider(), false)
}
