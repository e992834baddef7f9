package device

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	ipmi "github.com/bougou/go-ipmi/pkg/client"
	"github.com/bougou/go-ipmi/pkg/command/chassis"
	"github.com/bougou/go-ipmi/pkg/types"

	"fenced.io/fenced/pkg/vocab"
)

// IPMIOptions configures an IPMI v2.0 (RMCP+, "lanplus") BMC.
type IPMIOptions struct {
	DriverOptions
	Host        string
	Port        int
	Credentials Credentials
	// CipherSuite is the RMCP+ cipher suite ID (3 or 17 in practice).
	CipherSuite int
	// PrivilegeLevel is "user", "operator" or "administrator".
	PrivilegeLevel string
}

// IPMI is a BMC reached over IPMI v2.0 lanplus. It opens one session per
// operation and closes it afterwards: BMCs allow only a handful of
// concurrent sessions, and a fencer must not hold one per node at idle.
type IPMI struct {
	opts      IPMIOptions
	endpoint  string
	privilege types.PrivilegeLevel
}

var privilegeLevels = map[string]types.PrivilegeLevel{
	"user":          types.PrivilegeLevelUser,
	"operator":      types.PrivilegeLevelOperator,
	"administrator": types.PrivilegeLevelAdministrator,
}

// NewIPMI checks the options and returns a driver. It does not contact the BMC.
func NewIPMI(opts IPMIOptions) (*IPMI, error) {
	priv, ok := privilegeLevels[opts.PrivilegeLevel]
	if !ok {
		return nil, fmt.Errorf("ipmi: unknown privilege level %q", opts.PrivilegeLevel)
	}
	if opts.CipherSuite < 1 || opts.CipherSuite > 17 {
		return nil, fmt.Errorf("ipmi: cipher suite %d not supported", opts.CipherSuite)
	}
	if opts.Host == "" || opts.Port <= 0 {
		return nil, errors.New("ipmi: host and port are required")
	}
	if opts.Credentials.Password == nil {
		return nil, errors.New("ipmi: no password source")
	}
	return &IPMI{
		opts:      opts,
		endpoint:  "ipmi://" + net.JoinHostPort(opts.Host, strconv.Itoa(opts.Port)),
		privilege: priv,
	}, nil
}

// PowerState reads Get Chassis Status.
func (b *IPMI) PowerState(ctx context.Context) (vocab.PowerState, error) {
	state := vocab.PowerUnknown
	err := b.withSession(ctx, vocab.OpPowerStatus, func(c *ipmi.Client) error {
		st, err := c.GetChassisStatus(ctx)
		if err != nil {
			return err
		}
		if st.PowerIsOn {
			state = vocab.PowerOn
		} else {
			state = vocab.PowerOff
		}
		return nil
	})
	if err != nil {
		return vocab.PowerUnknown, err
	}
	return state, nil
}

// PowerOff sends Chassis Control "power down" (hard off, no ACPI request).
func (b *IPMI) PowerOff(ctx context.Context) error {
	return b.chassisControl(ctx, vocab.OpPowerOff, chassis.ChassisControlPowerDown)
}

// PowerOn sends Chassis Control "power up".
func (b *IPMI) PowerOn(ctx context.Context) error {
	return b.chassisControl(ctx, vocab.OpPowerOn, chassis.ChassisControlPowerUp)
}

// PowerCycle sends Chassis Control "power cycle".
func (b *IPMI) PowerCycle(ctx context.Context) error {
	return b.chassisControl(ctx, vocab.OpPowerCycle, chassis.ChassisControlPowerCycle)
}

func (b *IPMI) chassisControl(ctx context.Context, op string, ctl chassis.ChassisControl) error {
	return b.withSession(ctx, op, func(c *ipmi.Client) error {
		_, err := c.ChassisControl(ctx, ctl)
		return err
	})
}

// SystemGUID reads Get System GUID and decodes it the way SMBIOS (and so
// Linux's /sys/class/dmi/id/product_uuid, the kubelet's systemUUID) does.
func (b *IPMI) SystemGUID(ctx context.Context) (string, error) {
	var guid string
	err := b.withSession(ctx, vocab.OpSystemGUID, func(c *ipmi.Client) error {
		res, err := c.GetSystemGUID(ctx)
		if err != nil {
			return err
		}
		if res.GUID == ([16]byte{}) {
			return errNoGUID
		}
		u, err := types.ParseGUID(res.GUID[:], types.GUIDModeSMBIOS)
		if err != nil {
			return err
		}
		guid = u.String()
		return nil
	})
	return guid, err
}

var errNoGUID = errors.New("the BMC reports no system GUID")

