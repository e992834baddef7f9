package agent

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/expfmt"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"fenced.io/fenced/internal/testbed/cluster"
	"fenced.io/fenced/internal/testbed/ipmisim"
	"fenced.io/fenced/internal/testbed/poll"
	"fenced.io/fenced/internal/testbed/secretvolume"
	"fenced.io/fenced/pkg/config"
	"fenced.io/fenced/pkg/heartbeat"
)

// gossipKey is a key of n bytes, all b, and its file content.
func gossipKey(b byte, n int) ([]byte, []byte) {
	k := bytes.Repeat([]byte{b}, n)
	return k, []byte(base64.StdEncoding.EncodeToString(k) + "\n")
}

// writeKeyDir writes files (name → content) into a new directory, each
// with mode, and returns it.
func writeKeyDir(t *testing.T, files map[string][]byte, mode fs.FileMode) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "gossip")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, content, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestReadKeyDir(t *testing.T) {
	old, oldFile := gossipKey(1, 32)
	next, nextFile := gossipKey(2, 32)
	third, thirdFile := gossipKey(3, 16)
	_, shortFile := gossipKey(4, 20)
	tests := []struct {
		name    string
		files   map[string][]byte
		mode    fs.FileMode
		secret  bool // written as the kubelet writes a Secret volume
		extra   func(t *testing.T, dir string)
		want    heartbeat.KeySet
		wantErr []string
	}{
		{name: "one key", files: map[string][]byte{"key": oldFile}, mode: 0o600, want: heartbeat.KeySet{Primary: old}},
		{name: "a rotation's second step", files: map[string][]byte{"key": nextFile, "previous": oldFile}, mode: 0o440,
			want: heartbeat.KeySet{Primary: next, Secondary: [][]byte{old}}},
		{name: "secondaries in name order", files: map[string][]byte{"key": oldFile, "b": thirdFile, "a": nextFile}, mode: 0o600,
			want: heartbeat.KeySet{Primary: old, Secondary: [][]byte{next, third}}},
		{name: "a Secret volume", files: map[string][]byte{"key": oldFile, "next": nextFile}, mode: 0o440, secret: true,
			want: heartbeat.KeySet{Primary: old, Secondary: [][]byte{next}}},
		{name: "dot files are not keys", files: map[string][]byte{"key": oldFile, ".key.swp": []byte("junk")}, mode: 0o600,
			want: heartbeat.KeySet{Primary: old}},
		{name: "empty", files: map[string][]byte{}, mode: 0o600, wantErr: []string{`has no file "key", the primary key`}},
		{name: "secondaries only", files: map[string][]byte{"next": nextFile}, mode: 0o600, wantErr: []string{`has no file "key"`}},
		{name: "missing", mode: 0o600, extra: func(t *testing.T, dir string) { _ = os.RemoveAll(dir) }, wantErr: []string{"gossip.keyDir", "no such file"}},
		{name: "the same key twice", files: map[string][]byte{"key": oldFile, "previous": oldFile}, mode: 0o600,
			wantErr: []string{"key and previous hold the same key"}},
		{name: "a key of the wrong size", files: map[string][]byte{"key": oldFile, "next": shortFile}, mode: 0o600,
			wantErr: []string{"next", "20 bytes; want 16, 24 or 32"}},
		{name: "not base64", files: map[string][]byte{"key": oldFile, "next": []byte("not a key!")}, mode: 0o600,
			wantErr: []string{"next: not base64"}},
		{name: "five keys", mode: 0o600, files: map[string][]byte{"key": oldFile, "a": nextFile, "b": thirdFile,
			"c": func() []byte { _, f := gossipKey(5, 32); return f }(), "d": func() []byte { _, f := gossipKey(6, 32); return f }()},
			wantErr: []string{"holds 5 keys; at most 4"}},
		{name: "group-writable", files: map[string][]byte{"key": oldFile, "next": nextFile}, mode: 0o660,
			wantErr: []string{"mode 0660", "writable by group"}},
		{name: "a subdirectory", files: map[string][]byte{"key": oldFile}, mode: 0o600,
			extra:   func(t *testing.T, dir string) { must(t, os.Mkdir(filepath.Join(dir, "sub"), 0o700)) },
			wantErr: []string{"sub", "is a directory"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var dir string
			if tt.secret {
				dir = filepath.Join(t.TempDir(), "gossip")
				must(t, secretvolume.Write(dir, tt.files, tt.mode))
			} else {
				dir = writeKeyDir(t, tt.files, tt.mode)
			}
			if tt.extra != nil {
				tt.extra(t, dir)
			}
			got, err := keySource{dir: dir}.load(nil)
			if tt.wantErr != nil {
				if err == nil {
					t.Fatalf("loaded %s", got)
				}
				for _, w := range tt.wantErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q does not contain %q", err, w)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !got.Equal(tt.want) {
				t.Errorf("loaded %s, want %s", got, tt.want)
			}
		})
	}
}

