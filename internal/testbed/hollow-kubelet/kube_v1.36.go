//go:build ignore

// Kubernetes v1.36: the CRI client takes a context (for its logger) and
// whether to list by streaming, which kubemark leaves off.

package main

import (
	"context"

	cadvisorapi "github.com/google/cadvisor/info/v1"
	"go.opentelemetry.io/otel/trace/noop"
	v1 "k8s.io/api/core/v1"
	internalapi "k8s.io/cri-api/pkg/apis"
	remote "k8s.io/cri-client/pkg"
)

func (m *machineInfo) MachineInfo() (*cadvisorapi.MachineInfo, error) {
	info, err := m.Fake.MachineInfo()
	if err != nil {
		return nil, err
	}
	info.BootID, info.SystemUUID = m.bootID, m.systemUUID
	return info, nil
}

func (honestProbes) UpdatePodStatus(_ context.Context, _ *v1.Pod, status *v1.PodStatus) {
	honest(status)
}

func newRuntimeService(ctx context.Context, endpoint string) (internalapi.RuntimeService, error) {
	return remote.NewRemoteRuntimeService(ctx, endpoint, runtimeTimeout, noop.NewTracerProvider(), false)
}
