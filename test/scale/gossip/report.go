package gossip

import (
	"fmt"
	"runtime"
	"strings"
	"time"
)

// Report formats results as docs/measurements.md's tables (Markdown).
func Report(results []Result) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Detection of crashed members (shut down without leaving), seconds from the crash; one process, GOMAXPROCS %d. A ring whose timers were stretched (×k) was measured in wall time and is shown in the protocol's: times ÷ k, rates and CPU per second × k; its \"ring formed in\" is wall time:\n\n", runtime.GOMAXPROCS(0))
	b.WriteString("| N | profile | kills | first sees dead p50 / p99 | all see dead p50 / p99 | missed | memberlist suspicion min–max | ring formed in |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|\n")
	for _, r := range results {
		var first, last []time.Duration
		missed := 0
		for _, d := range r.Detections {
			first, last = append(first, d.First), append(last, d.Last)
			missed += d.Missed
		}
		s := suspicionTimeout(r.Timings, r.Size)
		fmt.Fprintf(&b, "| %d | %s | %d | %s / %s | %s / %s | %d | %s–%s | %s |\n", r.Size, profileLabel(r), len(r.Detections),
			secs(percentile(first, .5)), secs(percentile(first, .99)), secs(percentile(last, .5)), secs(percentile(last, .99)),
			missed, secs(s), secs(6*s), secs(r.Build))
	}
	b.WriteString("\nAt rest: false \"dead\" reports (a member seeing a member dead that was never killed; each would cost one BMC read), traffic and cost:\n\n")
	b.WriteString("CPU / member includes the busy goroutines in the CPU-starved window. Bytes include TCP push/pull (every 30 s, more in big rings), so short windows are noisy.\n\n")
	b.WriteString("| N | profile | window | member-hours | false dead reports | per member-hour | members seen dead | packets / member / s | bytes / member / s | process CPU | CPU / member | sched p99 |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range results {
		for _, w := range r.Windows {
			mh := float64(r.Size) * w.Duration.Hours()
			perMember := func(v int64) float64 { return float64(v) / float64(r.Size) / w.Duration.Seconds() }
			cpu := w.CPU.Seconds() / w.Duration.Seconds()
			fmt.Fprintf(&b, "| %d | %s | %s | %.1f | %d | %.2f | %d | %.1f | %.0f | %.0f %% | %.2f ms/s | %s |\n",
				r.Size, profileLabel(r), w.Name, mh, w.FalseReports, float64(w.FalseReports)/mh, w.FalseSubjects,
				perMember(w.Traffic.Packets), perMember(w.Traffic.PacketBytes+w.Traffic.StreamBytes),
				100*cpu, 1000*cpu/float64(r.Size), latency(w.SchedP99))
		}
	}
	for _, r := range results {
		for _, w := range r.Windows {
			if w.Unsettled != "" {
				fmt.Fprintf(&b, "\nN=%d %s, after %q: %s.\n", r.Size, r.Profile, w.Name, w.Unsettled)
			} else if w.Recovery > 5*time.Second {
				fmt.Fprintf(&b, "\nN=%d %s, after %q: every member saw every other alive again %s later.\n", r.Size, r.Profile, w.Name, secs(w.Recovery))
			}
		}
		if r.Replaced > 0 {
			fmt.Fprintf(&b, "\nN=%d %s: while the ring formed, %d member(s) had missed a newcomer's join %s after its batch and were replaced (memberlist's push/pull would have repaired it within %s).\n",
				r.Size, profileLabel(r), r.Replaced, secs(joinSettle), secs(pushPullRepair(r.Size)))
		}
		if r.Unsettled > 0 {
			fmt.Fprintf(&b, "\nN=%d %s: after %d kill batches the ring had not settled within %s; the next crashes hit a ring still flapping.\n", r.Size, r.Profile, r.Unsettled, settleWait)
		}
	}
	b.WriteString("\nMemory: process RSS with the ring formed, at rest, divided by the members (one process: the Go runtime's own few MB are shared):\n\n")
	b.WriteString("| N | profile | process RSS | per member |\n|---|---|---|---|\n")
	for _, r := range results {
		fmt.Fprintf(&b, "| %d | %s | %.0f MiB | %.0f KiB |\n", r.Size, profileLabel(r), float64(r.RSS)/(1<<20), float64(r.RSS)/1024/float64(r.Size))
	}
	return b.String()
}

// profileLabel names r's profile and, for a dilated ring, the factor its
// timers were stretched by (its figures are in the protocol's time).
func profileLabel(r Result) string {
	if r.Dilation > 1 {
		return fmt.Sprintf("%s, timers ×%g", r.Profile, r.Dilation)
	}
	return string(r.Profile)
}

// latency rounds a scheduling latency for the table.
func latency(d time.Duration) string {
	if d < 10*time.Microsecond {
		return "<10µs"
	}
	return d.Round(10 * time.Microsecond).String()
}

func secs(d time.Duration) string { return fmt.Sprintf("%.2f", d.Seconds()) }
