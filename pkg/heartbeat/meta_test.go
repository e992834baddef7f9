package heartbeat

import (
	"strings"
	"testing"

	"fenced.io/fenced/pkg/vocab"
)

func TestMetaRoundTrip(t *testing.T) {
	in := Meta{Version: MetaVersion, Node: "worker-1", BootID: "6f1c2a9e-3d4b-4c5d-8e7f-0a1b2c3d4e5f", Role: RoleFencer, State: vocab.AnnounceShutdownComplete, Agent: "v0.3.1"}
	b, err := in.Encode()
	if err != nil {
		t.Fatal(err)
	}
	out, err := DecodeMeta(b)
	if err != nil {
		t.Fatal(err)
	}
	if out != in {
		t.Errorf("round trip: got %+v, want %+v", out, in)
	}
}

func TestMetaEncodeLimits(t *testing.T) {
	cases := []struct {
		name    string
		meta    Meta
		wantErr string
	}{
		{"typical", Meta{Version: 1, Node: strings.Repeat("n", 63), BootID: strings.Repeat("b", 36), Role: RoleObserver, State: vocab.AnnounceShuttingDown, Agent: "v1.2.3-rc.1+abcdef"}, ""},
		// A Kubernetes node name can be 253 characters: it still fits.
		{"longest node name", Meta{Version: 1, Node: strings.Repeat("n", 253), BootID: strings.Repeat("b", 36), Role: RoleObserver, State: vocab.AnnounceShuttingDown, Agent: strings.Repeat("v", 64)}, ""},
		// Signed, with a rotation's keys at their most: MaxKeys, one leaving.
		{"signed, with every key", Meta{Version: MetaVersion, Node: strings.Repeat("n", 63), BootID: strings.Repeat("b", 36), Role: RoleObserver,
			State: vocab.AnnounceShutdownComplete, Agent: "v1.2.3-rc.1+abcdef", Seq: 1 << 62, Sig: strings.Repeat("A", 88),
			Keys: keysText([][]byte{k(1, 32), k(2, 32), k(3, 32), k(4, 32)}, [][]byte{k(4, 32)})}, ""},
		{"too large", Meta{Version: 1, Node: "a", Agent: strings.Repeat("v", MaxMetaSize)}, "the limit is 512"},
		{"no version", Meta{Node: "a"}, "no version"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b, err := tc.meta.Encode()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(b) > MaxMetaSize {
				t.Errorf("encoded %d bytes", len(b))
			}
		})
	}
}

func TestDecodeMeta(t *testing.T) {
	cases := []struct {
		name    string
		in      string
		want    Meta
		wantErr string
	}{
		{"current", `{"v":1,"node":"a","boot":"b1","role":"observer","state":"running","agent":"x"}`,
			Meta{Version: 1, Node: "a", BootID: "b1", Role: RoleObserver, State: vocab.AnnounceRunning, Agent: "x"}, ""},
		{"future version keeps known fields",
			`{"v":7,"node":"a","boot":"b1","role":"fencer","state":"draining","agent":"v9","zone":"eu-1","caps":["x",{"y":1}]}`,
			Meta{Version: 7, Node: "a", BootID: "b1", Role: RoleFencer, State: "draining", Agent: "v9"}, ""},
		{"no version", `{"node":"a"}`, Meta{}, "no version"},
		{"empty", ``, Meta{}, "empty meta"},
		{"not json", "\x01\x02memberlist", Meta{}, "decode meta"},
		{"wrong type", `{"v":"one"}`, Meta{}, "decode meta"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := DecodeMeta([]byte(tc.in))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestLocalMetaDefaults(t *testing.T) {
	m, b, err := localMeta(Meta{Version: 9, BootID: "b"}, "node-a", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := Meta{Version: MetaVersion, Node: "node-a", BootID: "b", Role: RoleObserver, State: vocab.AnnounceRunning}
	if m != want {
		t.Errorf("got %+v, want %+v", m, want)
	}
	if back, err := DecodeMeta(b); err != nil || back != want {
		t.Errorf("encoded form decodes to %+v, %v", back, err)
	}
}
