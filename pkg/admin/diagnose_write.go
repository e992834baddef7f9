package admin

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"fenced.io/fenced/pkg/diagnose"
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

// WriteDiagnosis prints r as text (a kubectl-like table, then each
// finding's proof and fix; color only for a terminal), JSON or YAML (the
// diagnose.Report as it is). now is the reference for ages.
func WriteDiagnosis(w io.Writer, r diagnose.Report, format string, color bool, now time.Time) error {
	switch format {
	case "json":
		if r.Findings == nil {
			r.Findings = []diagnose.Finding{}
		}
		return writeJSON(w, r)
	case "yaml":
		if r.Findings == nil {
			r.Findings = []diagnose.Finding{}
		}
		return writeYAML(w, r)
	}
	if err := CheckDiagnoseFormat(format); err != nil {
		return err
	}
	if !r.Stuck() {
		fmt.Fprintln(w, "No pod is stuck on a Multi-Attach error.")
	} else {
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "POD\tNODE\tVOLUME\tHELD-BY\tCAUSE\tFIX\tSINCE")
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
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "KIND\tOBJECT\tWHY")
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