// Close is a no-op: sessions live only as long as one operation.
func (b *IPMI) Close() error { return nil }

// withSession opens an authenticated session, runs fn and closes the session.
func (b *IPMI) withSession(ctx context.Context, op string, fn func(*ipmi.Client) error) error {
	if b.opts.Timeout > 0 {
		// One attempt may take Timeout; the whole operation (session setup of
		// four exchanges plus the command, each with retries) is bounded too,
		// so a dead BMC cannot stall a caller that passed no deadline.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, b.opts.Timeout*boundedExchanges*time.Duration(1+max(0, b.opts.Retries)))
		defer cancel()
	}
	password, err := b.opts.Credentials.Password()
	if err != nil {
		return b.fail(op, vocab.KindAuth, fmt.Errorf("reading password: %w", err), "")
	}
	c, err := ipmi.NewClient(b.opts.Host, b.opts.Port, b.opts.Credentials.Username, password)
	if err != nil {
		return b.fail(op, vocab.KindAuth, err, password)
	}
	c = c.WithCipherSuiteID(types.CipherSuiteID(b.opts.CipherSuite)).
		WithMaxPrivilegeLevel(b.privilege).
		WithRetry(b.opts.Retries)
	if b.opts.Timeout > 0 {
		c = c.WithTimeout(b.opts.Timeout)
	}
	if err := c.Connect(ctx); err != nil {
		return b.fail(op, classifyIPMI(ctx, err, true), fmt.Errorf("opening session: %w", err), password)
	}
	// Close with a fresh, short context: the operation's context may be
	// spent, and an unclosed session occupies one of the BMC's few slots
	// until it times out there.
	defer func() {
		closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), b.closeTimeout())
		defer cancel()
		_ = c.Close(closeCtx)
	}()
	if err := fn(c); err != nil {
		if errors.Is(err, errNoGUID) {
			return b.fail(op, vocab.KindNotSupported, err, password)
		}
		return b.fail(op, classifyIPMI(ctx, err, false), err, password)
	}
	return nil
}

// boundedExchanges is how many request/response exchanges one operation
// needs at most: Get Channel Auth Capabilities, Open Session, RAKP 1/3,
// Set Session Privilege, the command itself, and slack for Close.
const boundedExchanges = 7

func (b *IPMI) closeTimeout() time.Duration {
	if b.opts.Timeout > 0 {
		return b.opts.Timeout
	}
	return time.Second
}

// fail builds the driver's *Error. kind must be decided on err before: the
// cause is redacted (redactError) and so may lose its chain. go-ipmi v0.9.1
// never puts the password into its errors (lanplus sends only HMACs of it,
// and its messages name at most the user), but a later version or a BMC
// answer quoted into an error must not be able to leak it either. password
// is empty where none was read yet.
func (b *IPMI) fail(op string, kind vocab.ErrorKind, err error, password string) error {
	return &Error{Node: b.opts.Node, Op: op, Endpoint: b.endpoint, Kind: kind, Err: redactError(err, b.opts.Credentials.Username, password)}
}

// classifyIPMI maps go-ipmi errors onto ErrorKinds. While connecting, a
// completion code means the BMC refused the session (for instance the
// requested privilege level exceeds the user's), which is a credential
// problem for the operator, not a BMC fault.
func classifyIPMI(ctx context.Context, err error, connecting bool) vocab.ErrorKind {
	var status *types.RmcpStatusError
	if errors.Is(err, ipmi.ErrRAKPAuthentication) || errors.As(err, &status) {
		// RAKP failures and RMCP+ status codes (unauthorized name, invalid
		// role, no cipher suite match) all mean the BMC refused us.
		return vocab.KindAuth
	}
	if respErr, ok := types.IsResponseError(err); ok {
		if connecting || respErr.CompletionCode() == types.CodeInsufficientPrivilege {
			return vocab.KindAuth
		}
		return vocab.KindBMC
	}
	if kind, ok := classifyTransport(ctx, err); ok {
		return kind
	}
	// go-ipmi v0.9.1 joins Connect20's per-cipher-suite errors with %v and
	// keeps its "no answer" sentinel unexported, so errors.Is cannot see
	// them. Fall back to its messages; the integration tests pin them.
	return ipmiMessageKinds.of(err.Error())
}

var ipmiMessageKinds = messageKinds{
	{ipmi.ErrRAKPAuthentication.Error(), vocab.KindAuth},
	{"RMCP+ status", vocab.KindAuth},
	{"no datagram matched before deadline", vocab.KindTimeout},
	{"i/o timeout", vocab.KindTimeout},
	{"connection refused", vocab.KindUnreachable},
}
