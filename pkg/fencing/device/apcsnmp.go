package device

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/gosnmp/gosnmp"

	"fenced.io/fenced/pkg/vocab"
)

// Status reads of APC rack PDUs without the agent. fence_apc_snmp reads one
// outlet a run — a Python interpreter and a snmpget or snmpwalk process
// for each of the device's type, the outlet and its state — and its
// list-status prints no states, so a rack that goes dark behind such a PDU
// was forty runs, a few seconds each on a busy two-core fencer
// (make bench-scale). fenced reads the very objects fence_apc_snmp reads
// for an APC rack PDU (sysObjectID .1.3.6.1.4.1.318.1.3.4.5, outlet state
// rPDUOutletStatusOutletState.N) itself: every outlet a batch of reads asks
// (sharedstatus.go) in one SNMP GET, with the device's type in the same
// request. Only where it reads the same thing the agent would:
//
//   - the agent is fence_apc_snmp, addressed by ip (and ipport), SNMP v1 or
//     v2c with a community from a secret file — the version fencing.py
//     picks too (2c when only a community is given); any SNMP v3 option, a
//     community in plain options or another address option leaves every
//     read to the agent;
//   - the plug is an outlet number (a name is resolved by the agent);
//   - the device answers as an APC rack PDU (any other type: the agent,
//     from then on).
//
// It is stricter than the agent where the agent guesses: fence_apc_snmp
// says off for any state but 1, fenced says off only for 2 (1 on, anything
// else an error, no evidence), and an outlet the PDU lacks is no-such-plug,
// not off. Power actions are always the agent's.

// The PowerNet-MIB objects read, as fence_apc_snmp's ApcRPDU has them.
const (
	oidSysObjectID   = ".1.3.6.1.2.1.1.2.0"
	apcRackPDU       = ".1.3.6.1.4.1.318.1.3.4.5"
	oidAPCOutletStat = ".1.3.6.1.4.1.318.1.1.12.3.5.1.1.4" // .N: 1 on, 2 off
	apcOutletOn      = 1
	apcOutletOff     = 2
	// apcOIDsPerGet bounds the objects of one request: a rack's outlets
	// fit in two, and small PDUs answer "tooBig" to large ones.
	apcOIDsPerGet = 24
)

// apcAttemptTimeout and apcRetries are net-snmp's snmpget defaults (-t 1
// -r 5), which the agent's requests have: a PDU that does not answer —
// or a wrong community, which SNMP v1 and v2c do not answer — fails a
// read after 6 s.
const (
	apcAttemptTimeout = time.Second
	apcRetries        = 5
)

// errNotAPCRackPDU: the device answered, but not as an APC rack PDU.
var errNotAPCRackPDU = errors.New("the device's sysObjectID is not an APC rack PDU's")

// errAPCUnread: the PDU answered the request with an error status (SNMP v1
// answers so for an outlet it lacks): the agent reads these plugs.
var errAPCUnread = errors.New("the PDU answered with an error status")

// apcSNMP reads outlet states of one APC rack PDU.
type apcSNMP struct {
	host      string
	port      uint16
	version   gosnmp.SnmpVersion
	community func() (string, error)
}

// apcSNMPIgnored are the options after which fenced leaves every read to
// the agent: SNMP v3, other ways to name the device or the community.
var apcSNMPIgnored = []string{"ipaddr", "community", "username", "password", "password_script", "snmp_sec_level",
	"snmp_auth_prot", "snmp_priv_prot", "snmp_priv_passwd", "snmp_priv_passwd_script", "inet6_only"}

// newAPCSNMP is the native reader for an agent configured as agent, opts
// and secrets, or nil when fenced would not read what the agent reads.
func newAPCSNMP(agent string, opts map[string]string, secrets map[string]func() (string, error)) *apcSNMP {
	if agent != "fence_apc_snmp" || opts["ip"] == "" || secrets["community"] == nil {
		return nil
	}
	for _, k := range apcSNMPIgnored {
		if _, ok := opts[k]; ok {
			return nil
		}
		if _, ok := secrets[k]; ok && k != "community" {
			return nil
		}
	}
	s := &apcSNMP{host: opts["ip"], port: 161, community: secrets["community"]}
	switch opts["snmp_version"] {
	case "", "2c":
		s.version = gosnmp.Version2c
	case "1":
		s.version = gosnmp.Version1
	default:
		return nil
	}
	if p := opts["ipport"]; p != "" {
		n, err := strconv.ParseUint(p, 10, 16)
		if err != nil || n == 0 {
			return nil
		}
		s.port = uint16(n)
	}
	return s
}

// outlet is the outlet number of plug, or 0 when plug is none.
func outlet(plug string) int {
	n, err := strconv.Atoi(plug)
	if err != nil || n < 1 || strconv.Itoa(n) != plug {
		return 0
	}
	return n
}

