package main

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func TestSummary(t *testing.T) {
	stream := `{"Action":"run","Package":"fenced.io/fenced/test/e2e","Test":"TestA"}
{"Action":"pass","Package":"fenced.io/fenced/test/e2e","Test":"TestA/one","Elapsed":3.5}
{"Action":"pass","Package":"fenced.io/fenced/test/e2e","Test":"TestA","Elapsed":12}
not json: build output
{"Action":"fail","Package":"fenced.io/fenced/pkg/x","Test":"TestBroken","Elapsed":0.1}
{"Action":"pass","Package":"fenced.io/fenced/pkg/x","Test":"TestFast","Elapsed":0.2}
{"Action":"pass","Package":"fenced.io/fenced/pkg/y","Test":"TestSlow","Elapsed":45}
{"Action":"skip","Package":"fenced.io/fenced/pkg/y","Test":"TestSkipped","Elapsed":0}
{"Action":"fail","Package":"fenced.io/fenced/pkg/x","Elapsed":1}
{"Action":"pass","Package":"fenced.io/fenced/test/e2e","Elapsed":15}
`
	tests, pkgs, err := read(strings.NewReader(stream))
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	write(&out, tests, pkgs, "/test/e2e", 30)
	got := out.String()
	for _, want := range []string{"PASS", "test/e2e", "TestA", "  TestA/one", "FAIL", "TestBroken", "TestSlow",
		"packages: 1 ok, 1 failed", "tests: 4 passed, 1 failed, 1 skipped"} {
		if !strings.Contains(got, want) {
			t.Errorf("summary lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "TestFast") {
		t.Errorf("a fast passing unit test is listed:\n%s", got)
	}
}

func TestStillRunning(t *testing.T) {
	stream := `{"Time":"2026-11-23T10:00:00Z","Action":"run","Package":"fenced.io/fenced/test/e2e","Test":"TestSlow"}
{"Time":"2026-11-23T10:00:05Z","Action":"run","Package":"fenced.io/fenced/test/e2e","Test":"TestSlow/sub"}
{"Time":"2026-11-23T10:00:10Z","Action":"run","Package":"fenced.io/fenced/pkg/x","Test":"TestDone"}
{"Time":"2026-11-23T10:00:11Z","Action":"pass","Package":"fenced.io/fenced/pkg/x","Test":"TestDone","Elapsed":1}
{"Time":"2026-11-23T10:00:20Z","Action":"run","Package":"fenced.io/fenced/pkg/y","Test":"TestOther"}
`
	now, _ := time.Parse(time.RFC3339, "2026-11-23T10:01:30Z")
	got := stillRunning(strings.NewReader(stream), now, 90*time.Second)
	want := "… 1m30s into the tests, still running: test/e2e.TestSlow (1m30s), pkg/y.TestOther (1m10s)"
	if got != want {
		t.Errorf("stillRunning =\n%q, want\n%q", got, want)
	}
	if got := stillRunning(strings.NewReader(""), now, 0); got != "" {
		t.Errorf("nothing running: %q", got)
	}
}
