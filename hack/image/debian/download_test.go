package debian

import (
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestDownloadFallsBackOnlyWhenUnreachable: a mirror that cannot be
// reached (a network that lets only apt's HTTP out) hands over to the next;
// one that answers with an error status is the answer (a version it no
// longer holds is gone from every mirror of the CDN).
func TestDownloadFallsBackOnlyWhenUnreachable(t *testing.T) {
	serve := func(status int) string {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(status)
			_, _ = w.Write([]byte(r.URL.Path))
		}))
		t.Cleanup(srv.Close)
		return srv.URL + "/"
	}
	// A loopback port nothing listens on.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	unreachable := "http://" + l.Addr().String() + "/"
	_ = l.Close()

	ok, missing := serve(http.StatusOK), serve(http.StatusNotFound)
	for _, tc := range []struct {
		name    string
		mirrors []string
		want    string // the body, or a part of the error
	}{
		{"first answers", []string{ok, unreachable}, "/debian/pool/x.deb"},
		{"first unreachable", []string{unreachable, ok}, "/debian/pool/x.deb"},
		{"first says not found", []string{missing, ok}, "404 Not Found (a version the mirror no longer holds"},
		{"none reachable", []string{unreachable, unreachable}, "no mirror answers"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			saved := Mirrors
			Mirrors = tc.mirrors
			t.Cleanup(func() { Mirrors = saved })
			b, err := Download("debian/pool/x.deb")
			got := string(b)
			if err != nil {
				got = err.Error()
			}
			if !strings.Contains(got, tc.want) {
				t.Errorf("Download = %q; want %q", got, tc.want)
			}
		})
	}
}
