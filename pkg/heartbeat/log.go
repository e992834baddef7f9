package heartbeat

import (
	"context"
	"log"
	"log/slog"
	"strings"
)

// memberlistLogger returns a *log.Logger for memberlist.Config.Logger that
// forwards memberlist's own log lines to l at debug level. memberlist logs
// every failed probe, refutation and push/pull, which is noise at info;
// the state changes that matter are logged by this package at info. The
// memberlist level ("[WARN]" …) is kept as the attribute "mlLevel".
func memberlistLogger(l *slog.Logger) *log.Logger {
	return log.New(slogWriter{l}, "", 0)
}

type slogWriter struct{ l *slog.Logger }

// Write receives one memberlist log line per call (log.Logger guarantees
// one Write per Printf), e.g. "[DEBUG] memberlist: Stream connection from=…".
func (w slogWriter) Write(p []byte) (int, error) {
	if !w.l.Enabled(context.Background(), slog.LevelDebug) {
		return len(p), nil
	}
	msg := strings.TrimRight(string(p), "\n")
	level := ""
	if strings.HasPrefix(msg, "[") {
		if end := strings.IndexByte(msg, ']'); end > 0 {
			level = msg[1:end]
			msg = strings.TrimSpace(msg[end+1:])
		}
	}
	msg = strings.TrimPrefix(msg, "memberlist: ")
	if level == "" {
		w.l.Debug(msg, "component", "memberlist")
	} else {
		w.l.Debug(msg, "component", "memberlist", "mlLevel", level)
	}
	return len(p), nil
}
