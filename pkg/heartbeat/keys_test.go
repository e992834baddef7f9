package heartbeat

import (
	"bytes"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"
)

// k returns a key of n bytes, all b.
func k(b byte, n int) []byte { return bytes.Repeat([]byte{b}, n) }

func TestKeySetValidate(t *testing.T) {
	old, next := k(1, 32), k(2, 32)
	tests := []struct {
		name    string
		set     KeySet
		wantErr string
	}{
		{"one key", KeySet{Primary: old}, ""},
		{"rotation", KeySet{Primary: next, Secondary: [][]byte{old}}, ""},
		{"AES-128 and AES-192 beside AES-256", KeySet{Primary: k(3, 16), Secondary: [][]byte{k(4, 24), old}}, ""},
		{"four keys", KeySet{Primary: old, Secondary: [][]byte{next, k(3, 32), k(4, 32)}}, ""},
		{"empty", KeySet{}, "no gossip encryption key"},
		{"secondaries without a primary", KeySet{Secondary: [][]byte{old}}, "no gossip encryption key"},
		{"primary of the wrong size", KeySet{Primary: k(1, 10)}, "gossip key is 10 bytes; want 16, 24 or 32"},
		{"secondary of the wrong size", KeySet{Primary: old, Secondary: [][]byte{next, k(5, 31)}}, "secondary gossip key 2 is 31 bytes"},
		{"empty secondary", KeySet{Primary: old, Secondary: [][]byte{{}}}, "secondary gossip key 1 is 0 bytes"},
		{"primary again as a secondary", KeySet{Primary: old, Secondary: [][]byte{bytes.Clone(old)}}, "gossip key " + Fingerprint(old) + " is given twice"},
		{"a secondary twice", KeySet{Primary: old, Secondary: [][]byte{next, next}}, "is given twice"},
		{"five keys", KeySet{Primary: old, Secondary: [][]byte{next, k(3, 32), k(4, 32), k(5, 32)}}, "5 gossip keys; at most 4"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.set.Validate()
			if tt.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				if _, err := (Config{NodeName: "a", SecretKey: tt.set.Primary, SecondaryKeys: tt.set.Secondary}).MemberlistConfig(); err != nil {
					t.Fatalf("a valid set makes no memberlist configuration: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Validate = %v, want %q", err, tt.wantErr)
			}
			// The ring refuses what Validate refuses.
			if _, err := (Config{NodeName: "a", SecretKey: tt.set.Primary, SecondaryKeys: tt.set.Secondary}).MemberlistConfig(); err == nil {
				t.Fatal("MemberlistConfig accepted the set")
			}
		})
	}
}

// TestKeySetNamesKeysByFingerprint: nothing that logs or compares a key
// set shows a key's bytes, and fingerprints tell keys apart.
func TestKeySetNamesKeysByFingerprint(t *testing.T) {
	old, next := []byte("0123456789abcdef0123456789abcdef"), []byte("fedcba9876543210fedcba9876543210")
	s := KeySet{Primary: next, Secondary: [][]byte{old}}
	text := s.String()
	if want := "primary " + Fingerprint(next) + ", secondary " + Fingerprint(old); text != want {
		t.Errorf("String = %q, want %q", text, want)
	}
	if strings.Contains(text, "0123") || strings.Contains(text, "fedc") {
		t.Errorf("String shows key bytes: %q", text)
	}
	if Fingerprint(old) == Fingerprint(next) || len(Fingerprint(old)) != 8 || Fingerprint(old) != Fingerprint(bytes.Clone(old)) {
		t.Errorf("fingerprints %q %q: want 8 characters, stable, distinct", Fingerprint(old), Fingerprint(next))
	}
	if !s.Equal(KeySet{Primary: next, Secondary: [][]byte{old}}) || s.Equal(KeySet{Primary: old, Secondary: [][]byte{next}}) ||
		s.Equal(KeySet{Primary: next}) {
		t.Error("Equal does not compare primaries and secondaries")
	}
}

