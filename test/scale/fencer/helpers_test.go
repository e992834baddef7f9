package fencer_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(v))
	return s[len(s)/2]
}

// auditEvent is what the counts need of an audit log line.
type auditEvent struct {
	Stage          string
	Verb           string
	ObjectRef      struct{ Resource string }
	StageTimestamp time.Time
}

// auditEvents calls fn for each audit event that ended in [from, to).
func auditEvents(t *testing.T, path string, from, to time.Time, fn func(auditEvent)) {
	t.Helper()
	f, err := os.Open(path)
	must(t, err)
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var e auditEvent
		if json.Unmarshal(sc.Bytes(), &e) != nil || e.StageTimestamp.Before(from) || !e.StageTimestamp.Before(to) {
			continue
		}
		fn(e)
	}
}

// auditCounts counts the requests completed in [from, to), watches
// aside, and the watches started then (the policy logs the fencer only).
func auditCounts(t *testing.T, path string, from, to time.Time) (requests, watches int) {
	t.Helper()
	auditEvents(t, path, from, to, func(e auditEvent) {
		switch {
		case e.Verb == "watch" && e.Stage == "ResponseStarted":
			watches++
		case e.Stage == "ResponseComplete" && e.Verb != "watch":
			requests++
		}
	})
	return requests, watches
}

// auditVerbs summarises the requests in [from, to) by verb and resource.
func auditVerbs(t *testing.T, path string, from, to time.Time) string {
	t.Helper()
	n := map[string]int{}
	auditEvents(t, path, from, to, func(e auditEvent) {
		if e.Stage == "ResponseComplete" && e.Verb != "watch" {
			n[e.Verb+" "+e.ObjectRef.Resource]++
		}
	})
	var out []string
	for _, k := range slices.Sorted(maps.Keys(n)) {
		out = append(out, fmt.Sprintf("%d %s", n[k], k))
	}
	return strings.Join(out, ", ")
}
