//go:build ignore

// Kubernetes v1.37: cAdvisor's MachineInfo takes a logger and comes from
// cadvisor/lib/model; the CRI client is made with a builder.

package main

import (
	"context"

	cadvisorapi "github.com/google/cadvisor/lib/model"
	v1 "k8s.io/api/core/v1"
	internalapi "k8s.io/cri-api/pkg/apis"
	remote "k8s.io/cri-client/pkg"
	"k8s.io/klog/v2"
)

func (m *machineInfo) MachineInfo(logger klog.Logger) (*cadvisorapi.MachineInfo, error) {
	info, err := m.Fake.MachineInfo(logger)
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
	return remote.NewRemoteRuntimeServiceBuilder().
		WithEndpoint(endpoint).
		WithConnectionTimeout(runtimeTimeout).
		Build(ctx)
}
