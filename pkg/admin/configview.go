package admin

import (
	"cmp"
	"maps"
	"slices"
	"strconv"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"fenced.io/fenced/pkg/config"
	"fenced.io/fenced/pkg/fencing"
	"fenced.io/fenced/pkg/fencing/device"
	"fenced.io/fenced/pkg/stale"
	"fenced.io/fenced/pkg/vocab"
)

// EffectiveConfiguration is cfg in the file's own format with every
// setting the file leaves out at the default that applies to it, the
// defaults of the packages that own them included (config leaves those
// unset). It holds no secret: passwords are refused inline, and password
// files and environment variables are named, never read. Parsed again it
// is the same configuration.
func EffectiveConfiguration(cfg *config.Config) config.Configuration {
	p := cfg.Policy
	afterFence := vocab.PowerOff
	if p.PowerOnAfterFence {
		afterFence = vocab.PowerOn
	}
	monitor := fencing.DefaultMonitorInterval
	if cfg.Fencer.MonitorInterval != nil {
		monitor = *cfg.Fencer.MonitorInterval
	}
	out := config.Configuration{
		APIVersion:  config.APIVersion,
		Kind:        config.Kind,
		ClusterName: cfg.ClusterName,
		Gossip: config.GossipSpec{
			Port: cfg.Gossip.Port, KeyFile: cfg.Gossip.KeyFile, KeyDir: cfg.Gossip.KeyDir, Profile: cfg.Gossip.Profile,
			ProbeInterval:  dur(cfg.Gossip.ProbeInterval),
			ProbeTimeout:   dur(cfg.Gossip.ProbeTimeout),
			SuspicionMult:  cfg.Gossip.SuspicionMult,
			GossipInterval: dur(cfg.Gossip.GossipInterval),
			BeatInterval:   dur(cfg.Gossip.BeatInterval),
		},
		Policy: config.PolicySpec{
			Mode:                         p.Mode,
			FenceAfter:                   dur(p.FenceAfter),
			MaxUnhealthy:                 strconv.FormatFloat(p.MaxUnhealthy*100, 'f', -1, 64) + "%",
			MaxConcurrentPowerActions:    p.MaxConcurrentPowerActions,
			FenceDelay:                   dur(p.FenceDelay),
			AfterFence:                   afterFence,
			ForceDeletePods:              new(p.ForceDeletePods),
			ShutdownWait:                 dur(p.ShutdownWait),
			RestartWait:                  dur(p.RestartWait),
			DryRun:                       new(p.DryRun),
			StaleAttachmentGrace:         dur(cmp.Or(p.StaleAttachmentGrace, stale.DefaultGrace)),
			DeleteStaleVolumeAttachments: new(p.DeleteStaleVolumeAttachments || stale.DefaultDelete),
		},
		Fencer: config.FencerSpec{
			LeaseNamespace:          cfg.Fencer.LeaseNamespace,
			LeaseDuration:           dur(cmp.Or(cfg.Fencer.LeaseDuration, fencing.DefaultLeaseDuration)),
			PowerTimeout:            dur(cmp.Or(cfg.Fencer.PowerTimeout, device.DefaultPowerTimeout)),
			MonitorInterval:         dur(monitor),
			MaxConcurrentPowerReads: cmp.Or(cfg.Fencer.MaxConcurrentPowerReads, fencing.DefaultMaxConcurrentPowerReads),
		},
		Shutdown: config.ShutdownSpec{Announce: new(cfg.Shutdown.Announce)},
	}
	for _, b := range cfg.BMCs {
		out.BMC.Nodes = append(out.BMC.Nodes, effectiveBMC(b))
	}
	for _, name := range slices.Sorted(maps.Keys(cfg.Devices)) {
		out.FenceDevices = append(out.FenceDevices, effectiveDevice(cfg.Devices[name]))
	}
	out.Topology.Defaults = levelSpecs(cfg.Topology.Defaults)
	for _, node := range slices.Sorted(maps.Keys(cfg.Topology.Nodes)) {
		out.Topology.Nodes = append(out.Topology.Nodes, config.NodeTopology{Name: node, Levels: levelSpecs(cfg.Topology.Nodes[node])})
	}
	return out
}

func effectiveBMC(r config.ResolvedBMC) config.NodeBMC {
	r = device.WithDefaults(r)
	s := config.BMCSpec{
		Protocol: r.Protocol, Address: r.Address, Port: r.Port, Username: r.Username,
		PasswordFile: r.Password.File, PasswordEnv: r.Password.Env,
		Timeout: dur(r.Timeout), Retries: r.Retries,
	}
	switch r.Protocol {
	case config.ProtocolIPMI:
		s.IPMI = &config.IPMISpec{CipherSuite: new(r.IPMICipherSuite), PrivilegeLevel: r.IPMIPrivilegeLevel}
	case config.ProtocolRedfish:
		s.Redfish = &config.RedfishSpec{Scheme: r.RedfishScheme, SystemPath: r.RedfishSystemPath, Auth: r.RedfishAuth,
			CAFile: r.RedfishCAFile, InsecureSkipVerify: new(r.RedfishInsecureSkipVerify)}
	}
	return config.NodeBMC{Name: r.Node, BMCSpec: s}
}

// effectiveDevice names the files of a device's secret options; their
// contents are never read here.
func effectiveDevice(d config.FenceDevice) config.FenceDeviceSpec {
	spec := config.FenceDeviceSpec{Name: d.Name, Agent: d.Agent, Options: d.Options, Plugs: d.Plugs,
		SharedPlugs: d.SharedPlugs, Timeout: dur(cmp.Or(d.Timeout, device.DefaultFenceAgentTimeout))}
	for opt, src := range d.SecretOptions {
		if spec.SecretOptions == nil {
			spec.SecretOptions = map[string]string{}
		}
		spec.SecretOptions[opt] = src.File
	}
	return spec
}

func levelSpecs(levels []config.Level) []config.LevelSpec {
	var out []config.LevelSpec
	for _, l := range levels {
		var ls config.LevelSpec
		for _, p := range l {
			ls = append(ls, config.PlugSpec(p))
		}
		out = append(out, ls)
	}
	return out
}

func dur(d time.Duration) *metav1.Duration { return &metav1.Duration{Duration: d} }
