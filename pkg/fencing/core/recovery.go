package core

import (
	"fmt"
	"strings"
)

// RecoveryCheck is one condition of the rule for removing fenced's taint.
type RecoveryCheck struct {
	Name   string
	OK     bool
	Detail string
}

// Recovery is the rule for removing fenced's taint from a node (docs/design.md
// §2), in the one place both the fencer (decide.go) and `fenced unfence`
// apply it: the node is Ready, with a boot ID other than the one it had
// when fenced (the same one means it was never off: the safety alarm),
// and no VolumeAttachment of it is left (the attach/detach controller is
// done with the fence). How the taint then comes off, so that no
// controller acts on it from a lagging cache, is returning.go's. It
// returns the conditions in the order a person reads them; names are the
// attachments left, when known, for the detail.
func Recovery(ready bool, bootNow, bootFenced string, attachmentsLeft int, names ...string) []RecoveryCheck {
	r := RecoveryCheck{Name: "ready", OK: ready, Detail: "Ready"}
	if !ready {
		r.Detail = "not Ready"
	}
	b := RecoveryCheck{Name: "new boot ID"}
	switch {
	case bootFenced == "":
		b.Detail = "the evidence records no boot ID, so a reboot cannot be verified"
	case bootNow == "":
		b.Detail = "the node reports no boot ID"
	case bootNow == bootFenced:
		b.Detail = fmt.Sprintf("same boot ID %s as when fenced: the node has not rebooted, so it may never have been off", bootNow)
	default:
		b.OK, b.Detail = true, fmt.Sprintf("%s (fenced at boot %s)", bootNow, bootFenced)
	}
	v := RecoveryCheck{Name: "volume attachments", OK: attachmentsLeft == 0, Detail: "none of the node left"}
	if attachmentsLeft > 0 {
		v.Detail = fmt.Sprintf("%d left", attachmentsLeft)
		if len(names) > 0 {
			v.Detail += ": " + strings.Join(names, ", ")
		}
	}
	return []RecoveryCheck{r, b, v}
}

// Recovered reports whether every check holds.
func Recovered(checks []RecoveryCheck) bool {
	for _, c := range checks {
		if !c.OK {
			return false
		}
	}
	return len(checks) > 0
}
