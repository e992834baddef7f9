package main

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"fenced.io/fenced/pkg/config"
	"fenced.io/fenced/pkg/fencing/device"
	"fenced.io/fenced/pkg/vocab"
)

// bmcFlags are shared by the bmc subcommands.
type bmcFlags struct {
	output       string
	powerTimeout time.Duration
	powerWait    time.Duration
}

func newBMCCommand(g *globals) *cobra.Command {
	f := &bmcFlags{}
	cmd := &cobra.Command{
		Use:   "bmc",
		Short: "Read or switch a node's power directly through its BMC",
		Long: `Talk to a node's BMC through the inventory in the configuration file, with the
same drivers, credentials and timeouts the fencer uses. Use it to check
credentials after adding a node, or to switch a node by hand.

Exit codes: 0 done (state read, or action confirmed by reading the new state),
1 failed (BMC unreachable, timed out, refused the credentials, or did not reach
the state in time), 2 usage error (wrong flags, unknown node).`,
		Example: `  fenced bmc status worker-3
  fenced bmc status worker-3 -o json
  fenced bmc off worker-3 --power-timeout 60s`,
	}
	pf := cmd.PersistentFlags()
	pf.StringVarP(&f.output, "output", "o", "text", "output format: text or json")
	pf.DurationVar(&f.powerTimeout, "power-timeout", config.DefaultPowerTimeout,
		"off/on/cycle: how long to wait for the BMC to report the new state")
	pf.DurationVar(&f.powerWait, "power-wait", device.DefaultPowerWait,
		"off/on/cycle: pause after sending the request before the first status read")

	actions := []struct {
		use, short, long string
		do               func(context.Context, device.BMC, device.VerifyOptions) (device.ActionResult, error)
	}{
		{"off", "Switch a node off (hard) and confirm it reads off",
			"Switch the chassis off without a graceful shutdown, then read the power state\nevery second until it is off (or --power-timeout passes). Already off: nothing is sent.",
			device.PowerOffVerified},
		{"on", "Switch a node on and confirm it reads on",
			"Switch the chassis on, then read the power state every second until it is on.",
			device.PowerOnVerified},
		{"cycle", "Switch a node off and on again, confirming each step",
			"Switch the chassis off, confirm it reads off, switch it on, confirm it reads on.",
			device.PowerCycleVerified},
	}
	cmd.AddCommand(&cobra.Command{
		Use:     "status NODE",
		Short:   "Read a node's power state and system GUID",
		Long:    "Open an authenticated session to the node's BMC and read the chassis power state\nand the system GUID (compared with the Node's systemUUID when fencing).",
		Example: "  fenced bmc status worker-3\n  fenced bmc status worker-3 -o json | jq -r .power",
		Args:    exactlyOneNode,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runBMC(cmd, g, f, args[0], "status", nil)
		},
	})
	for _, a := range actions {
		do := a.do
		name := a.use
		cmd.AddCommand(&cobra.Command{
			Use:     a.use + " NODE",
			Short:   a.short,
			Long:    a.long + "\n\nThis bypasses every safety check of the fencer: it does what you ask.",
			Example: fmt.Sprintf("  fenced bmc %s worker-3", a.use),
			Args:    exactlyOneNode,
			RunE: func(cmd *cobra.Command, args []string) error {
				return runBMC(cmd, g, f, args[0], name, do)
			},
		})
	}
	return cmd
}

// bmcResult is the -o json output of the bmc subcommands.
type bmcResult struct {
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
}

