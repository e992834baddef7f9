package csi

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// line returns one record line as a writer writes it.
func line(t *testing.T, node, boot, pod string, at int64) string {
	t.Helper()
	b, err := json.Marshal(Record{T: at, Pod: pod, Node: node, Boot: boot, Seq: at})
	if err != nil {
		t.Fatal(err)
	}
	return string(b) + "\n"
}

func TestCheckVolume(t *testing.T) {
	a1 := func(at int64) string { return line(t, "a", "boot1", "ns/web-0", at) }
	b1 := func(at int64) string { return line(t, "b", "boot1", "ns/web-0", at) }
	a2 := func(at int64) string { return line(t, "a", "boot2", "ns/web-0", at) }

	tests := []struct {
		name      string
		content   string
		writers   int
		overlaps  []Overlap // only Old.Node, Old.Boot, New.Node, Count, FirstLine are compared
		truncated bool
		wantErr   bool
	}{
		{name: "empty file"},
		{name: "one writer", content: a1(1) + a1(2) + a1(3), writers: 1},
		{name: "clean handover", content: a1(1) + a1(2) + b1(3) + b1(4), writers: 2},
		{name: "handover back after reboot", content: a1(1) + b1(2) + a2(3), writers: 3},
		{
			// The frozen node is thawed and its writer carries on: the
			// hazard fencing must prevent.
			name:    "old writer resumes after new one started",
			content: a1(1) + b1(2) + b1(3) + a1(4) + b1(5) + a1(6),
			writers: 2,
			overlaps: []Overlap{{
				Old: WriterID{Node: "a", Boot: "boot1"}, New: WriterID{Node: "b", Boot: "boot1"},
				Count: 2, FirstLine: 4,
			}},
		},
		{
			name:    "interleaved from the start",
			content: a1(1) + b1(2) + a1(3),
			writers: 2,
			overlaps: []Overlap{{
				Old: WriterID{Node: "a", Boot: "boot1"}, New: WriterID{Node: "b", Boot: "boot1"},
				Count: 1, FirstLine: 3,
			}},
		},
		{
			name:      "truncated last line",
			content:   a1(1) + b1(2) + b1(3)[:10],
			writers:   2,
			truncated: true,
		},
		{
			name:      "truncated overlap still counts",
			content:   a1(1) + b1(2) + a1(3) + b1(4)[:5],
			writers:   2,
			truncated: true,
			overlaps: []Overlap{{
				Old: WriterID{Node: "a", Boot: "boot1"}, New: WriterID{Node: "b", Boot: "boot1"},
				Count: 1, FirstLine: 3,
			}},
		},
		{name: "garbage in the middle", content: a1(1) + "{oops\n" + a1(2), wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "vol")
			if err := os.WriteFile(path, []byte(tt.content), 0o644); err != nil {
				t.Fatal(err)
			}
			rep, err := CheckVolume(path)
			if tt.wantErr {
				if err == nil {
					t.Fatal("no error")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(rep.Writers) != tt.writers || rep.Truncated != tt.truncated {
				t.Errorf("writers %d, truncated %v; want %d, %v", len(rep.Writers), rep.Truncated, tt.writers, tt.truncated)
			}
			if len(rep.Overlaps) != len(tt.overlaps) {
				t.Fatalf("overlaps = %+v, want %d", rep.Overlaps, len(tt.overlaps))
			}
			for i, o := range rep.Overlaps {
				w := tt.overlaps[i]
				if o.Old.Node != w.Old.Node || o.Old.Boot != w.Old.Boot || o.New.Node != w.New.Node ||
					o.Count != w.Count || o.FirstLine != w.FirstLine {
					t.Errorf("overlap %d = %+v, want %+v", i, o, w)
				}
			}
			if err := rep.Err(); (err != nil) != (len(tt.overlaps) > 0) {
				t.Errorf("Err() = %v", err)
			}
		})
	}
}

func TestCheckVolumeReport(t *testing.T) {
	path := filepath.Join(t.TempDir(), "vol")
	content := line(t, "a", "boot1", "ns/web-0", 100) + line(t, "a", "boot1", "ns/web-0", 200) +
		line(t, "b", "boot7", "ns/web-0", 300) + line(t, "a", "boot1", "ns/web-0", 400)
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	rep, err := CheckVolume(path)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Records != 4 || len(rep.Writers) != 2 {
		t.Fatalf("report = %+v", rep)
	}
	a, b := rep.Writers[0], rep.Writers[1]
	if a.Node != "a" || a.Count != 3 || a.First.UnixNano() != 100 || a.Last.UnixNano() != 400 ||
		b.Node != "b" || b.Count != 1 || b.First.UnixNano() != 300 {
		t.Errorf("writers = %+v", rep.Writers)
	}
	o := rep.Overlaps[0]
	if o.NewStart.UnixNano() != 300 || o.First.UnixNano() != 400 || o.Last.UnixNano() != 400 {
		t.Errorf("overlap = %+v", o)
	}
	// The message must let a reader find both writers.
	msg := rep.Err().Error()
	for _, s := range []string{path, "ns/web-0", "node a", "boot boot1", "node b", "boot boot7", "line 4"} {
		if !strings.Contains(msg, s) {
			t.Errorf("Err() lacks %q:\n%s", s, msg)
		}
	}
}

func TestCheckVolumeMissingFile(t *testing.T) {
	if _, err := CheckVolume(filepath.Join(t.TempDir(), "none")); err == nil {
		t.Error("no error for a missing file")
	}
}
