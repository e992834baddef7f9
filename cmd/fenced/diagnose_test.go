package main

import (
	"context"
	"strings"
	"testing"
)

func TestDiagnoseUsage(t *testing.T) {
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"bad output", []string{"diagnose", "-o", "xml"}, `output format "xml"`},
		{"-n and -A", []string{"diagnose", "-n", "app", "-A"}, "-n and -A exclude each other"},
		{"bad target", []string{"diagnose", "deployment/web"}, `"deployment/web": want POD, pvc/NAME or node/NAME`},
		{"two targets", []string{"diagnose", "a", "b"}, "expected at most one"},
		{"--fix with json", []string{"diagnose", "--fix", "-o", "json"}, "--fix prints its plan"},
		{"unknown flag", []string{"diagnose", "--force"}, "unknown flag: --force"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, _, errOut := fenced(t, context.Background(), tc.args...)
			if code != exitUsage || !strings.Contains(errOut, tc.want) {
				t.Fatalf("code %d, stderr %q; want %d and %q", code, errOut, exitUsage, tc.want)
			}
		})
	}
}

func TestDiagnoseHelp(t *testing.T) {
	code, out, _ := fenced(t, context.Background(), "diagnose", "--help")
	for _, want := range []string{"Examples:", "RBAC:", "delete and update volumeattachments", "Exit codes", "fenced.io/graceful-shutdown"} {
		if code != exitOK || !strings.Contains(out, want) {
			t.Errorf("diagnose --help: code %d, lacks %q", code, want)
		}
	}
}
