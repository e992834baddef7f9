package agent

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"fenced.io/fenced/pkg/config"
	"fenced.io/fenced/pkg/heartbeat"
)

// The gossip keys: gossip.keyFile (one key) or gossip.keyDir (a key per
// file, "key" the primary: a Kubernetes Secret mounted as a directory),
// read at start and again every keyReloadInterval, their changes handed
// to the ring (heartbeat.Ring.SetKeys), which changes memberlist's keyring
// in place. A Secret volume's update is an atomic swap of its ..data
// symlink; the files are read twice and used only when both reads agree,
// so a read across a swap, or across an editor's half-written file, is
// never used.

// keyDirPrimary is the file of gossip.keyDir holding the primary key: the
// key of the Secret that keyFile has always pointed into.
const keyDirPrimary = "key"

// keyReloadInterval is how often the agent reads its key files again:
// the kubelet refreshes a Secret volume within a minute or so, and a
// rotation's step is done when the last agent has read it.
const keyReloadInterval = 3 * time.Second

// keySource is where the gossip keys are: exactly one of file and dir.
type keySource struct {
	file string // gossip.keyFile
	dir  string // gossip.keyDir
}

func (s keySource) String() string {
	if s.dir != "" {
		return "gossip.keyDir " + s.dir
	}
	return "gossip.keyFile " + s.file
}

// maxKeyReads bounds the reads of a key directory that changes under
// them: load gives up after so many reads without two alike in a row.
const maxKeyReads = 4

// load reads the key set: a file's one key, or a directory's keys read
// until two reads in a row agree.
func (s keySource) load(log *slog.Logger) (heartbeat.KeySet, error) {
	if s.dir == "" {
		key, err := readKey(s.file, log)
		return heartbeat.KeySet{Primary: key}, err
	}
	prev, err := readKeyDir(s.dir, log)
	if err != nil {
		return heartbeat.KeySet{}, err
	}
	for range maxKeyReads - 1 {
		set, err := readKeyDir(s.dir, log)
		if err != nil {
			return heartbeat.KeySet{}, err
		}
		if set.Equal(prev) {
			return set, nil
		}
		prev = set
	}
	return heartbeat.KeySet{}, fmt.Errorf("gossip.keyDir %s: the files changed at each of %d reads", s.dir, maxKeyReads)
}

// readKeyDir reads the keys of dir: the file keyDirPrimary is the primary,
// every other file whose name does not start with a dot a secondary (in
// name order); each is read as readKey reads gossip.keyFile.
func readKeyDir(dir string, log *slog.Logger) (heartbeat.KeySet, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return heartbeat.KeySet{}, fmt.Errorf("gossip.keyDir: %w", err)
	}
	type namedKey struct {
		name string
		key  []byte
	}
	var keys []namedKey
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, ".") {
			continue // the kubelet's ..data and its timestamped directories
		}
		key, err := readKey(filepath.Join(dir, name), log)
		if err != nil {
			return heartbeat.KeySet{}, err
		}
		for _, o := range keys {
			if bytes.Equal(o.key, key) {
				return heartbeat.KeySet{}, fmt.Errorf("gossip.keyDir %s: %s and %s hold the same key: remove one", dir, o.name, name)
			}
		}
		keys = append(keys, namedKey{name, key})
	}
	var set heartbeat.KeySet
	for _, k := range keys {
		if k.name == keyDirPrimary {
			set.Primary = k.key
		} else {
			set.Secondary = append(set.Secondary, k.key)
		}
	}
	if set.Primary == nil {
		return heartbeat.KeySet{}, fmt.Errorf("gossip.keyDir %s has no file %q, the primary key (the Secret's key %q; its other keys are secondary keys)", dir, keyDirPrimary, keyDirPrimary)
	}
	if len(keys) > heartbeat.MaxKeys {
		return heartbeat.KeySet{}, fmt.Errorf("gossip.keyDir %s holds %d keys; at most %d (a rotation needs two)", dir, len(keys), heartbeat.MaxKeys)
	}
	if err := set.Validate(); err != nil {
		return heartbeat.KeySet{}, fmt.Errorf("gossip.keyDir %s: %w", dir, err)
	}
	return set, nil
}

