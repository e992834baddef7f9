package admin

import (
	"fmt"
	"io"
	"strings"
	"time"

	"fenced.io/fenced/pkg/diagnose"
	"fenced.io/fenced/pkg/printer"
)

// ANSI colours of the CAUSE column. Every cell of the column gets a colour
// (the terminal's default for the quiet ones) so that the escape bytes,
// which tabwriter counts as width, are the same in every row.
const (
	colorRed     = "\x1b[31m"
	colorYellow  = "\x1b[33m"
	colorDefault = "\x1b[39m"
	colorReset   = "\x1b[0m"
)

func causeColor(c diagnose.Cause) string {
	switch c {
	case diagnose.CauseDeadNode, diagnose.CauseDeletedNode, diagnose.CauseStaleAttachment, diagnose.CauseAttachError:
		return colorRed
	case diagnose.CauseRollingUpdate, diagnose.CauseSharedClaim, diagnose.CauseReadWriteOncePod:
		return colorYellow
	}
	return colorDefault
}

func paint(on bool, color, s string) string {
	if !on {
		return s
	}
	return color + s + colorReset
}

// DiagnosisDoc is r as the printers print it (package printer): the
// diagnose.Report as it is, one row per finding, -o name printing
// pod/NAME for each stuck pod; as text a kubectl-like table, then each
// finding's proof and fix (color only for a terminal). now is the
// reference for ages.
func DiagnosisDoc(r diagnose.Report, color bool, now time.Time) printer.Doc {
	if r.Findings == nil {
		r.Findings = []diagnose.Finding{} // "findings": [], never null
	}
	var pods []string
	for _, f := range r.Findings {
		// f.Pod is namespace/name; kubectl's -o name prints pod/NAME.
		pods = append(pods, f.Pod[strings.LastIndex(f.Pod, "/")+1:])
	}
	return printer.Doc{Kind: "Diagnosis", Value: r, Rows: "findings", NameKind: "Pod", Names: pods,
		Text: func(w io.Writer, o printer.TextOptions) error { return writeDiagnosis(w, r, o, color, now) }}
}

func writeDiagnosis(w io.Writer, r diagnose.Report, o printer.TextOptions, color bool, now time.Time) error {
	if !r.Stuck() {
		fmt.Fprintln(w, "No pod is stuck on a Multi-Attach error.")
	} else {
		tw := o.Table(w, "POD", "NODE", "VOLUME", "HELD-BY", "CAUSE", "FIX", "SINCE")
		for _, f := range r.Findings {
			fmt.Fprintln(tw, strings.Join([]string{f.Pod, dash(f.Node), f.Volume, dash(f.HeldBy),
				paint(color, causeColor(f.Cause), string(f.Cause)), fixCell(f.Fix), age(f.Since, now)}, "\t"))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		for _, f := range r.Findings {
			fmt.Fprintf(w, "\n%s: %s\n", paint(color, "\x1b[1m", f.Pod), f.Summary)
			// One line per object: VolumeAttachment names are too long
			// for a column.
			for _, p := range f.Proof {
				fmt.Fprintf(w, "  %s: %s\n", p.Object, p.Says)
			}
			if f.Fenced != "" {
				fmt.Fprintf(w, "  fenced:   %s\n", f.Fenced)
			}
			if f.Fix.Command != "" {
				fmt.Fprintf(w, "  fix:      %s\n", f.Fix.Command)
			}
			switch {
			case f.Fix.Automatic && len(f.Fix.Refusals) > 0:
				for _, rf := range f.Fix.Refusals {
					fmt.Fprintf(w, "  %s  %s\n", paint(color, colorYellow, "not safe:"), rf.Detail)
				}
			case f.Fix.Automatic:
				fmt.Fprintf(w, "  fenced diagnose --fix does this (it checks again right before).\n")
			case f.Fix.Action == diagnose.FixPatchWorkload:
				fmt.Fprintf(w, "  fenced never changes a workload: apply the patch yourself.\n")
			}
		}
	}
	if len(r.Risks) > 0 {
		fmt.Fprintln(w, "\nRISKS")
		tw := o.Table(w, "KIND", "OBJECT", "WHY")
		for _, rk := range r.Risks {
			fmt.Fprintf(tw, "%s\t%s\t%s\n", paint(color, colorYellow, string(rk.Kind)), rk.Object, rk.Says)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		for _, rk := range r.Risks {
			fmt.Fprintf(w, "  %s: %s\n", rk.Object, rk.Fix.Command)
		}
	}
	return nil
}

// fixCell names the fix in the table: its action, and "auto" when --fix
// may apply it now.
func fixCell(f diagnose.Fix) string {
	switch {
	case f.Automatic && len(f.Refusals) == 0:
		return string(f.Action) + " (--fix)"
	case f.Automatic:
		return string(f.Action) + " (not safe now)"
	}
	return string(f.Action)
}
