package config

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"fenced.io/fenced/pkg/vocab"
)

// DeviceBMC is the reserved device name of a level entry that means "this
// node's BMC from the bmc inventory".
const DeviceBMC = vocab.DeviceBMC

// DeviceWatchdog is the reserved device name of the level that means "this
// node's own watchdog" (the watchdog section): a level of its own, and the
// last.
const DeviceWatchdog = vocab.DeviceWatchdog

// FenceDeviceSpec declares one power device — a switched PDU, a
// hypervisor, any device a ClusterLabs fence agent drives — once, with its
// credentials; levels refer to it by name, so one PDU serves many nodes.
type FenceDeviceSpec struct {
	// Name is how levels refer to the device ("bmc" is reserved).
	Name string `json:"name"`
	// Agent is the ClusterLabs fence agent that drives it, e.g.
	// fence_apc_snmp: a name looked up in DefaultFenceAgentDirs, or an
	// absolute path.
	Agent string `json:"agent"`
	// Options are the agent's options (ip, ipport, snmp_version, ...),
	// passed as key=value lines on its standard input, never in argv.
	// Secrets are not accepted here: use SecretOptions.
	Options map[string]string `json:"options,omitempty"`
	// SecretOptions maps an agent option that holds a secret (password,
	// community, snmp_priv_passwd) to a file holding its value, e.g. a
	// mounted Secret; read for every call, so rotation needs no restart.
	SecretOptions map[string]string `json:"secretOptions,omitempty"`
	// Plugs maps node names to the plug that feeds them (an outlet
	// number or name, a VM name), Pacemaker's pcmk_host_map. A node that
	// is not listed uses its own node name as the plug (right for
	// hypervisors whose VMs are named after their nodes).
	Plugs map[string]string `json:"plugs,omitempty"`
	// SharedPlugs allows one plug to feed several nodes (a blade chassis'
	// feed). Without it a plug mapped to two nodes is an error: switching
	// it off for one would take the other down unannounced, and reading it
	// off would be evidence about both.
	SharedPlugs bool `json:"sharedPlugs,omitempty"`
	// Timeout bounds one call of the agent.
	Timeout *metav1.Duration `json:"timeout,omitempty"`
}

// TopologySpec lists, per node, the ordered levels of power devices that
// can give evidence (Pacemaker's fencing topology). Levels are tried in
// order; a level gives evidence only when every plug in it reads off; a
// level that cannot be read is skipped, never taken as off.
type TopologySpec struct {
	// Defaults are the levels of every node without its own entry, e.g.
	// [[bmc], [pdu-a, pdu-b]]: the BMC first, then both PDU feeds.
	Defaults []LevelSpec `json:"defaults,omitempty"`
	// Nodes are per-node levels; they replace the defaults for that node.
	Nodes []NodeTopology `json:"nodes,omitempty"`
}

// NodeTopology is the levels of one node.
type NodeTopology struct {
	// Name is the Kubernetes node name.
	Name string `json:"name"`
	// Levels in order.
	Levels []LevelSpec `json:"levels"`
}

// LevelSpec is one level: every plug in it must read off for evidence.
type LevelSpec []PlugSpec

// PlugSpec is one device and plug of a level. In YAML it is either the
// device name alone ("pdu-a": the plug comes from the device's plugs map)
// or {device: pdu-a, plug: "7"}.
type PlugSpec struct {
	Device string `json:"device"`
	Plug   string `json:"plug,omitempty"`
}

// UnmarshalJSON accepts a device name or a {device, plug} object, the
// object strictly (an unknown field is an error, as everywhere else).
func (p *PlugSpec) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '"' {
		p.Plug = ""
		return json.Unmarshal(b, &p.Device)
	}
	type plain PlugSpec
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var v plain
	if err := dec.Decode(&v); err != nil {
		return fmt.Errorf("a level entry is a device name or {device, plug}: %w", err)
	}
	*p = PlugSpec(v)
	return nil
}

// FenceDevice is a resolved device declaration.
type FenceDevice struct {
	Name string
	// Agent is the absolute path of the fence agent.
	Agent         string
	Options       map[string]string
	SecretOptions map[string]PasswordSource
	Plugs         map[string]string
	SharedPlugs   bool
	// Timeout is 0 when unset: the device package's default
	// (device.DefaultFenceAgentTimeout).
	Timeout time.Duration
}

// PlugRef is one device and plug of a resolved level. Device is
// DeviceBMC for the node's BMC (Plug is empty then).
type PlugRef struct {
	Device string
	Plug   string
}

func (r PlugRef) String() string {
	if r.Plug == "" {
		return r.Device
	}
	return r.Device + ":" + r.Plug
}

// Level is a resolved level.
type Level []PlugRef

// Topology is the resolved topology section.
type Topology struct {
	// Defaults are the levels of nodes without their own entry, with
	// plugs still to be filled in per node (Levels does it).
	Defaults []Level
	// Nodes are the levels of nodes with their own entry, plugs filled in.
	Nodes map[string][]Level
}

