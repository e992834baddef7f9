//go:build ignore

// Kubernetes v1.37: the CRI client is made with a builder.

package main

import (
	"context"

	internalapi "k8s.io/cri-api/pkg/apis"
	remote "k8s.io/cri-client/pkg"
)

func newRuntimeService(ctx context.Context, endpoint string) (internalapi.RuntimeService, error) {
	return remote.NewRemoteRuntimeServiceBuilder().
		WithEndpoint(endpoint).
		WithConnectionTimeout(runtimeTimeout).
		Build(ctx)
}
