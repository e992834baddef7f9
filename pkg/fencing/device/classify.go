package device

import (
	"context"
	"errors"
	"net"
	"os"
	"strings"
	"syscall"

	"fenced.io/fenced/pkg/vocab"
)

// classifyTransport recognises network-level failures shared by all
// drivers. It reports false when err is not a transport error.
func classifyTransport(ctx context.Context, err error) (vocab.ErrorKind, bool) {
	switch {
	case errors.Is(err, syscall.ECONNREFUSED),
		errors.Is(err, syscall.EHOSTUNREACH),
		errors.Is(err, syscall.ENETUNREACH),
		errors.Is(err, syscall.EADDRNOTAVAIL):
		return vocab.KindUnreachable, true
	}
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) && !dnsErr.IsTimeout {
		return vocab.KindUnreachable, true
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) ||
		ctx.Err() != nil {
		return vocab.KindTimeout, true
	}
	var netErr net.Error
	if errors.As(err, &netErr) && netErr.Timeout() {
		return vocab.KindTimeout, true
	}
	return "", false
}

// messageKinds classifies a failure by the words of its message, for
// drivers whose libraries or programs give nothing better: the first
// entry whose substr the message contains names the kind.
type messageKinds []struct {
	substr string
	kind   vocab.ErrorKind
}

// of is the kind of msg, vocab.KindBMC when no entry matches.
func (ks messageKinds) of(msg string) vocab.ErrorKind {
	for _, m := range ks {
		if strings.Contains(msg, m.substr) {
			return m.kind
		}
	}
	return vocab.KindBMC
}