// Levels returns the levels of node: its own entry, else the defaults
// with each device's plug for it, else its BMC when the bmc inventory has
// one (the configuration of a cluster without a topology section). A node
// with none of these has no levels: it cannot be fenced automatically.
func (c *Config) Levels(node string) []Level {
	if ls, ok := c.Topology.Nodes[node]; ok {
		return ls
	}
	if len(c.Topology.Defaults) > 0 {
		out := make([]Level, 0, len(c.Topology.Defaults))
		for _, l := range c.Topology.Defaults {
			out = append(out, c.plugsFor(node, l))
		}
		return out
	}
	if _, ok := c.BMC(node); ok {
		return []Level{{{Device: DeviceBMC}}}
	}
	return nil
}

// plugsFor fills in the plug of every entry of l that names none.
func (c *Config) plugsFor(node string, l Level) Level {
	out := make(Level, len(l))
	for i, r := range l {
		if r.Device != DeviceBMC && r.Device != DeviceWatchdog && r.Plug == "" {
			r.Plug = node
			if p, ok := c.Devices[r.Device].Plugs[node]; ok {
				r.Plug = p
			}
		}
		out[i] = r
	}
	return out
}

// resolveDevices validates the device declarations.
func resolveDevices(fe *fieldErrors, specs []FenceDeviceSpec) map[string]FenceDevice {
	out := make(map[string]FenceDevice, len(specs))
	for i, s := range specs {
		where := fmt.Sprintf("fenceDevices[%d]", i)
		if s.Name != "" {
			where = fmt.Sprintf("fenceDevices[%d] (%s)", i, s.Name)
		}
		switch {
		case s.Name == "":
			fe.add(where, "name", "required")
		case s.Name == DeviceBMC:
			fe.add(where, "name", "%q is reserved for the node's BMC from the bmc section", DeviceBMC)
		case s.Name == DeviceWatchdog:
			fe.add(where, "name", "%q is reserved for the node's own watchdog (the watchdog section)", DeviceWatchdog)
		case len(validation.IsDNS1123Label(s.Name)) > 0:
			fe.add(where, "name", "%q: use lower-case letters, digits and '-'", s.Name)
		}
		if _, dup := out[s.Name]; dup && s.Name != "" {
			fe.add(where, "name", "duplicate device %q", s.Name)
		}
		d := FenceDevice{
			Name: s.Name, Options: s.Options, Plugs: s.Plugs, SharedPlugs: s.SharedPlugs,
			Timeout: duration(s.Timeout, 0), SecretOptions: map[string]PasswordSource{},
		}
		agent, err := FindFenceAgent(s.Agent)
		if err != nil {
			fe.add(where, "agent", "%v", err)
		}
		d.Agent = agent
		// The option names and values are checked against the agent's
		// own metadata when the device is built (pkg/fencing/device), which knows
		// them better than any list here.
		for _, k := range slices.Sorted(maps.Keys(s.SecretOptions)) {
			src := PasswordSource{File: s.SecretOptions[k]}
			if _, err := src.Read(); err != nil {
				fe.add(where, "secretOptions."+k, "%v", err)
			}
			d.SecretOptions[k] = src
		}
		if s.Timeout != nil && (d.Timeout <= 0 || d.Timeout > maxFenceAgentTimeout) {
			fe.add(where, "timeout", "%s is out of range (more than 0, at most %s)", d.Timeout, maxFenceAgentTimeout)
		}
		if !s.SharedPlugs {
			byPlug := map[string]string{}
			for _, node := range slices.Sorted(maps.Keys(s.Plugs)) {
				plug := s.Plugs[node]
				if other, dup := byPlug[plug]; dup {
					fe.add(where, "plugs", "plug %q feeds both %s and %s; a plug that feeds several nodes must be declared with sharedPlugs: true", plug, other, node)
				}
				byPlug[plug] = node
			}
		}
		for _, node := range slices.Sorted(maps.Keys(s.Plugs)) {
			if s.Plugs[node] == "" {
				fe.add(where, "plugs."+node, "empty plug")
			}
		}
		out[s.Name] = d
	}
	return out
}

