//go:build ignore

// Kubernetes v1.37: cAdvisor's MachineInfo takes a logger and comes from
// cadvisor/lib/model.

package main

import (
	cadvisorapi "github.com/google/cadvisor/lib/model"
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
