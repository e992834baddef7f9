package device

import (
	"fmt"
	"log/slog"
	"net"
	"reflect"
	"sort"
	"strconv"

	"fenced.io/fenced/pkg/config"
)

// Inventory maps node names to their power devices, built from the
// configuration: each node's BMC, the declared fence devices, and the
// fencing levels that order them (Levels).
type Inventory struct {
	bmcs      map[string]BMC
	endpoints map[string]string
	agents    map[string]*FenceAgent
	// specs and devices are the settings each driver was built from, so
	// that Rebuild keeps the drivers whose settings did not change.
	specs   map[string]config.ResolvedBMC
	devices map[string]config.FenceDevice
	// levels gives a node's levels from the configuration; nil: its BMC.
	levels func(node string) []config.Level
	// watchdogLevel gives the number of a node's watchdog level, 0: none.
	watchdogLevel func(node string) int
}

// NewInventory builds one driver per configured node. Drivers do not
// contact their BMC until used. Insecure settings are logged once here.
func NewInventory(cfg *config.Config, log *slog.Logger) (*Inventory, error) {
	inv, _, err := (&Inventory{}).Rebuild(cfg, log)
	return inv, err
}

// Rebuild is the inventory of cfg, for a configuration reloaded while i is
// in use: a BMC or fence device whose settings are the same in cfg keeps
// i's driver (what it discovered, such as a Redfish system path, and its
// connections), every other one is built anew. i is not changed: what runs
// on its drivers finishes on them. retired are i's drivers that the new
// inventory does not use, for the caller to close once nothing started on
// i runs any more. On an error nothing is retired and i stays as it was.
func (i *Inventory) Rebuild(cfg *config.Config, log *slog.Logger) (next *Inventory, retired []BMC, err error) {
	inv := &Inventory{
		bmcs: make(map[string]BMC, len(cfg.BMCs)), endpoints: make(map[string]string, len(cfg.BMCs)),
		specs: make(map[string]config.ResolvedBMC, len(cfg.BMCs)), devices: cfg.Devices,
	}
	var built []BMC // closed again if the rebuild fails half-way
	defer func() {
		if err != nil {
			for _, b := range built {
				_ = b.Close()
			}
		}
	}()
	for _, r := range cfg.BMCs {
		b, kept := i.bmcs[r.Node]
		if !kept || !reflect.DeepEqual(i.specs[r.Node], r) {
			if b, err = NewDriver(r, log); err != nil {
				return nil, nil, fmt.Errorf("bmc of node %s: %w", r.Node, err)
			}
			built = append(built, b)
		}
		inv.bmcs[r.Node], inv.specs[r.Node], inv.endpoints[r.Node] = b, r, Endpoint(r)
	}
	if inv.agents, err = i.rebuildFenceDevices(cfg.Devices, log); err != nil {
		return nil, nil, err
	}
	inv.levels, inv.watchdogLevel = cfg.Levels, cfg.WatchdogLevel
	for node, b := range i.bmcs {
		if inv.bmcs[node] != b {
			retired = append(retired, b)
		}
	}
	return inv, retired, nil
}

// rebuildFenceDevices is the fence devices of a rebuilt inventory: i's for
// the declarations that did not change, new ones (checked against their
// agent's metadata) for the others.
func (i *Inventory) rebuildFenceDevices(devices map[string]config.FenceDevice, log *slog.Logger) (map[string]*FenceAgent, error) {
	out := make(map[string]*FenceAgent, len(devices))
	changed := map[string]config.FenceDevice{}
	for name, d := range devices {
		if a, ok := i.agents[name]; ok && reflect.DeepEqual(i.devices[name], d) {
			out[name] = a
		} else {
			changed[name] = d
		}
	}
	built, err := newFenceDevices(changed, log)
	if err != nil {
		return nil, err
	}
	for name, a := range built {
		out[name] = a
	}
	return out, nil
}

// NewDriver returns the driver for one resolved inventory entry, each
// setting the entry leaves unset at this package's default (WithDefaults).
func NewDriver(r config.ResolvedBMC, log *slog.Logger) (BMC, error) {
	r = WithDefaults(r)
	common := DriverOptions{Node: r.Node, Timeout: r.Timeout, Retries: *r.Retries}
	warnPasswordFile(r.Password, log)
	creds := Credentials{Username: r.Username, Password: func() (string, error) {
		pw, err := r.Password.Read()
		if err == nil {
			// Read refuses a writable file; a chmod o+r since start-up is
			// warned about here, once.
			warnPasswordFile(r.Password, log)
		}
		return pw, err
	}}
	switch r.Protocol {
	case config.ProtocolIPMI:
		return NewIPMI(IPMIOptions{
			DriverOptions:  common,
			Host:           r.Address,
			Port:           r.Port,
			Credentials:    creds,
			CipherSuite:    r.IPMICipherSuite,
			PrivilegeLevel: r.IPMIPrivilegeLevel,
		})
	case config.ProtocolRedfish:
		if r.RedfishInsecureSkipVerify {
			log.Warn("BMC certificate verification is disabled (redfish.insecureSkipVerify): anyone on the management network can impersonate this BMC",
				"node", r.Node, "address", r.Address)
		}
		if r.RedfishScheme == "http" {
			log.Warn("BMC is reached over plain http: credentials cross the network unencrypted",
				"node", r.Node, "address", r.Address)
		}
		return NewRedfish(RedfishOptions{
			DriverOptions:      common,
			Endpoint:           r.RedfishScheme + "://" + net.JoinHostPort(r.Address, strconv.Itoa(r.Port)),
			Credentials:        creds,
			SystemPath:         r.RedfishSystemPath,
			Auth:               r.RedfishAuth,
			CAFile:             r.RedfishCAFile,
			InsecureSkipVerify: r.RedfishInsecureSkipVerify,
		})
	}
	return nil, fmt.Errorf("unknown protocol %q", r.Protocol)
}

// warnPasswordFile logs, once per process and mode, that a password file
// is readable by every user of the host (config.CheckSecretFile). Errors
// are left to PasswordSource.Read, which refuses the file.
func warnPasswordFile(src config.PasswordSource, log *slog.Logger) {
	if src.File == "" {
		return
	}
	if warning, err := config.CheckSecretFile(src.File); err == nil {
		config.WarnSecretFileOnce(log, src.File, warning)
	}
}

// BMC returns the BMC of node, if the inventory has one.
func (i *Inventory) BMC(node string) (BMC, bool) {
	b, ok := i.bmcs[node]
	return b, ok
}

// Endpoint returns the address of node's BMC, for messages and evidence.
func (i *Inventory) Endpoint(node string) (string, bool) {
	e, ok := i.endpoints[node]
	return e, ok
}

// Nodes returns the node names in the inventory, sorted.
func (i *Inventory) Nodes() []string {
	names := make([]string, 0, len(i.bmcs))
	for n := range i.bmcs {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Close closes every driver.
func (i *Inventory) Close() error {
	for _, b := range i.bmcs {
		_ = b.Close()
	}
	return nil
}
