package procstat

import (
	"os"
	"testing"
)

// TestSelf reads this test process: it has used some CPU and holds some
// memory; a process that does not exist reads 0.
func TestSelf(t *testing.T) {
	tests := []struct {
		name    string
		pid     int
		wantAny bool
	}{
		{"this process", os.Getpid(), true},
		{"no such process", 1 << 30, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := RSSMB(tt.pid); (got > 0) != tt.wantAny {
				t.Errorf("RSSMB = %v", got)
			}
			if got := AnonMB(tt.pid); (got > 0) != tt.wantAny || got > RSSMB(tt.pid)+1 {
				t.Errorf("AnonMB = %v (RSS %v)", got, RSSMB(tt.pid))
			}
			if got := CPUSeconds(tt.pid); got < 0 || !tt.wantAny && got != 0 {
				t.Errorf("CPUSeconds = %v", got)
			}
		})
	}
}
