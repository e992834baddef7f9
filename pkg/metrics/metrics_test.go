package metrics

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestEndpoints(t *testing.T) {
	var notReady error = errors.New("joining the ring")
	srv := httptest.NewServer(Handler(NewRegistry("v1.2.3"), func() error { return notReady }, false))
	t.Cleanup(srv.Close)
	profiled := httptest.NewServer(Handler(NewRegistry("v1.2.3"), func() error { return nil }, true))
	t.Cleanup(profiled.Close)

	getFrom := func(srv *httptest.Server, path string) (int, string) {
		t.Helper()
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	get := func(path string) (int, string) { t.Helper(); return getFrom(srv, path) }
	if code, body := get("/metrics"); code != 200 || !strings.Contains(body, `fenced_build_info{goversion="go`) ||
		!strings.Contains(body, `version="v1.2.3"} 1`) || !strings.Contains(body, "process_resident_memory_bytes") {
		t.Errorf("/metrics: %d\n%s", code, body)
	}
	if code, _ := get("/healthz"); code != 200 {
		t.Errorf("/healthz: %d", code)
	}
	if code, body := get("/readyz"); code != 503 || !strings.Contains(body, "joining the ring") {
		t.Errorf("/readyz before ready: %d %q", code, body)
	}
	notReady = nil
	if code, _ := get("/readyz"); code != 200 {
		t.Errorf("/readyz when ready: %d", code)
	}
	// Profiles only when asked for (--profiling).
	if code, _ := get("/debug/pprof/heap"); code != 404 {
		t.Errorf("/debug/pprof/heap without profiling: %d, want 404", code)
	}
	if code, body := getFrom(profiled, "/debug/pprof/goroutine?debug=1"); code != 200 || !strings.Contains(body, "goroutine profile") {
		t.Errorf("/debug/pprof/goroutine with profiling: %d %.80q", code, body)
	}
	if code, _ := getFrom(profiled, "/debug/pprof/heap"); code != 200 {
		t.Errorf("/debug/pprof/heap with profiling: %d", code)
	}
}
