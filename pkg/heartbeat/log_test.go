package heartbeat

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

func TestMemberlistLogsGoToSlogAtDebug(t *testing.T) {
	cases := []struct {
		name  string
		level slog.Level
		line  string
		want  string // "" = nothing logged
	}{
		{"warn line", slog.LevelDebug, "[WARN] memberlist: Refuting a suspect message (from: b)",
			`level=DEBUG msg="Refuting a suspect message (from: b)" component=memberlist mlLevel=WARN`},
		{"no level", slog.LevelDebug, "plain text", `level=DEBUG msg="plain text" component=memberlist`},
		{"dropped at info", slog.LevelInfo, "[ERR] memberlist: Failed to send", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			h := slog.NewTextHandler(&buf, &slog.HandlerOptions{
				Level: tc.level,
				ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
					if a.Key == slog.TimeKey {
						return slog.Attr{}
					}
					return a
				},
			})
			memberlistLogger(slog.New(h)).Printf("%s", tc.line)
			if got := strings.TrimSpace(buf.String()); got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}