func runBMC(cmd *cobra.Command, g *globals, f *bmcFlags, node, action string,
	do func(context.Context, device.BMC, device.VerifyOptions) (device.ActionResult, error)) error {
	if f.output != "text" && f.output != "json" {
		return &usageError{command: cmd.CommandPath(), err: fmt.Errorf("--output %q: want text or json", f.output)}
	}
	cfg, err := g.loadConfig(true)
	if err != nil {
		return err
	}
	entry, ok := cfg.BMC(node)
	if !ok {
		return &usageError{command: cmd.CommandPath(),
			err: fmt.Errorf("node %q is not in the BMC inventory of %s", node, cfg.Source)}
	}
	b, err := device.NewDriver(entry, g.log)
	if err != nil {
		return err
	}
	defer b.Close()

	ctx := cmd.Context()
	start := time.Now()
	res := bmcResult{Node: node, Endpoint: entry.Endpoint(), Action: action, Power: string(vocab.PowerUnknown)}
	if do == nil {
		var state vocab.PowerState
		state, err = b.PowerState(ctx)
		res.Power = string(state)
		if err == nil {
			// The GUID is informational here; a BMC without one is common.
			if guid, gerr := b.SystemGUID(ctx); gerr == nil {
				res.SystemGUID = guid
			} else {
				g.log.Debug("system GUID not available", "node", node, "err", gerr)
			}
		}
	} else {
		var ar device.ActionResult
		ar, err = do(ctx, b, device.VerifyOptions{PowerWait: f.powerWait, Timeout: f.powerTimeout,
			Progress: device.ProgressPrinter(g.stderr, node+": BMC", 0)})
		res.Power, res.Already = string(ar.State), ar.AlreadyInState
	}
	res.ElapsedMS = time.Since(start).Milliseconds()
	res.OK = err == nil
	if err != nil {
		res.Error, res.ErrorKind, res.Hint = err.Error(), string(device.KindOf(err)), hintFor(err, entry)
	}
	g.log.Debug("bmc request done", "node", node, "action", action, "power", res.Power,
		"elapsed", time.Duration(res.ElapsedMS)*time.Millisecond, "err", err)

	if f.output == "json" {
		enc := json.NewEncoder(g.stdout)
		enc.SetIndent("", "  ")
		if encErr := enc.Encode(res); encErr != nil {
			return encErr
		}
		if err != nil {
			return &silentError{err: err}
		}
		return nil
	}
	if err != nil {
		if res.Hint != "" {
			return fmt.Errorf("%w\nhint: %s", err, res.Hint)
		}
		return err
	}
	printBMCText(g, res)
	return nil
}

func printBMCText(g *globals, res bmcResult) {
	if res.Action == "status" {
		guid := res.SystemGUID
		if guid == "" {
			guid = "(not reported)"
		}
		fmt.Fprintf(g.stdout, "node:        %s\nbmc:         %s\npower:       %s\nsystem GUID: %s\n",
			res.Node, res.Endpoint, res.Power, guid)
		return
	}
	if res.Already {
		fmt.Fprintf(g.stdout, "%s: power already %s, nothing sent (%s)\n", res.Node, res.Power, res.Endpoint)
		return
	}
	fmt.Fprintf(g.stdout, "%s: power %s done, BMC reads %s after %s (%s)\n", res.Node, res.Action, res.Power,
		(time.Duration(res.ElapsedMS) * time.Millisecond).Round(10*time.Millisecond), res.Endpoint)
}

// hintFor tells an operator what to check for each kind of failure.
func hintFor(err error, e config.ResolvedBMC) string {
	switch device.KindOf(err) {
	case vocab.KindAuth:
		return fmt.Sprintf("the BMC refused user %q: check the password (%s) and that the user may open %s sessions",
			e.Username, e.Password, privilegeFor(e))
	case vocab.KindUnreachable:
		return "nothing answers at " + e.Endpoint() + ": check the address and port and that this host can reach the management network"
	case vocab.KindTimeout:
		return fmt.Sprintf("no answer from %s within the timeout (%s per attempt, %d retries): check the address, firewalls, and whether the BMC is hung",
			e.Endpoint(), e.Timeout, e.Retries)
	}
	return ""
}

func privilegeFor(e config.ResolvedBMC) string {
	if e.Protocol == config.ProtocolIPMI {
		return e.IPMIPrivilegeLevel
	}
	return "Redfish"
}
