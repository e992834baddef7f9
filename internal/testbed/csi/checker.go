package csi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"
)

// WriterID identifies a writer: one life of a pod on one boot of a node.
type WriterID struct {
	Node, Boot, Pod, UID string
}

// String names the writer for error messages.
func (w WriterID) String() string {
	pod := w.Pod
	if w.UID != "" && w.UID != w.Pod {
		pod += " (uid " + w.UID + ")"
	}
	return fmt.Sprintf("pod %s on node %s (boot %s)", pod, w.Node, w.Boot)
}

// WriterStats sums up the records of one writer.
type WriterStats struct {
	WriterID
	First, Last time.Time
	Count       int
}

// Overlap is a data-safety violation: records that Old wrote after New,
// which started later, had written its first record.
type Overlap struct {
	Old, New WriterID
	// NewStart is the time of New's first record.
	NewStart time.Time
	// First and Last are the times of Old's first and last offending
	// records; FirstLine is the 1-based line of the first.
	First, Last time.Time
	FirstLine   int
	Count       int
}

// Report is the result of CheckVolume.
type Report struct {
	Path    string
	Records int
	// Writers in the order of their first record.
	Writers  []WriterStats
	Overlaps []Overlap
	// Truncated is set when the last line was incomplete (a writer killed
	// mid-write) and was ignored.
	Truncated bool
}

// Err returns an error describing the overlaps, or nil if there are none.
func (r Report) Err() error {
	if len(r.Overlaps) == 0 {
		return nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s: two writers on one volume:", r.Path)
	for _, o := range r.Overlaps {
		fmt.Fprintf(&b, "\n  %v wrote %d records from %s to %s (first at line %d, %v after %v started at %s)",
			o.Old, o.Count, o.First.Format(time.RFC3339Nano), o.Last.Format(time.RFC3339Nano), o.FirstLine,
			o.First.Sub(o.NewStart), o.New, o.NewStart.Format(time.RFC3339Nano))
	}
	return errors.New(b.String())
}

// CheckVolume reads a volume file and reports its writers and any record
// of a writer that comes, in file order, after the first record of a writer
// that started after it. File order is the order of the O_APPEND writes,
// so it does not depend on the machines' clocks.
func CheckVolume(path string) (Report, error) {
	r := Report{Path: path}
	data, err := os.ReadFile(path)
	if err != nil {
		return r, err
	}
	lines := bytes.Split(data, []byte("\n"))
	// Split leaves "" after a final newline and the incomplete line
	// otherwise.
	if last := lines[len(lines)-1]; len(last) > 0 {
		r.Truncated = true
	}
	lines = lines[:len(lines)-1]

	index := map[WriterID]int{}  // into r.Writers
	overlaps := map[[2]int]int{} // (old, new) writer index -> into r.Overlaps
	for n, line := range lines {
		var rec Record
		if err := json.Unmarshal(line, &rec); err != nil {
			return r, fmt.Errorf("%s:%d: %w", path, n+1, err)
		}
		r.Records++
		id := WriterID{Node: rec.Node, Boot: rec.Boot, Pod: rec.Pod, UID: rec.UID}
		t := time.Unix(0, rec.T)
		i, ok := index[id]
		if !ok {
			i = len(r.Writers)
			index[id] = i
			r.Writers = append(r.Writers, WriterStats{WriterID: id, First: t})
		}
		w := &r.Writers[i]
		w.Last = t
		w.Count++

		// The newest writer so far is the last one in r.Writers.
		newest := len(r.Writers) - 1
		if i == newest {
			continue
		}
		k, ok := overlaps[[2]int{i, newest}]
		if !ok {
			k = len(r.Overlaps)
			overlaps[[2]int{i, newest}] = k
			r.Overlaps = append(r.Overlaps, Overlap{
				Old: id, New: r.Writers[newest].WriterID, NewStart: r.Writers[newest].First,
				First: t, FirstLine: n + 1,
			})
		}
		r.Overlaps[k].Last = t
		r.Overlaps[k].Count++
	}
	return r, nil
}