// resolveTopology validates the levels against the devices and the bmc
// inventory.
func resolveTopology(fe *fieldErrors, t TopologySpec, devices map[string]FenceDevice, bmcs []ResolvedBMC) Topology {
	hasBMC := func(node string) bool {
		return slices.ContainsFunc(bmcs, func(b ResolvedBMC) bool { return b.Node == node })
	}
	levels := func(where, node string, specs []LevelSpec) []Level {
		out := make([]Level, 0, len(specs))
		for li, ls := range specs {
			lw := fmt.Sprintf("%s.levels[%d]", where, li)
			if node == "" {
				lw = fmt.Sprintf("%s[%d]", where, li)
			}
			if len(ls) == 0 {
				fe.add(lw, "", "empty level: a level needs at least one device")
			}
			l := make(Level, 0, len(ls))
			for pi, p := range ls {
				pw := fmt.Sprintf("%s[%d]", lw, pi)
				switch d, ok := devices[p.Device]; {
				case p.Device == "":
					fe.add(pw, "device", "required")
				case p.Device == DeviceWatchdog:
					if p.Plug != "" {
						fe.add(pw, "plug", "the watchdog has no plugs")
					}
					if len(ls) > 1 {
						fe.add(pw, "device", "the watchdog is a level of its own: no power device beside it")
					}
					if li != len(specs)-1 {
						fe.add(pw, "device", "the watchdog level must be the last: it ends in an order to reset, and no level after it would be read")
					}
				case p.Device == DeviceBMC:
					if p.Plug != "" {
						fe.add(pw, "plug", "the bmc has no plugs")
					}
					if node != "" && !hasBMC(node) {
						fe.add(pw, "device", "node %s has no entry in the bmc section", node)
					}
				case !ok:
					fe.add(pw, "device", "unknown device %q (declare it under fenceDevices)", p.Device)
				case node != "" && p.Plug == "" && len(d.Plugs) > 0:
					if _, mapped := d.Plugs[node]; !mapped {
						fe.add(pw, "plug", "device %s has a plugs map without node %s: add it there or set plug here", p.Device, node)
					}
				}
				l = append(l, PlugRef(p))
			}
			out = append(out, l)
		}
		return out
	}
	r := Topology{Nodes: map[string][]Level{}}
	r.Defaults = levels("topology.defaults", "", t.Defaults)
	tmp := &Config{Devices: devices}
	for i, n := range t.Nodes {
		where := fmt.Sprintf("topology.nodes[%d] (%s)", i, n.Name)
		if n.Name == "" {
			fe.add(fmt.Sprintf("topology.nodes[%d]", i), "name", "required")
			continue
		}
		if _, dup := r.Nodes[n.Name]; dup {
			fe.add(where, "name", "duplicate node")
		}
		if len(n.Levels) == 0 {
			fe.add(where, "levels", "required: at least one level")
		}
		ls := levels(where, n.Name, n.Levels)
		for li := range ls {
			ls[li] = tmp.plugsFor(n.Name, ls[li])
		}
		r.Nodes[n.Name] = ls
	}
	checkPlugOwners(fe, r, devices, func(node string) int {
		return slices.IndexFunc(t.Nodes, func(n NodeTopology) bool { return n.Name == node })
	})
	return r
}

// checkPlugOwners refuses a plug that feeds two nodes through explicit
// per-node levels (the plugs maps are checked with their device), unless
// its device declares shared plugs.
// index is where a node's levels are in topology.nodes.
func checkPlugOwners(fe *fieldErrors, t Topology, devices map[string]FenceDevice, index func(node string) int) {
	owner := map[PlugRef]string{}
	for dev, d := range devices {
		for node, plug := range d.Plugs {
			owner[PlugRef{Device: dev, Plug: plug}] = node
		}
	}
	for _, node := range slices.Sorted(maps.Keys(t.Nodes)) {
		for li, l := range t.Nodes[node] {
			for _, r := range l {
				if r.Device == DeviceBMC || r.Device == DeviceWatchdog || devices[r.Device].SharedPlugs {
					continue
				}
				if other, ok := owner[r]; ok && other != node {
					fe.add(fmt.Sprintf("topology.nodes[%d] (%s).levels[%d]", index(node), node, li), "plug",
						"%s also feeds %s; a plug that feeds several nodes must be declared with sharedPlugs: true on its device", r, other)
					continue
				}
				owner[r] = node
			}
		}
	}
}

// FindFenceAgent resolves a fence agent's name (looked up in
// DefaultFenceAgentDirs) or absolute path to an executable file.
func FindFenceAgent(agent string) (string, error) {
	if agent == "" {
		return "", fmt.Errorf("required: a ClusterLabs fence agent such as fence_apc_snmp (Debian: apt install fence-agents)")
	}
	candidates := []string{agent}
	if !strings.Contains(agent, "/") {
		candidates = candidates[:0]
		for _, dir := range DefaultFenceAgentDirs {
			candidates = append(candidates, filepath.Join(dir, agent))
		}
	} else if !filepath.IsAbs(agent) {
		return "", fmt.Errorf("%q: give a name (looked up in %s) or an absolute path", agent, strings.Join(DefaultFenceAgentDirs, ", "))
	}
	for _, p := range candidates {
		st, err := os.Stat(p)
		if err != nil {
			continue
		}
		if !st.Mode().IsRegular() || st.Mode().Perm()&0o111 == 0 {
			return "", fmt.Errorf("%s is not an executable file", p)
		}
		return p, nil
	}
	return "", fmt.Errorf("fence agent %q not found (looked at %s; Debian: apt install fence-agents)", agent, strings.Join(candidates, ", "))
}