func TestPlanKeys(t *testing.T) {
	old, next := k(1, 32), k(2, 32)
	fo, fn := Fingerprint(old), Fingerprint(next)
	both, newFirst := fo+","+fn, fn+","+fo
	step0 := KeySet{Primary: old}
	step1 := KeySet{Primary: old, Secondary: [][]byte{next}}
	step2 := KeySet{Primary: next, Secondary: [][]byte{old}}
	step3 := KeySet{Primary: next}
	tests := []struct {
		name    string
		set     KeySet
		current []byte
		peers   map[string]string
		encrypt []byte
		waitFor []string
		lacking bool
	}{
		{name: "alone", set: step2, current: old, encrypt: next},
		{name: "before the rotation", set: step0, current: old, peers: map[string]string{"b": fo}, encrypt: old},
		{name: "step 1: the primary stays", set: step1, current: old, peers: map[string]string{"b": fo}, encrypt: old},
		{name: "step 2, everyone holds the new key", set: step2, current: old, peers: map[string]string{"b": both, "c": newFirst}, encrypt: next},
		{name: "step 2 too early: b and c lack the new key", set: step2, current: old,
			peers: map[string]string{"c": fo, "b": fo, "d": both}, encrypt: old, waitFor: []string{"b", "c"}},
		{name: "step 2 too early, on a fresh start encrypting with the new key", set: step2, current: next,
			peers: map[string]string{"b": fo}, encrypt: old, waitFor: []string{"b"}},
		{name: "step 3 with a member still encrypting with the old key", set: step3, current: old,
			peers: map[string]string{"b": fo + "," + fn}, encrypt: next},
		{name: "step 1 here, step 3 everywhere else: follow them", set: step1, current: old,
			peers: map[string]string{"b": fn, "c": fn}, encrypt: next, waitFor: []string{"b", "c"}},
		{name: "one-step replacement: no key in common", set: step3, current: old,
			peers: map[string]string{"b": fo}, encrypt: next, waitFor: []string{"b"}, lacking: true},
		{name: "a member of an earlier version advertises nothing", set: step2, current: old,
			peers: map[string]string{"b": "", "c": both}, encrypt: next, waitFor: []string{"b"}, lacking: true},
		{name: "the current key, no longer configured, is never kept", set: KeySet{Primary: next, Secondary: [][]byte{k(3, 32)}}, current: old,
			peers: map[string]string{"b": fo + "," + Fingerprint(k(3, 32))}, encrypt: k(3, 32), waitFor: []string{"b"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := planKeys(tt.set, tt.current, tt.peers)
			if !bytes.Equal(p.encrypt, tt.encrypt) {
				t.Errorf("encrypt %s, want %s", Fingerprint(p.encrypt), Fingerprint(tt.encrypt))
			}
			if !slices.Equal(p.waitFor, tt.waitFor) || p.lacking != tt.lacking {
				t.Errorf("waitFor %v lacking %v, want %v %v", p.waitFor, p.lacking, tt.waitFor, tt.lacking)
			}
		})
	}
}

func TestKeyringSteps(t *testing.T) {
	a, b, c := k(1, 32), k(2, 32), k(3, 32)
	tests := []struct {
		name    string
		current [][]byte
		want    [][]byte
		encrypt []byte
		add     [][]byte
		use     bool
		remove  [][]byte
	}{
		{"nothing to do", [][]byte{a, b}, [][]byte{a, b}, a, nil, false, nil},
		{"add a secondary", [][]byte{a}, [][]byte{a, b}, a, [][]byte{b}, false, nil},
		{"switch", [][]byte{a, b}, [][]byte{b, a}, b, nil, true, nil},
		{"remove the old key, last after the switch", [][]byte{b, a}, [][]byte{b}, b, nil, false, [][]byte{a}},
		{"switch held back: the new key is added, the old encrypts", [][]byte{a}, [][]byte{b, a}, a, [][]byte{b}, false, nil},
		{"all at once, removals last to first", [][]byte{a, b, c}, [][]byte{k(4, 32)}, k(4, 32), [][]byte{k(4, 32)}, true, [][]byte{c, b, a}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			add, use, remove := keyringSteps(tt.current, tt.want, tt.encrypt)
			if !slices.EqualFunc(add, tt.add, bytes.Equal) || use != tt.use || !slices.EqualFunc(remove, tt.remove, bytes.Equal) {
				t.Errorf("add %v use %v remove %v, want %v %v %v", fingerprints(add), use, fingerprints(remove),
					fingerprints(tt.add), tt.use, fingerprints(tt.remove))
			}
		})
	}
}

