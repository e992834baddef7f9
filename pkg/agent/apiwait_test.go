package agent

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"fenced.io/fenced/internal/testbed/poll"
)

// apiServer is the address of a stand-in for the API server on loopback
// that answers every request with a Status (code, reason, message) as the
// API server words it, over TLS with a certificate the client does not
// know when tls is set.
func apiServer(t *testing.T, code int, reason, message string, tls bool) string {
	t.Helper()
	h := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		fmt.Fprintf(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":%q,"message":%q,"code":%d}`, reason, message, code)
	})
	srv := httptest.NewUnstartedServer(h)
	if tls {
		srv.StartTLS()
	} else {
		srv.Start()
	}
	t.Cleanup(srv.Close)
	return srv.URL
}

// closedPort is the URL of a loopback port nothing listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	return "https://" + addr
}

func clientOf(t *testing.T, url string) kubernetes.Interface {
	t.Helper()
	c, err := kubernetes.NewForConfig(&rest.Config{Host: url, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestWaitNodeListSaysWhy runs the real client against each way an API
// server can fail to answer and checks that the wait names it, with the
// hint for it, and that it ends once the list has come.
func TestWaitNodeListSaysWhy(t *testing.T) {
	tests := []struct {
		name, url, wantErr, wantHint string
	}{
		{"nothing listens", closedPort(t), "connection refused", "nothing answers at the API server's address"},
		{"unknown certificate", apiServer(t, http.StatusOK, "", "", true), "certificate signed by unknown authority", "not signed by the kubeconfig's certificate-authority"},
		{"credentials refused", apiServer(t, http.StatusUnauthorized, "Unauthorized", "Unauthorized", false), "Unauthorized", "refused the credentials"},
		{"RBAC", apiServer(t, http.StatusForbidden, "Forbidden",
			`nodes is forbidden: User "system:serviceaccount:fenced-system:fenced" cannot list resource "nodes" in API group "" at the cluster scope`, false),
			"cannot list resource", "may not list Nodes"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var buf lockedBuffer
			log := slog.New(slog.NewTextHandler(&buf, nil))
			synced := make(chan struct{})
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			done := make(chan error, 1)
			go func() {
				done <- waitNodeList(ctx, clientOf(t, tc.url), func() bool {
					select {
					case <-synced:
						return true
					default:
						return false
					}
				}, 50*time.Millisecond, log)
			}()
			poll.Until(t, 30*time.Second, "a warning with a hint", func() bool { return strings.Contains(buf.String(), "hint=") })
			close(synced)
			if err := <-done; err != nil {
				t.Fatalf("waitNodeList after the list came: %v", err)
			}
			out := buf.String()
			for _, want := range []string{"still waiting for the Node list", tc.wantErr, tc.wantHint} {
				if !strings.Contains(strings.ToLower(out), strings.ToLower(want)) {
					t.Errorf("the log lacks %q:\n%s", want, out)
				}
			}
		})
	}
}