func TestKeySourceOf(t *testing.T) {
	if _, err := keySourceOf(config.Gossip{}); err == nil || !strings.Contains(err.Error(), "set gossip.keyFile or gossip.keyDir") {
		t.Errorf("no key source: %v", err)
	}
	if s, err := keySourceOf(config.Gossip{KeyDir: "/d"}); err != nil || s.String() != "gossip.keyDir /d" {
		t.Errorf("keyDir: %v %v", s, err)
	}
	if s, err := keySourceOf(config.Gossip{KeyFile: "/k"}); err != nil || s.String() != "gossip.keyFile /k" {
		t.Errorf("keyFile: %v %v", s, err)
	}
}

// fakeKeyRing records the key sets handed to it.
type fakeKeyRing struct{ sets []heartbeat.KeySet }

func (f *fakeKeyRing) SetKeys(s heartbeat.KeySet) error {
	f.sets = append(f.sets, s)
	return s.Validate()
}

// TestKeyReloader follows a rotation through a Secret volume as the
// kubelet updates it: each change reaches the ring once, what does not
// change reaches it not at all, and files that cannot be used leave the
// keys as they are, with one error logged per cause and
// fenced_gossip_keys_as_configured 0 meanwhile.
func TestKeyReloader(t *testing.T) {
	old, oldFile := gossipKey(1, 32)
	next, nextFile := gossipKey(2, 32)
	dir := filepath.Join(t.TempDir(), "gossip")
	write := func(files map[string][]byte) {
		t.Helper()
		must(t, secretvolume.Write(dir, files, 0o440))
	}
	write(map[string][]byte{"key": oldFile})
	src := keySource{dir: dir}
	initial, err := src.load(nil)
	must(t, err)
	logs := captureDefaultLog(t)
	ring := &fakeKeyRing{}
	k := &keyReloader{src: src, ring: ring, log: slog.Default(), applied: initial}
	k.filesOK.Store(true)

	steps := []struct {
		name    string
		files   map[string][]byte
		want    *heartbeat.KeySet // handed to the ring; nil: nothing
		filesOK bool
		logged  string // a line logged by this step
	}{
		{name: "unchanged", files: map[string][]byte{"key": oldFile}, filesOK: true},
		{name: "add", files: map[string][]byte{"key": oldFile, "next": nextFile},
			want: &heartbeat.KeySet{Primary: old, Secondary: [][]byte{next}}, filesOK: true, logged: "gossip key files changed"},
		{name: "a duplicate", files: map[string][]byte{"key": nextFile, "next": nextFile}, filesOK: false,
			logged: "gossip key files cannot be used; the keys in use stay"},
		{name: "the same cause again, not logged again", files: map[string][]byte{"key": nextFile, "next": nextFile}, filesOK: false},
		{name: "switch", files: map[string][]byte{"key": nextFile, "previous": oldFile},
			want: &heartbeat.KeySet{Primary: next, Secondary: [][]byte{old}}, filesOK: true, logged: "gossip key files can be used again"},
		{name: "remove", files: map[string][]byte{"key": nextFile}, want: &heartbeat.KeySet{Primary: next}, filesOK: true, logged: "gossip key files changed"},
		{name: "empty", files: map[string][]byte{}, filesOK: false, logged: `has no file \"key\"`},
	}
	for _, s := range steps {
		write(s.files)
		before, logged := len(ring.sets), logs.Len()
		k.reload()
		switch got := ring.sets[before:]; {
		case s.want == nil && len(got) != 0:
			t.Errorf("%s: the ring was given %s", s.name, got[0])
		case s.want != nil && (len(got) != 1 || !got[0].Equal(*s.want)):
			t.Errorf("%s: the ring was given %v, want %s", s.name, got, s.want)
		}
		if k.filesOK.Load() != s.filesOK {
			t.Errorf("%s: files OK %v, want %v", s.name, k.filesOK.Load(), s.filesOK)
		}
		newLogs := logs.String()[logged:]
		if s.logged != "" && !strings.Contains(newLogs, s.logged) {
			t.Errorf("%s: %q not logged: %s", s.name, s.logged, newLogs)
		}
		if s.logged == "" && newLogs != "" {
			t.Errorf("%s: logged %s", s.name, newLogs)
		}
		if strings.Contains(newLogs, base64.StdEncoding.EncodeToString(old)) || strings.Contains(newLogs, base64.StdEncoding.EncodeToString(next)) {
			t.Errorf("%s: a key is in the log: %s", s.name, newLogs)
		}
	}
}

