// Package metrics holds fenced's Prometheus registry and the agent's HTTP
// endpoints: /metrics, /healthz (the process serves), /readyz (the agent
// has finished starting and can do its job) and, with --profiling,
// /debug/pprof/.
//
// Metric names start with fenced_ and carry their unit.
package metrics

import (
	"net/http"
	"net/http/pprof"
	"runtime"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// NewRegistry returns a registry with the Go runtime and process
// collectors and fenced_build_info.
func NewRegistry(version string) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	info := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "fenced_build_info",
		Help: "Always 1; labels carry the fenced version and the Go version it was built with.",
	}, []string{"version", "goversion"})
	info.WithLabelValues(version, runtime.Version()).Set(1)
	reg.MustRegister(info)
	return reg
}

// Handler serves /metrics from reg, /healthz, and /readyz, which answers
// 503 with the reason while ready returns an error; with profiling, Go's
// profiles under /debug/pprof/ too (net/http/pprof), as Kubernetes'
// components serve them with --profiling.
func Handler(reg *prometheus.Registry, ready func() error, profiling bool) http.Handler {
	mux := http.NewServeMux()
	if profiling {
		mux.HandleFunc("GET /debug/pprof/", pprof.Index)
		mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	}
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if err := ready(); err != nil {
			http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	return mux
}

// Names of metrics exported by one package and read by alerts or tests
// elsewhere.
const (
	// StaleAttachmentsMetric is how many VolumeAttachments a fencer holds
	// for stale right now (pkg/stale): on a Ready node that does not use
	// the volume, or on a deleted Node, for the grace period.
	StaleAttachmentsMetric = "fenced_stale_volume_attachments"
	// StaleAttachmentsDeletedMetric counts the stale VolumeAttachments a
	// fencer deleted (policy.deleteStaleVolumeAttachments, pkg/stale).
	StaleAttachmentsDeletedMetric = "fenced_stale_volume_attachments_deleted_total"
)
