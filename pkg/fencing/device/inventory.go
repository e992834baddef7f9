package device

import (
	"fmt"
	"log/slog"
	"net"
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
	// levels gives a node's levels from the configuration; nil: its BMC.
	levels func(node string) []config.Level
}

// NewInventory builds one driver per configured node. Drivers do not
// contact their BMC until used. Insecure settings are logged once here.
func NewInventory(cfg *config.Config, log *slog.Logger) (*Inventory, error) {
	inv := &Inventory{bmcs: make(map[string]BMC, len(cfg.BMCs)), endpoints: make(map[string]string, len(cfg.BMCs))}
	for _, r := range cfg.BMCs {
		b, err := NewDriver(r, log)
		if err != nil {
			return nil, fmt.Errorf("bmc of node %s: %w", r.Node, err)
		}
		inv.bmcs[r.Node] = b
		inv.endpoints[r.Node] = Endpoint(r)
	}
	agents, err := newFenceDevices(cfg.Devices, log)
	if err != nil {
		return nil, err
	}
	inv.agents, inv.levels = agents, cfg.Levels
	return inv, nil
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
