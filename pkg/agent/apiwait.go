package agent

import (
	"context"
	"crypto/x509"
	"errors"
	"log/slog"
	"syscall"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// How often waitNodeList says why it still waits, and how long its probe
// of the API server may take.
const (
	nodeListReportEvery = 10 * time.Second
	nodeListProbeTime   = 5 * time.Second
)

// waitNodeList waits until the Node informer has synced. client-go keeps
// the reason it cannot list to itself: its reflector retries a refused
// connection or a failed TLS handshake quietly (logged at -v=2), so an
// agent pointed at the wrong API server would only ever say "waiting".
// Every interval (nodeListReportEvery), while the list has not come, it
// asks the API server for one Node itself and logs what stands in the
// way, with what to check.
func waitNodeList(ctx context.Context, client kubernetes.Interface, synced cache.InformerSynced, every time.Duration, log *slog.Logger) error {
	start := time.Now()
	next := start.Add(every)
	return wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		if synced() {
			return true, nil
		}
		if time.Now().Before(next) {
			return false, nil
		}
		next = time.Now().Add(every)
		pctx, cancel := context.WithTimeout(ctx, nodeListProbeTime)
		_, err := client.CoreV1().Nodes().List(pctx, metav1.ListOptions{Limit: 1})
		cancel()
		waited := time.Since(start).Round(time.Second)
		if err == nil {
			log.Info("still waiting for the Node list; the API server answers", "waited", waited)
			return false, nil
		}
		if ctx.Err() != nil {
			return false, ctx.Err()
		}
		log.Warn("still waiting for the Node list: the API server cannot be read", "waited", waited, "err", err, "hint", apiHint(err))
		return false, nil
	})
}

// apiHint says what to check for a failed request to the API server.
func apiHint(err error) string {
	var uaErr x509.UnknownAuthorityError
	var hostErr x509.HostnameError
	switch {
	case errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return "nothing answers at the API server's address: check the kubeconfig's server (or KUBERNETES_SERVICE_HOST in a pod) and that the API server runs"
	case errors.As(err, &uaErr):
		return "the API server's certificate is not signed by the kubeconfig's certificate-authority"
	case errors.As(err, &hostErr):
		return "the API server's certificate does not name the address in the kubeconfig"
	case apierrors.IsUnauthorized(err):
		return "the API server refused the credentials: an expired client certificate or token?"
	case apierrors.IsForbidden(err):
		return "the credentials may not list Nodes: check the ClusterRoleBinding of deploy/"
	case errors.Is(err, context.DeadlineExceeded), apierrors.IsTimeout(err):
		return "no answer within " + nodeListProbeTime.String() + ": check the network path to the API server"
	}
	return "check the kubeconfig and the API server"
}