// TestGossipKeysCollector: the keys by fingerprint and use, and whether
// they are the files' — not while a key is leaving, a member lacks the
// primary or the files cannot be used.
func TestGossipKeysCollector(t *testing.T) {
	tests := []struct {
		name    string
		state   heartbeat.KeyringState
		filesOK bool
		want    string
	}{
		{"as configured", heartbeat.KeyringState{Encrypt: "NEW", Decrypt: []string{"OLD"}, AsSet: true}, true, `
fenced_gossip_keys{fingerprint="NEW",use="encrypt"} 1
fenced_gossip_keys{fingerprint="OLD",use="decrypt"} 1
fenced_gossip_keys_as_configured 1
`},
		{"a key leaving", heartbeat.KeyringState{Encrypt: "NEW", Decrypt: []string{"OLD"}, Leaving: []string{"OLD"}}, true, `
fenced_gossip_keys{fingerprint="NEW",use="encrypt"} 1
fenced_gossip_keys{fingerprint="OLD",use="leaving"} 1
fenced_gossip_keys_as_configured 0
`},
		{"files that cannot be used", heartbeat.KeyringState{Encrypt: "OLD", AsSet: true}, false, `
fenced_gossip_keys{fingerprint="OLD",use="encrypt"} 1
fenced_gossip_keys_as_configured 0
`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := gossipKeysCollector{keyring: func() heartbeat.KeyringState { return tt.state }, filesOK: func() bool { return tt.filesOK }}
			text, err := testutil.CollectAndFormat(c, expfmt.TypeTextPlain, gossipKeysMetric, gossipKeysAsConfiguredMetric)
			must(t, err)
			var got []string
			for _, l := range strings.Split(string(text), "\n") {
				if l != "" && !strings.HasPrefix(l, "#") {
					got = append(got, l)
				}
			}
			if g, w := strings.Join(got, "\n"), strings.TrimSpace(tt.want); g != w {
				t.Errorf("collected:\n%s\nwant:\n%s", g, w)
			}
		})
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestAgentsRotateGossipKeys: two real agents against a real API server,
// each reading its own copy of the key Secret (gossip.keyDir, written as
// the kubelet writes a Secret volume), rotate through the three steps —
// the switch on one of them first — by their files alone, with no
// restart: /metrics follows every step, the early switch waits for the
// other agent, and the ring of two stays whole.
func TestAgentsRotateGossipKeys(t *testing.T) {
	ctx, c := cluster.StartForTest(t, cluster.Options{NoScheduler: true})
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: config.DefaultLeaseNamespace}}
	if _, err := c.Client().CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	old, _ := gossipKey(1, 32)
	next, _ := gossipKey(2, 32)
	fOld, fNext := heartbeat.Fingerprint(old), heartbeat.Fingerprint(next)
	files := func(keys map[string][]byte) map[string][]byte {
		out := map[string][]byte{}
		for name, k := range keys {
			out[name] = []byte(base64.StdEncoding.EncodeToString(k) + "\n")
		}
		return out
	}
	names := []string{"node-a", "node-b"}
	dirs, agents := map[string]string{}, map[string]*running{}
	var seeds []string
	for _, name := range names {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name},
			Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "127.0.0.1"}}}}
		if _, err := c.Client().CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		dirs[name] = filepath.Join(t.TempDir(), "gossip")
		must(t, secretvolume.Write(dirs[name], files(map[string][]byte{"key": old}), 0o440))
		port, err := ipmisim.FreePort("udp", "127.0.0.1")
		must(t, err)
		agents[name] = startAgent(ctx, t, c, name, fmt.Sprintf("apiVersion: fenced.io/v1alpha1\nkind: FencedConfiguration\nclusterName: test\n"+
			"gossip: {port: %d, keyDir: %s, profile: fast}\n", port, dirs[name]), seeds)
		seeds = []string{fmt.Sprintf("127.0.0.1:%d", port)}
	}
	waitKeys := func(name string, want string) {
		t.Helper()
		poll.Until(t, time.Minute, name+" serves "+strings.ReplaceAll(want, "\n", "; "), func() bool {
			_, text := agents[name].get(t, "/metrics")
			for _, l := range strings.Split(strings.TrimSpace(want), "\n") {
				if !strings.Contains(text, l+"\n") {
					return false
				}
			}
			return strings.Count(text, "\nfenced_gossip_keys{") == strings.Count(want, "fenced_gossip_keys{") &&
				strings.Contains(text, `fenced_members{state="alive"} 2`)
		})
	}
	for _, n := range names {
		waitKeys(n, `fenced_gossip_keys{fingerprint="`+fOld+`",use="encrypt"} 1`+"\nfenced_gossip_keys_as_configured 1")
	}
	steps := []struct {
		name string
		keys map[string][]byte
		want string
	}{
		{"node-a", map[string][]byte{"key": next, "previous": old}, // the switch, before node-b holds the key
			`fenced_gossip_keys{fingerprint="` + fNext + `",use="decrypt"} 1` + "\n" + `fenced_gossip_keys{fingerprint="` + fOld + `",use="encrypt"} 1` + "\nfenced_gossip_keys_as_configured 0"},
		{"node-b", map[string][]byte{"key": old, "next": next},
			`fenced_gossip_keys{fingerprint="` + fNext + `",use="decrypt"} 1` + "\n" + `fenced_gossip_keys{fingerprint="` + fOld + `",use="encrypt"} 1` + "\nfenced_gossip_keys_as_configured 1"},
		{"node-a", nil, // node-b holds the new key now: node-a switches
			`fenced_gossip_keys{fingerprint="` + fNext + `",use="encrypt"} 1` + "\n" + `fenced_gossip_keys{fingerprint="` + fOld + `",use="decrypt"} 1` + "\nfenced_gossip_keys_as_configured 1"},
		{"node-b", map[string][]byte{"key": next, "previous": old},
			`fenced_gossip_keys{fingerprint="` + fNext + `",use="encrypt"} 1` + "\n" + `fenced_gossip_keys{fingerprint="` + fOld + `",use="decrypt"} 1` + "\nfenced_gossip_keys_as_configured 1"},
		{"node-a", map[string][]byte{"key": next}, `fenced_gossip_keys{fingerprint="` + fNext + `",use="encrypt"} 1` + "\nfenced_gossip_keys_as_configured 1"},
		{"node-b", map[string][]byte{"key": next}, `fenced_gossip_keys{fingerprint="` + fNext + `",use="encrypt"} 1` + "\nfenced_gossip_keys_as_configured 1"},
	}
	for _, s := range steps {
		if s.keys != nil {
			must(t, secretvolume.Write(dirs[s.name], files(s.keys), 0o440))
		}
		waitKeys(s.name, s.want)
	}
	for _, n := range names {
		waitKeys(n, `fenced_gossip_keys{fingerprint="`+fNext+`",use="encrypt"} 1`+"\nfenced_gossip_keys_as_configured 1")
	}
}
