package agent

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/kubernetes"

	"fenced.io/fenced/pkg/identity"
	"fenced.io/fenced/pkg/identity/publish"
)

// This run's signing key, from its publication to its withdrawal.
//
// Every run makes a fresh key, and the key Lease names the one fencers
// check a node's words against. Until this run's key is on the Lease the
// ring signs nothing (it gets the key through Ring.UseKey only then):
// no fencer could check such words yet, while the Lease still holds an
// earlier run's key of this boot they would be judged against that one,
// and once the key landed, words signed before it — seen by any gossip
// member — would count and could be replayed. Publishing replaces that
// earlier run's key, which is stale: its last words may be a genuine
// shutdown-complete and leave from a shutdown that was cancelled, and the
// host still runs in the same boot. When this run is the one whose
// shutdown was cancelled after it left, it withdraws its key on the way
// out (withdraw), so that its own last words are not left believable
// until the next run publishes.

// keyUser is the ring as the key's holder sees it.
type keyUser interface {
	UseKey(*identity.Key) error
}

// ownKey publishes this run's key and hands it to the ring once published.
type ownKey struct {
	client         kubernetes.Interface
	ns, node, boot string
	key            *identity.Key
	ring           keyUser
	published      prometheus.Gauge
	log            *slog.Logger
	// wait bounds how long start waits before the agent joins anyway
	// (keyPublishWait).
	wait time.Duration

	stop context.CancelFunc // ends the publishing loop
	done chan struct{}      // closed when it ended
	// isPublished is closed once the key is on the Lease: what this run
	// states on the Lease afterwards (its armed watchdog) is signed with it.
	isPublished chan struct{}
}

// keyPublishWait bounds how long the agent waits to publish its key before
// it joins the ring: an API server that is down must not keep a node out
// of gossip (then fencers need its BMC for a clean shutdown, which is
// safe). Publishing goes on in the background after it, and the ring signs
// nothing until it succeeds.
const keyPublishWait = 30 * time.Second

func newOwnKey(o Options, key *identity.Key, ring keyUser, published prometheus.Gauge, log *slog.Logger) *ownKey {
	return &ownKey{client: o.Client, ns: o.Config.Fencer.LeaseNamespace, node: o.NodeName, boot: o.BootID,
		key: key, ring: ring, published: published, log: log, wait: keyPublishWait, isPublished: make(chan struct{})}
}

// start publishes the key on this node's Lease, retrying with backoff, and
// gives it to the ring once it is there. It returns once that is done or
// after wait, leaving the retries running in the background until ctx
// ends or withdraw stops them.
func (k *ownKey) start(ctx context.Context) {
	lease := k.ns + "/" + publish.LeaseName(k.node)
	if k.isPublished == nil {
		k.isPublished = make(chan struct{})
	}
	earlier := k.earlierKey(ctx, lease)
	ctx, k.stop = context.WithCancel(ctx)
	k.done = make(chan struct{})
	go func() {
		defer close(k.done)
		delay := time.Second
		for attempt := 1; ; attempt++ {
			err := publish.Publish(ctx, k.client, k.ns, k.node, k.boot, k.key.Public(), time.Now())
			if err == nil {
				k.published.Set(1)
				close(k.isPublished)
				k.log.Info("published this agent's signing key; signing from now on", "lease", lease, "key", k.key.Public().String())
				if err := k.ring.UseKey(k.key); err != nil {
					k.log.Warn("cannot sign with the published key", "err", err)
				}
				return
			}
			if ctx.Err() != nil {
				return
			}
			level := slog.LevelWarn
			if apierrors.IsForbidden(err) || apierrors.IsInvalid(err) {
				level = slog.LevelError // RBAC or the identity policy refuses: a deployment problem
			}
			k.log.Log(ctx, level, "cannot publish this agent's signing key; fencers take none of this node's word until it is, so its clean shutdowns need the BMC",
				"err", err, "attempt", attempt, "retryIn", delay)
			select {
			case <-ctx.Done():
				return
			case <-time.After(delay):
			}
			delay = min(2*delay, time.Minute)
		}
	}()
	select {
	case <-k.done:
	case <-ctx.Done():
	case <-time.After(k.wait):
		args := []any{"waited", k.wait, "lease", lease}
		if earlier != "" {
			args = append(args, "leaseHolds", earlier, "why", "the Lease still holds an earlier run's key of this boot")
		}
		k.log.Warn("joining the gossip ring before this agent's key is published: signing nothing until it is; still trying", args...)
	}
}

// earlierKey looks at the Lease before this run writes it: a key of this
// boot there is an earlier run's (every run makes its own), stale, and
// replaced before this run signs anything. It returns that key ("" when
// there is none, or the Lease cannot be read).
func (k *ownKey) earlierKey(ctx context.Context, lease string) string {
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	found, err := publish.Read(rctx, k.client, k.ns, k.node)
	switch {
	case errors.Is(err, publish.ErrKeyWithdrawn):
		k.log.Info("an earlier run of this boot withdrew its key from the Lease", "lease", lease)
		return ""
	case err != nil || found.BootID != k.boot || found.Key.String() == k.key.Public().String():
		return ""
	}
	k.log.Info("the key Lease holds an earlier run's key of this boot: replacing it before this agent signs anything",
		"lease", lease, "key", found.Key.String(), "publishedAt", found.At,
		"why", "that run's last words, replayed, would count while the host runs on in the same boot")
	return found.Key.String()
}

// withdraw stops publishing and takes this run's key off the Lease, if it
// is there. For a run that left the ring without the host shutting down
// (a shutdown cancelled after the leave): its last words, a signed
// shutdown-complete and leave, must not stay believable.
func (k *ownKey) withdraw(ctx context.Context) error {
	if k.stop != nil {
		k.stop()
		<-k.done // a write in flight lands before the withdrawal
	}
	lease := k.ns + "/" + publish.LeaseName(k.node)
	withdrawn, err := publish.Withdraw(ctx, k.client, k.ns, k.node, k.key.Public())
	switch {
	case err != nil:
		k.log.Error("cannot withdraw this run's key: until the next run replaces it, fencers that did not see this run leave may believe its last words",
			"lease", lease, "err", err)
		return err
	case !withdrawn:
		k.log.Info("this run's key is not on its Lease (never published, or a later run's replaced it): left it alone", "lease", lease)
	default:
		k.log.Info("withdrew this run's signing key: the host runs on after this run left the ring", "lease", lease)
	}
	k.published.Set(0)
	return nil
}
