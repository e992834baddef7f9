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
	srv := httptest.NewServer(Handler(NewRegistry("v1.2.3"), func() error { return notReady }))
	t.Cleanup(srv.Close)

	get := func(path string) (int, string) {
		t.Helper()
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
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
}
