package vocab

// Mode says whether fenced may switch nodes off (the configuration's
// policy.mode).
type Mode string

// Modes.
const (
	// ModeConfirmOnly taints only nodes whose power device already reads
	// off.
	ModeConfirmOnly Mode = "confirm-only"
	// ModePowerOff also switches off nodes that are unresponsive on both
	// channels for FenceAfter, under quorum, storm budget and a Lease.
	ModePowerOff Mode = "power-off"
)

// Valid reports whether m is one of the modes.
func (m Mode) Valid() bool { return m == ModeConfirmOnly || m == ModePowerOff }
