package device

import (
	"context"
	"errors"
	"net"
	"os"
	"syscall"

	"fenced.io/fenced/pkg/core"
)

// classifyTransport recognises network-level failures shared by all
// drivers. It reports false when err is not a transport error.
func classifyTransport(ctx context.Context, err error) (core.ErrorKind, bool) {
	switch {
	case errors.Is(err, syscall.ECONNREFUSED),
		errors.Is(err, syscall.EHOSTUNREACH),
		errors.Is(err, syscall.ENETUNREACH),
		errors.Is(err, syscall.EADDRNOTAVAIL):
		return core.KindUnreachable, true
	}
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) && !dnsErr.IsTimeout {
		return core.KindUnreachable, true
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) ||
		ctx.Err() != nil {
		return core.KindTimeout, true
	}
	var netErr net.Error
	if errors.As(err, &netErr) && netErr.Timeout() {
		return core.KindTimeout, true
	}
	return "", false
}
