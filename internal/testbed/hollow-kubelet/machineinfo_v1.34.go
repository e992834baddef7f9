//go:build ignore

// cAdvisor's MachineInfo as it was until Kubernetes v1.37.

package main

import cadvisorapi "github.com/google/cadvisor/info/v1"

func (m *machineInfo) MachineInfo() (*cadvisorapi.MachineInfo, error) {
	info, err := m.Fake.MachineInfo()
	if err != nil {
		return nil, err
	}
	info.BootID, info.SystemUUID = m.bootID, m.systemUUID
	return info, nil
}