// readKey reads a base64 gossip key of 16, 24 or 32 bytes from a file
// that passes config.CheckSecretFile (refused when group or others may
// write it, a warning when others may read it).
func readKey(path string, log *slog.Logger) ([]byte, error) {
	raw, err := readSecretFile(path, log)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("gossip key: %w (create it with `head -c 32 /dev/urandom | base64 > %s && chmod 600 %s`)", err, path, path)
	}
	if err != nil {
		return nil, fmt.Errorf("gossip key: %w", err)
	}
	key, err := base64.StdEncoding.DecodeString(strings.TrimSpace(string(raw)))
	if err != nil {
		return nil, fmt.Errorf("gossip key %s: not base64: %w", path, err)
	}
	switch len(key) {
	case 16, 24, 32:
		return key, nil
	}
	return nil, fmt.Errorf("gossip key %s: %d bytes; want 16, 24 or 32 (head -c 32 /dev/urandom | base64)", path, len(key))
}

// keySourceOf is the configuration's key source; an error when it names
// none.
func keySourceOf(g config.Gossip) (keySource, error) {
	if g.KeyFile == "" && g.KeyDir == "" {
		return keySource{}, errors.New("no gossip key: set gossip.keyFile or gossip.keyDir in the configuration, or pass --insecure-gossip (anyone on the network could then join the ring)")
	}
	return keySource{file: g.KeyFile, dir: g.KeyDir}, nil
}

// keyReloader reads the key files again every keyReloadInterval and hands
// a changed, valid set to the ring; files it cannot use leave the keys in
// use as they are, with an error logged once per distinct cause.
type keyReloader struct {
	src  keySource
	ring interface{ SetKeys(heartbeat.KeySet) error }
	log  *slog.Logger

	applied  heartbeat.KeySet // what the ring was last given
	problems problemOnce
	// filesOK is false while the files last read cannot be used.
	filesOK atomic.Bool
}

func newKeyReloader(src keySource, ring *heartbeat.Ring, initial heartbeat.KeySet, log *slog.Logger) *keyReloader {
	k := &keyReloader{src: src, ring: ring, log: log, applied: initial}
	k.filesOK.Store(true)
	return k
}

// run reloads every keyReloadInterval until ctx ends.
func (k *keyReloader) run(ctx context.Context) { pollEvery(ctx, keyReloadInterval, k.reload) }

// reload reads the files once and hands a changed set to the ring.
func (k *keyReloader) reload() {
	set, err := k.src.load(k.log)
	if err != nil {
		k.filesOK.Store(false)
		k.problems.failed(k.log, "gossip key files cannot be used; the keys in use stay", err, "source", k.src.String())
		return
	}
	k.problems.fixed(k.log, "gossip key files can be used again", "source", k.src.String())
	k.filesOK.Store(true)
	if set.Equal(k.applied) {
		return
	}
	k.log.Info("gossip key files changed", "source", k.src.String(), "keys", set.String(), "before", k.applied.String())
	if err := k.ring.SetKeys(set); err != nil {
		k.filesOK.Store(false)
		k.log.Error("gossip keys not changed", "err", err)
		return
	}
	k.applied = set
}

// Metric names of the gossip keys.
const (
	gossipKeysMetric             = "fenced_gossip_keys"
	gossipKeysAsConfiguredMetric = "fenced_gossip_keys_as_configured"
)

var (
	gossipKeysDesc = prometheus.NewDesc(gossipKeysMetric,
		"The gossip keys this agent holds, by fingerprint: use=encrypt seals what it sends, decrypt opens what it receives, leaving is a key the key files dropped that it still opens while a member encrypts with it.",
		[]string{"fingerprint", "use"}, nil)
	gossipKeysAsConfiguredDesc = prometheus.NewDesc(gossipKeysAsConfiguredMetric,
		"1 when the gossip keys in use are the key files' with their primary encrypting; 0 while a member cannot decrypt the primary yet, a member still encrypts with a key the files dropped, or the files cannot be used.",
		nil, nil)
)

// gossipKeysCollector exports the ring's keyring at scrape time.
type gossipKeysCollector struct {
	keyring func() heartbeat.KeyringState
	filesOK func() bool
}

// Describe implements prometheus.Collector.
func (c gossipKeysCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- gossipKeysDesc
	ch <- gossipKeysAsConfiguredDesc
}

// Collect implements prometheus.Collector.
func (c gossipKeysCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.keyring()
	if s.Encrypt != "" {
		ch <- prometheus.MustNewConstMetric(gossipKeysDesc, prometheus.GaugeValue, 1, s.Encrypt, "encrypt")
	}
	for _, fp := range s.Decrypt {
		use := "decrypt"
		if slices.Contains(s.Leaving, fp) {
			use = "leaving"
		}
		ch <- prometheus.MustNewConstMetric(gossipKeysDesc, prometheus.GaugeValue, 1, fp, use)
	}
	v := 0.0
	if s.AsSet && c.filesOK() {
		v = 1
	}
	ch <- prometheus.MustNewConstMetric(gossipKeysAsConfiguredDesc, prometheus.GaugeValue, v)
}
