package heartbeat

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// PeerText is a string a peer chose: a member name, a metadata or
// message field, an error that quotes one. It logs clipped to
// maxLoggedPeerText bytes with its full length, so that no holder of the
// gossip key decides how much an agent writes to its logs. Log every
// such value through it (heartbeat and fencer).
type PeerText string

// maxLoggedPeerText keeps every genuine value whole (a node name is at
// most 253 bytes) and a forged one short.
const maxLoggedPeerText = 256

// LogValue implements slog.LogValuer.
func (s PeerText) LogValue() slog.Value {
	return slog.StringValue(clip(string(s), maxLoggedPeerText))
}

// clip cuts s to at most max bytes (on a UTF-8 boundary) and says how
// long it was; only what is kept is copied.
func clip[T ~string | ~[]byte](s T, max int) string {
	if len(s) <= max {
		return string(s)
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return fmt.Sprintf("%s…(%d bytes)", s[:cut], len(s))
}

// WarnLimiter lets at most burst warnings a minute through at warn
// level; the others are logged at debug, and the next warning let
// through says how many were held back. Peers decide how often an agent
// warns about them: a warning repeated for every forged message would
// bury the rest of the log.
type WarnLimiter struct {
	burst int
	now   func() time.Time

	mu         sync.Mutex
	window     time.Time // start of the current minute
	sent       int       // warnings let through in it
	suppressed int       // warnings held back since the last let through
}

// warnWindow is WarnLimiter's period.
const warnWindow = time.Minute

// NewWarnLimiter returns a WarnLimiter of burst warnings a minute.
func NewWarnLimiter(burst int) *WarnLimiter {
	return &WarnLimiter{burst: burst, now: time.Now}
}

// Warn logs msg with attrs to l at warn level, or at debug level when
// this minute's warnings are spent.
func (w *WarnLimiter) Warn(l *slog.Logger, msg string, attrs ...any) {
	w.mu.Lock()
	now := w.now()
	if now.Sub(w.window) >= warnWindow {
		w.window, w.sent = now, 0
	}
	allowed := w.sent < w.burst
	held := 0
	if allowed {
		w.sent++
		held, w.suppressed = w.suppressed, 0
	} else {
		w.suppressed++
	}
	w.mu.Unlock()
	if !allowed {
		l.Debug(msg, attrs...)
		return
	}
	if held > 0 {
		attrs = append(attrs, "heldBack", held)
	}
	l.Warn(msg, attrs...)
}

// memberlistLogger returns a *log.Logger for memberlist.Config.Logger that
// forwards memberlist's own log lines to l at debug level. memberlist logs
// every failed probe, refutation and push/pull, which is noise at info;
// the state changes that matter are logged by this package at info. The
// memberlist level ("[WARN]" …) is kept as the attribute "mlLevel".
func memberlistLogger(l *slog.Logger) *log.Logger {
	return log.New(slogWriter{l}, "", 0)
}

type slogWriter struct{ l *slog.Logger }

// maxMemberlistLine bounds a memberlist log line as logged.
const maxMemberlistLine = 1024

// Write receives one memberlist log line per call (log.Logger guarantees
// one Write per Printf), e.g. "[DEBUG] memberlist: Stream connection from=…".
func (w slogWriter) Write(p []byte) (int, error) {
	if !w.l.Enabled(context.Background(), slog.LevelDebug) {
		return len(p), nil
	}
	// memberlist quotes member names, which a peer chooses: the line is
	// clipped before it is copied.
	msg := strings.TrimRight(clip(p, maxMemberlistLine), "\n")
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