func TestRetainKeys(t *testing.T) {
	old, next := k(1, 32), k(2, 32)
	fo, fn := Fingerprint(old), Fingerprint(next)
	step3 := KeySet{Primary: next}
	now := time.Unix(1000, 0)
	tests := []struct {
		name    string
		current [][]byte
		set     KeySet
		left    map[string]time.Time
		peers   map[string]string
		keep    [][]byte
		recheck time.Duration
		leftNow map[string]time.Time
	}{
		{name: "nobody encrypts with the old key: dropped", current: [][]byte{next, old}, set: step3,
			peers: map[string]string{"b": fn + "," + fo, "c": fn}, leftNow: map[string]time.Time{}},
		{name: "d still encrypts with it: kept, the bound starts", current: [][]byte{next, old}, set: step3,
			peers: map[string]string{"c": fn, "d": fo + "," + fn}, keep: [][]byte{old}, recheck: keyRetention,
			leftNow: map[string]time.Time{fo: now}},
		{name: "kept for what is left of the bound", current: [][]byte{next, old}, set: step3,
			left: map[string]time.Time{fo: now.Add(-20 * time.Second)}, peers: map[string]string{"d": fo + "," + fn},
			keep: [][]byte{old}, recheck: keyRetention - 20*time.Second, leftNow: map[string]time.Time{fo: now.Add(-20 * time.Second)}},
		{name: "the bound is up: dropped whatever the members say", current: [][]byte{next, old}, set: step3,
			left: map[string]time.Time{fo: now.Add(-keyRetention)}, peers: map[string]string{"d": fo + "," + fn},
			leftNow: map[string]time.Time{}},
		{name: "a member that only decrypts it does not keep it", current: [][]byte{next, old}, set: step3,
			peers: map[string]string{"d": fn + ",-" + fo}, leftNow: map[string]time.Time{}},
		{name: "four keys configured: none kept beyond them", current: [][]byte{next, old, k(3, 32), k(4, 32), k(5, 32)},
			set: KeySet{Primary: next, Secondary: [][]byte{k(3, 32), k(4, 32), k(5, 32)}}, peers: map[string]string{"d": fo}, leftNow: map[string]time.Time{}},
		{name: "configured again: not leaving, forgotten", current: [][]byte{next, old}, set: KeySet{Primary: next, Secondary: [][]byte{old}},
			left: map[string]time.Time{fo: now.Add(-time.Second)}, peers: map[string]string{"d": fo}, leftNow: map[string]time.Time{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			left := maps.Clone(tt.left)
			if left == nil {
				left = map[string]time.Time{}
			}
			keep, recheck := retainKeys(tt.current, tt.set, left, tt.peers, now)
			if !slices.EqualFunc(keep, tt.keep, bytes.Equal) || recheck != tt.recheck {
				t.Errorf("keep %v recheck %s, want %v %s", fingerprints(keep), recheck, fingerprints(tt.keep), tt.recheck)
			}
			if !maps.Equal(left, tt.leftNow) {
				t.Errorf("left %v, want %v", left, tt.leftNow)
			}
		})
	}
	// What a member keeps to decrypt only is not held: the others do not
	// encrypt with it.
	if text := keysText([][]byte{next, old}, [][]byte{old}); text != fn+",-"+fo || holds(text, fo) || !holds(text, fn) {
		t.Errorf("keysText with old leaving = %q", text)
	}
}
