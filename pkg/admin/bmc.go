package admin

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"fenced.io/fenced/pkg/config"
	"fenced.io/fenced/pkg/fencing/device"
	"fenced.io/fenced/pkg/printer"
	"fenced.io/fenced/pkg/vocab"
)

// PowerOp is what `fenced bmc` and `fenced device` do to a node's power:
// read it, or switch it and read it back until it is in the new state.
type PowerOp string

const (
	PowerStatus PowerOp = "status"
	PowerOff    PowerOp = "off"
	PowerOn     PowerOp = "on"
	PowerCycle  PowerOp = "cycle"
)

// DefaultPowerWait is the pause after a switch request before the first
// status read, and DefaultPowerTimeout the wait for the new state, as the
// fencer makes them (the device package's).
const (
	DefaultPowerWait    = device.DefaultPowerWait
	DefaultPowerTimeout = device.DefaultPowerTimeout
)

// verified is the verified switch of op; nil for PowerStatus.
func (op PowerOp) verified() func(context.Context, device.BMC, device.VerifyOptions) (device.ActionResult, error) {
	switch op {
	case PowerOff:
		return device.PowerOffVerified
	case PowerOn:
		return device.PowerOnVerified
	case PowerCycle:
		return device.PowerCycleVerified
	}
	return nil
}

// coreOp is op as the core names it in readings and failures
// ("power-off").
func (op PowerOp) coreOp() string {
	switch op {
	case PowerOff:
		return vocab.OpPowerOff
	case PowerOn:
		return vocab.OpPowerOn
	case PowerCycle:
		return vocab.OpPowerCycle
	}
	return vocab.OpPowerStatus
}

// SwitchOptions bound a verified switch by hand.
type SwitchOptions struct {
	// PowerWait is the pause after sending the request before the first
	// status read; Timeout how long to wait for the new state.
	PowerWait, Timeout time.Duration
	// Progress receives the lines that say what is being waited for (the
	// terminal's stderr): a silent terminal looks hung.
	Progress io.Writer
}

func (o SwitchOptions) verify(label string) device.VerifyOptions {
	return device.VerifyOptions{PowerWait: o.PowerWait, Timeout: o.Timeout,
		Progress: device.ProgressPrinter(o.Progress, label, 0)}
}

// BMCResult is what `fenced bmc` did, and its -o json output.
type BMCResult struct {
	Node       string `json:"node"`
	Endpoint   string `json:"endpoint"`
	Action     string `json:"action"`
	OK         bool   `json:"ok"`
	Power      string `json:"power"`
	SystemGUID string `json:"systemGUID,omitempty"`
	Already    bool   `json:"alreadyInState,omitempty"`
	ElapsedMS  int64  `json:"elapsedMs"`
	Error      string `json:"error,omitempty"`
	ErrorKind  string `json:"errorKind,omitempty"`
	Hint       string `json:"hint,omitempty"`

	// Err is the BMC's failure (nil when OK), for the exit code.
	Err error `json:"-"`
}

// BMCEndpoint is how the commands name entry's BMC ("ipmi://10.0.0.5:623").
func BMCEndpoint(entry config.ResolvedBMC) string { return device.Endpoint(entry) }

// UseBMC opens the BMC of one inventory entry with the fencer's driver and
// does op: a status read (power and, informational, the system GUID) or a
// verified switch. It bypasses every safety check of the fencer. The
// error is the driver's construction only; the BMC's own failure is in
// the result, with a hint for the operator.
func UseBMC(ctx context.Context, entry config.ResolvedBMC, op PowerOp, opts SwitchOptions, log *slog.Logger) (BMCResult, error) {
	b, err := device.NewDriver(entry, log)
	if err != nil {
		return BMCResult{}, err
	}
	defer b.Close()

	start := time.Now()
	res := BMCResult{Node: entry.Node, Endpoint: device.Endpoint(entry), Action: string(op), Power: string(vocab.PowerUnknown)}
	if do := op.verified(); do == nil {
		var state vocab.PowerState
		state, err = b.PowerState(ctx)
		res.Power = string(state)
		if err == nil {
			// The GUID is informational here; a BMC without one is common.
			if guid, gerr := b.SystemGUID(ctx); gerr == nil {
				res.SystemGUID = guid
			} else {
				log.Debug("system GUID not available", "node", entry.Node, "err", gerr)
			}
		}
	} else {
		var ar device.ActionResult
		ar, err = do(ctx, b, opts.verify(entry.Node+": BMC"))
		res.Power, res.Already = string(ar.State), ar.AlreadyInState
	}
	res.ElapsedMS = time.Since(start).Milliseconds()
	res.OK, res.Err = err == nil, err
	if err != nil {
		res.Error, res.ErrorKind, res.Hint = err.Error(), string(device.KindOf(err)), bmcHint(err, entry)
	}
	log.Debug("bmc request done", "node", entry.Node, "action", op, "power", res.Power,
		"elapsed", time.Duration(res.ElapsedMS)*time.Millisecond, "err", err)
	return res, nil
}

// Doc is r as the printers print it (package printer); -o name prints
// node/NAME.
func (r BMCResult) Doc() printer.Doc {
	return printer.Doc{Kind: "BMCResult", Value: r, NameKind: "Node", Names: []string{r.Node},
		Text: func(w io.Writer, _ printer.TextOptions) error { return r.writeText(w) }}
}

// writeText prints the text an operator reads after a success (a
// failure's text is its error and hint).
func (r BMCResult) writeText(w io.Writer) error {
	if r.Action == string(PowerStatus) {
		guid := r.SystemGUID
		if guid == "" {
			guid = "(not reported)"
		}
		_, err := fmt.Fprintf(w, "node:        %s\nbmc:         %s\npower:       %s\nsystem GUID: %s\n",
			r.Node, r.Endpoint, r.Power, guid)
		return err
	}
	if r.Already {
		_, err := fmt.Fprintf(w, "%s: power already %s, nothing sent (%s)\n", r.Node, r.Power, r.Endpoint)
		return err
	}
	_, err := fmt.Fprintf(w, "%s: power %s done, BMC reads %s after %s (%s)\n", r.Node, r.Action, r.Power,
		millis(r.ElapsedMS).Round(10*time.Millisecond), r.Endpoint)
	return err
}

// bmcHint tells an operator what to check for each kind of failure, with
// the settings the driver ran with (the device package's defaults for
// those the configuration leaves unset).
func bmcHint(err error, e config.ResolvedBMC) string {
	e = device.WithDefaults(e)
	switch device.KindOf(err) {
	case vocab.KindAuth:
		return fmt.Sprintf("the BMC refused user %q: check the password (%s) and that the user may open %s sessions",
			e.Username, e.Password, sessionPrivilege(e))
	case vocab.KindUnreachable:
		return "nothing answers at " + device.Endpoint(e) + ": check the address and port and that this host can reach the management network"
	case vocab.KindTimeout:
		return fmt.Sprintf("no answer from %s within the timeout (%s per attempt, %d retries): check the address, firewalls, and whether the BMC is hung",
			device.Endpoint(e), e.Timeout, *e.Retries)
	}
	return ""
}

// sessionPrivilege is the privilege the entry's sessions ask for.
func sessionPrivilege(e config.ResolvedBMC) string {
	if e.Protocol == config.ProtocolIPMI {
		return e.IPMIPrivilegeLevel
	}
	return "Redfish"
}

func millis(ms int64) time.Duration { return time.Duration(ms) * time.Millisecond }