// read reads the outlets of plugs (outlet numbers) in as few requests as
// fit: states for the plugs read on or off, errs for plugs the PDU
// answered for otherwise. err is for the device as a whole — unreachable,
// silent (a wrong community gets no answer), errNotAPCRackPDU,
// errAPCUnread — and then no plug has a state.
func (s *apcSNMP) read(ctx context.Context, community string, plugs []string) (states map[string]vocab.PowerState, errs map[string]error, err error) {
	c := &gosnmp.GoSNMP{Target: s.host, Port: s.port, Transport: "udp", Community: community, Version: s.version,
		Context: ctx, Timeout: apcAttemptTimeout, Retries: apcRetries, MaxOids: apcOIDsPerGet + 1}
	if err := c.Connect(); err != nil {
		return nil, nil, err
	}
	defer c.Conn.Close()
	states, errs = map[string]vocab.PowerState{}, map[string]error{}
	for start := 0; start < len(plugs); start += apcOIDsPerGet {
		chunk := plugs[start:min(start+apcOIDsPerGet, len(plugs))]
		oids := []string{oidSysObjectID}
		for _, p := range chunk {
			oids = append(oids, oidAPCOutletStat+"."+strconv.Itoa(outlet(p)))
		}
		res, err := c.Get(oids)
		if err != nil {
			return nil, nil, err
		}
		if res.Error != gosnmp.NoError || len(res.Variables) != len(oids) {
			return nil, nil, fmt.Errorf("%w: %s for %d objects", errAPCUnread, res.Error, len(oids))
		}
		if v := res.Variables[0]; v.Type != gosnmp.ObjectIdentifier || v.Value != apcRackPDU {
			return nil, nil, fmt.Errorf("%w: %v", errNotAPCRackPDU, v.Value)
		}
		for i, p := range chunk {
			v := res.Variables[i+1]
			switch {
			case v.Name != oids[i+1]:
				errs[p] = fmt.Errorf("the PDU answered for %s, asked %s", v.Name, oids[i+1])
			case v.Type == gosnmp.NoSuchInstance || v.Type == gosnmp.NoSuchObject:
				errs[p] = fmt.Errorf("%w: the PDU has no outlet %s", errNoSuchOutlet, p)
			case v.Type != gosnmp.Integer:
				errs[p] = fmt.Errorf("outlet %s: state of type %s, not an integer", p, v.Type)
			case gosnmp.ToBigInt(v.Value).Int64() == apcOutletOn:
				states[p] = vocab.PowerOn
			case gosnmp.ToBigInt(v.Value).Int64() == apcOutletOff:
				states[p] = vocab.PowerOff
			default:
				errs[p] = fmt.Errorf("outlet %s: state %v is neither on (1) nor off (2)", p, v.Value)
			}
		}
	}
	return states, errs, nil
}

// errNoSuchOutlet marks a per-plug error of kind no-such-plug.
var errNoSuchOutlet = errors.New("no such outlet")

// nativeStatus reads the outlets of reads without the agent where it can
// (newAPCSNMP, outlet): their states, and their errors as the device's
// errors. handled is false when the agent is to read every one of them:
// no native reader, no outlet number among them, or the device answered
// in a way only the agent reads (another type — the agent from then on —
// or an error status). Plugs that are no outlet number are in neither map.
func (a *FenceAgent) nativeStatus(ctx context.Context, reads []plugRead) (states map[string]vocab.PowerState, errs map[string]error, handled bool) {
	a.mu.Lock()
	s := a.snmp
	a.mu.Unlock()
	var outlets []plugRead
	for _, r := range reads {
		if outlet(r.plug) > 0 {
			outlets = append(outlets, r)
		}
	}
	if s == nil || len(outlets) == 0 {
		return nil, nil, false
	}
	community, err := s.community()
	if err != nil {
		return nil, nil, false // the agent's run says why
	}
	plugs := make([]string, len(outlets))
	for i, r := range outlets {
		plugs[i] = r.plug
	}
	states, perPlug, err := s.read(ctx, community, plugs)
	secrets := []string{community}
	errs = map[string]error{}
	switch {
	case errors.Is(err, errNotAPCRackPDU):
		a.mu.Lock()
		a.snmp = nil
		a.mu.Unlock()
		return nil, nil, false
	case errors.Is(err, errAPCUnread):
		return nil, nil, false
	case err != nil:
		kind, ok := classifyTransport(ctx, err)
		if !ok && errors.Is(err, gosnmp.ErrMaxRetriesExceeded) {
			// No answer: SNMP v1 and v2c do not answer a wrong community.
			kind, ok = vocab.KindTimeout, true
		}
		if !ok {
			kind = vocab.KindBMC
		}
		for _, r := range outlets {
			errs[r.plug] = a.failPlug(r.node, r.plug, vocab.OpPowerStatus, kind,
				fmt.Errorf("SNMP GET of %d outlets: %w", len(plugs), err), secrets)
		}
		return nil, errs, true
	}
	for _, r := range outlets {
		if e := perPlug[r.plug]; e != nil {
			kind := vocab.KindBMC
			if errors.Is(e, errNoSuchOutlet) {
				kind = vocab.KindNoSuchPlug
			}
			errs[r.plug] = a.failPlug(r.node, r.plug, vocab.OpPowerStatus, kind, e, secrets)
		}
	}
	return states, errs, true
}

// statusOne reads one plug: natively where it can (nativeStatus), else
// by a run of the agent.
func (a *FenceAgent) statusOne(ctx context.Context, node, plug string) (vocab.PowerState, error) {
	states, errs, handled := a.nativeStatus(ctx, []plugRead{{node: node, plug: plug}})
	if handled {
		if err := errs[plug]; err != nil {
			return vocab.PowerUnknown, err
		}
		if s, ok := states[plug]; ok {
			return s, nil
		}
	}
	return a.status(ctx, node, plug)
}
