package shutdown

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"fenced.io/fenced/pkg/vocab"
)

// Inhibitor is one logind inhibitor lock as ListInhibitors returns it (the
// D-Bus struct (ssssuu)). What is a colon-separated list ("shutdown:sleep").
type Inhibitor struct {
	What, Who, Why, Mode string
	UID, PID             uint32
}

// InhibitorLister is the part of logind CheckGraceful reads. The Logind
// that DialLogind returns implements it.
type InhibitorLister interface {
	InhibitDelayMax() (time.Duration, error)
	ListInhibitors() ([]Inhibitor, error)
}

// The kubelet's graceful node shutdown lock, as the kubelet takes it
// (k8s.io/kubernetes pkg/kubelet/nodeshutdown/systemd/inhibit_linux.go,
// InhibitShutdown): Inhibit("shutdown", "kubelet", "Kubelet needs time to
// handle node shutdown", "delay"). Its node shutdown manager takes it
// only when shutdownGracePeriod (or shutdownGracePeriodByPodPriority) is
// set: otherwise NewManager returns a stub that never talks to logind.
// Why is not matched: it is prose, and may change between versions.
const (
	kubeletWho  = "kubelet"
	kubeletWhat = "shutdown"
	kubeletMode = "delay"
)

// GracefulCheck is what CheckGraceful found.
type GracefulCheck struct {
	State vocab.GracefulShutdown
	// Lock is the kubelet's lock (State GracefulKubeletDelayLock).
	Lock *Inhibitor
	// InhibitDelayMax is logind's InhibitDelayMaxSec, which bounds the
	// kubelet's grace period as it bounds fenced's own wait; 0 unknown.
	InhibitDelayMax time.Duration
	// Err says why State is GracefulUnknown.
	Err error
}

// CheckGraceful lists logind's inhibitors and reports whether the
// kubelet's shutdown delay lock is among them, and logind's
// InhibitDelayMax. A logind that cannot be read is GracefulUnknown, never
// GracefulNone: absence is claimed only on logind's own word.
func CheckGraceful(l InhibitorLister) GracefulCheck {
	c := GracefulCheck{State: vocab.GracefulUnknown}
	locks, err := l.ListInhibitors()
	if err != nil {
		c.Err = err
		return c
	}
	c.State = vocab.GracefulNone
	for i := range locks {
		if isKubeletLock(locks[i]) {
			c.State, c.Lock = vocab.GracefulKubeletDelayLock, &locks[i]
			break
		}
	}
	// The delay is context for the log, not part of the verdict.
	if d, err := l.InhibitDelayMax(); err == nil {
		c.InhibitDelayMax = d
	}
	return c
}

func isKubeletLock(i Inhibitor) bool {
	if i.Who != kubeletWho || i.Mode != kubeletMode {
		return false
	}
	for _, w := range strings.Split(i.What, ":") {
		if w == kubeletWhat {
			return true
		}
	}
	return false
}

// errNoInhibitorList is the verdict on a Logind that cannot list locks.
var errNoInhibitorList = errors.New("this logind client cannot list inhibitor locks")

// ProbeGraceful connects to logind with dial (DialLogind when nil),
// checks it (CheckGraceful) and disconnects. A failed dial is
// GracefulUnknown.
func ProbeGraceful(dial func() (Logind, error)) GracefulCheck {
	if dial == nil {
		dial = DialLogind
	}
	l, err := dial()
	if err != nil {
		return GracefulCheck{State: vocab.GracefulUnknown, Err: err}
	}
	defer l.Close()
	il, ok := l.(InhibitorLister)
	if !ok {
		return GracefulCheck{State: vocab.GracefulUnknown, Err: errNoInhibitorList}
	}
	return CheckGraceful(il)
}

// ListInhibitors calls logind's ListInhibitors: every lock, of any mode.
func (l *dbusLogind) ListInhibitors() ([]Inhibitor, error) {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	var out []Inhibitor
	if err := l.obj.CallWithContext(ctx, logindInterface+".ListInhibitors", 0).Store(&out); err != nil {
		return nil, fmt.Errorf("listing logind's inhibitor locks: %w", err)
	}
	return out, nil
}
