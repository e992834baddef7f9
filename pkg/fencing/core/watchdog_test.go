package core

import (
	"testing"
	"time"
)

// TestWatchdogWait: (T+W)(1+ρ)/(1−ρ) plus the reset margin, never less
// than T+W plus the margin.
func TestWatchdogWait(t *testing.T) {
	tests := []struct {
		T, W time.Duration
		want time.Duration
	}{
		{30 * time.Second, 10 * time.Second, 42808080809 * time.Nanosecond}, // 40 s × 1.01/0.99 + 2 s
		{5 * time.Second, 5 * time.Second, 12202020203 * time.Nanosecond},
		{0, 0, WatchdogResetMargin},
	}
	for _, tt := range tests {
		got := WatchdogWait(WatchdogArm{Confirm: tt.T, Timeout: tt.W})
		if got != tt.want {
			t.Errorf("WatchdogWait(T=%s, W=%s) = %s, want %s", tt.T, tt.W, got, tt.want)
		}
		if got < tt.T+tt.W+WatchdogResetMargin {
			t.Errorf("WatchdogWait(T=%s, W=%s) = %s: less than T+W and the margin", tt.T, tt.W, got)
		}
	}
}
