//go:build ignore

// The probe manager's UpdatePodStatus as it was until Kubernetes v1.35.

package main

import v1 "k8s.io/api/core/v1"

func (honestProbes) UpdatePodStatus(_ *v1.Pod, status *v1.PodStatus) { honest(status) }
