//go:build ignore

// Kubernetes v1.34: the APIs the hollow kubelet uses as they were until
// v1.35 (see main.go).

package main

import (
	"context"

	cadvisorapi "github.com/google/cadvisor/info/v1"
	"go.opentelemetry.io/otel/trace/noop"
	v1 "k8s.io/api/core/v1"
	internalapi "k8s.io/cri-api/pkg/apis"
	remote "k8s.io/cri-client/pkg"
	"k8s.io/klog/v2"
)

func (m *machineInfo) MachineInfo() (*cadvisorapi.MachineInfo, error) {
	info, err := m.Fake.MachineInfo()
	if err != nil {
		return nil, err
	}
	info.BootID, info.SystemUUID = m.bootID, m.systemUUID
	return info, nil
}

func (honestProbes) UpdatePodStatus(_ *v1.Pod, status *v1.PodStatus) { honest(status) }

func newRuntimeService(ctx context.Context, endpoint string) (internalapi.RuntimeService, error) {
	logger := klog.FromContext(ctx)
	return remote.NewRemoteRuntimeService(endpoint, runtimeTimeout, noop.NewTracerProvider(), &logger)
}
