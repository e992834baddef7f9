package device

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/stmcginnis/gofish"
	"github.com/stmcginnis/gofish/schemas"

	"fenced.io/fenced/pkg/vocab"
)

// Redfish authentication modes accepted in RedfishOptions.Auth.
const (
	RedfishAuthSession = "session"
	RedfishAuthBasic   = "basic"
)

const (
	// redfishSystemsPath is fixed by the Redfish specification, so discovery
	// does not depend on the service root advertising it.
	redfishSystemsPath = "/redfish/v1/Systems"
	// redfishRetryPause keeps a flapping BMC from being hammered while staying
	// well below any sensible per-attempt timeout.
	redfishRetryPause = 200 * time.Millisecond
	// maxErrorText bounds BMC-supplied text in errors: some BMCs answer errors
	// with whole HTML pages.
	maxErrorText = 512
	// redfishCycleOffWait bounds how long PowerCycle waits for the system to
	// read off before switching it on again; it mirrors the fence-agents
	// default power_timeout.
	redfishCycleOffWait = 20 * time.Second
)

// RedfishOptions configures a Redfish BMC driver.
type RedfishOptions struct {
	DriverOptions
	// Endpoint is the base URL of the BMC, e.g. "https://10.0.0.11:443". It
	// must not carry credentials or a path.
	Endpoint string
	// Credentials authenticate every session or request.
	Credentials Credentials
	// SystemPath is the ComputerSystem resource, e.g. "/redfish/v1/Systems/1".
	// Empty means the only member of /redfish/v1/Systems; with zero or several
	// members every operation fails rather than guessing which machine to
	// fence.
	SystemPath string
	// Auth is RedfishAuthSession (the default) or RedfishAuthBasic.
	Auth string
	// CAFile is a PEM bundle used to verify the BMC certificate instead of the
	// system roots.
	CAFile string
	// InsecureSkipVerify disables certificate verification. The caller is
	// expected to warn about it.
	InsecureSkipVerify bool
}

// Redfish drives a BMC over the DMTF Redfish REST API. Every operation opens
// its own session and logs out again, because BMCs have very few session slots
// and a fencing agent that held one would lock out operators and other tools.
// It is safe for concurrent use.
type Redfish struct {
	node       string
	endpoint   string // normalised base URL, also used in errors
	creds      Credentials
	basic      bool
	timeout    time.Duration
	retries    int
	httpClient *http.Client

	mu         sync.Mutex
	systemPath string // configured or discovered; guarded by mu

	// logouts tracks session logouts that outlived their caller's context,
	// so Close can wait for them instead of leaking BMC sessions.
	logouts sync.WaitGroup
}

var _ BMC = (*Redfish)(nil)

// NewRedfish validates opts and builds a driver. It does not contact the BMC,
// so a BMC that is down at start-up does not prevent fenced from starting.
func NewRedfish(opts RedfishOptions) (*Redfish, error) {
	endpoint, err := normaliseEndpoint(opts.Endpoint)
	if err != nil {
		return nil, err
	}
	if opts.Credentials.Username == "" || opts.Credentials.Password == nil {
		// gofish silently sends unauthenticated requests without a user
		// name, and an unauthenticated "off" must never be trusted.
		return nil, fmt.Errorf("redfish %s: a user name and a password source are required", endpoint)
	}
	var basic bool
	switch strings.ToLower(opts.Auth) {
	case "", RedfishAuthSession:
	case RedfishAuthBasic:
		basic = true
	default:
		return nil, fmt.Errorf("redfish %s: unknown auth mode %q (want %q or %q)", endpoint, opts.Auth, RedfishAuthSession, RedfishAuthBasic)
	}
	if opts.SystemPath != "" && !strings.HasPrefix(opts.SystemPath, "/") {
		return nil, fmt.Errorf("redfish %s: system path %q must start with /", endpoint, opts.SystemPath)
	}
	if opts.CAFile != "" && opts.InsecureSkipVerify {
		return nil, fmt.Errorf("redfish %s: a CA file and insecure-skip-verify are mutually exclusive", endpoint)
	}

	// An unset timeout is the package's default, never none: an
	// unbounded request could hang a fencing decision forever.
	timeout := opts.Timeout
	if timeout <= 0 {
		timeout = DefaultBMCTimeout
	}
	tlsConfig := &tls.Config{
		MinVersion:         tls.VersionTLS12,
		InsecureSkipVerify: opts.InsecureSkipVerify, //nolint:gosec // explicit operator choice, warned about by the caller
	}
	if opts.CAFile != "" {
		pem, err := os.ReadFile(opts.CAFile)
		if err != nil {
			return nil, fmt.Errorf("redfish %s: reading CA file: %w", endpoint, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("redfish %s: CA file %s contains no PEM certificate", endpoint, opts.CAFile)
		}
		tlsConfig.RootCAs = pool
	}

	dialer := &net.Dialer{Timeout: timeout}
	transport := &http.Transport{
		// BMCs sit on a management network; going through an HTTP(S)_PROXY
		// meant for the internet would make "unreachable" meaningless.
		Proxy:                 nil,
		DialContext:           dialer.DialContext,
		TLSClientConfig:       tlsConfig,
		TLSHandshakeTimeout:   timeout,
		ResponseHeaderTimeout: timeout,
		// One short-lived connection per operation: nothing is held open at
		// steady state, and a BMC reset never leaves us a dead pooled socket.
		DisableKeepAlives: true,
	}
	httpClient := &http.Client{
		Transport: transport,
		Timeout:   timeout,
		// A redirect to another host would carry X-Auth-Token with it (Go
		// only strips Authorization), so stay on the configured BMC.
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if len(via) >= 5 || req.URL.Scheme != via[0].URL.Scheme || req.URL.Host != via[0].URL.Host {
				return http.ErrUseLastResponse
			}
			return nil
		},
	}

	retries := opts.Retries
	if retries < 0 {
		retries = 0
	}
	return &Redfish{
		node:       opts.Node,
		endpoint:   endpoint,
		creds:      opts.Credentials,
		basic:      basic,
		timeout:    timeout,
		retries:    retries,
		httpClient: httpClient,
		systemPath: opts.SystemPath,
	}, nil
}

// normaliseEndpoint returns the base URL in the form gofish expects (it
// concatenates paths onto it) and refuses embedded credentials, which would
// otherwise end up in every error message.
func normaliseEndpoint(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		// url.Parse errors quote the input, which may contain a password.
		return "", errors.New("redfish: endpoint is not a valid URL")
	}
	if u.User != nil {
		return "", fmt.Errorf("redfish %s: endpoint must not contain credentials; use the credentials settings", u.Redacted())
	}
	if u.Scheme != "https" && u.Scheme != "http" {
		return "", fmt.Errorf("redfish %s: endpoint scheme must be https or http", u.Redacted())
	}
	if u.Host == "" {
		return "", fmt.Errorf("redfish %s: endpoint has no host", u.Redacted())
	}
	if (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
		return "", fmt.Errorf("redfish %s: endpoint must be a base URL without path or query", u.Redacted())
	}
	return u.Scheme + "://" + u.Host, nil
}

// PowerState reads the system's PowerState. Only the exact Redfish value
// "Off" is reported as PowerOff.
func (r *Redfish) PowerState(ctx context.Context) (vocab.PowerState, error) {
	return r.powerState(ctx, vocab.OpPowerStatus)
}

func (r *Redfish) powerState(ctx context.Context, op string) (vocab.PowerState, error) {
	state := vocab.PowerUnknown
	err := r.do(ctx, op, func(c *gofish.APIClient) error {
		sys, err := r.system(c)
		if err != nil {
			return err
		}
		switch sys.PowerState {
		// A system that is still powering off can still write to shared
		// disks, so it counts as on.
		case schemas.OnPowerState, schemas.PoweringOnPowerState, schemas.PoweringOffPowerState:
			state = vocab.PowerOn
		case schemas.OffPowerState:
			state = vocab.PowerOff
		default:
			return kindErr(vocab.KindBMC, fmt.Errorf("system %s reports unrecognised PowerState %q", sys.ODataID, sys.PowerState))
		}
		return nil
	})
	if err != nil {
		return vocab.PowerUnknown, err
	}
	return state, nil
}

// PowerOff sends ComputerSystem.Reset with ResetType ForceOff.
func (r *Redfish) PowerOff(ctx context.Context) error {
	return r.reset(ctx, vocab.OpPowerOff, schemas.ForceOffResetType)
}

// PowerOn sends ComputerSystem.Reset with ResetType On.
func (r *Redfish) PowerOn(ctx context.Context) error {
	return r.reset(ctx, vocab.OpPowerOn, schemas.OnResetType)
}

// PowerCycle uses ForceRestart when the system advertises it. Otherwise it
// does what fence_redfish does: ForceOff, wait until the system reads off,
// then On.
func (r *Redfish) PowerCycle(ctx context.Context) error {
	var restarted bool
	err := r.do(ctx, vocab.OpPowerCycle, func(c *gofish.APIClient) error {
		sys, err := r.system(c)
		if err != nil {
			return err
		}
		types := supportedResetTypes(sys)
		// Only trust ForceRestart when it is advertised: an unlisted reset
		// type may be a graceful one or silently ignored.
		if slices.Contains(types, schemas.ForceRestartResetType) {
			restarted = true
			return resetSystem(sys, types, schemas.ForceRestartResetType)
		}
		return resetSystem(sys, types, schemas.ForceOffResetType)
	})
	if err != nil || restarted {
		return err
	}
	if err := r.waitOff(ctx); err != nil {
		return err
	}
	return r.reset(ctx, vocab.OpPowerCycle, schemas.OnResetType)
}

// waitOff polls until the system reads off, because many BMCs reject "On"
// while a ForceOff is still in progress.
func (r *Redfish) waitOff(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, redfishCycleOffWait)
	defer cancel()
	interval := min(time.Second, r.timeout)
	for {
		state, err := r.powerState(ctx, vocab.OpPowerCycle)
		if err == nil && state == vocab.PowerOff {
			return nil
		}
		if err != nil && ctx.Err() == nil {
			if k := KindOf(err); k != vocab.KindTimeout && k != vocab.KindUnreachable {
				return err
			}
		}
		t := time.NewTimer(interval)
		select {
		case <-ctx.Done():
			t.Stop()
			if err != nil {
				return err
			}
			return r.newError(vocab.OpPowerCycle, vocab.KindTimeout, fmt.Errorf("system did not read off within %s after ForceOff: %w", redfishCycleOffWait, ctx.Err()), "")
		case <-t.C:
		}
	}
}

// SystemGUID returns the system's UUID in lower-case canonical form.
func (r *Redfish) SystemGUID(ctx context.Context) (string, error) {
	var guid string
	err := r.do(ctx, vocab.OpSystemGUID, func(c *gofish.APIClient) error {
		sys, err := r.system(c)
		if err != nil {
			return err
		}
		if strings.TrimSpace(sys.UUID) == "" {
			return kindErr(vocab.KindNotSupported, fmt.Errorf("system %s has no UUID", sys.ODataID))
		}
		guid, err = canonicalUUID(sys.UUID)
		if err != nil {
			return kindErr(vocab.KindBMC, fmt.Errorf("system %s: %w", sys.ODataID, err))
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	return guid, nil
}

// Close waits for session logouts that were moved to the background because
// their caller's context ended. No connection outlives an operation, so there
// is nothing else to release; the driver stays usable afterwards.
func (r *Redfish) Close() error {
	r.logouts.Wait()
	r.httpClient.CloseIdleConnections()
	return nil
}

// canonicalUUID accepts the UUID spellings BMCs are known to use (with or
// without hyphens, braces, "urn:uuid:" prefix, any case) and returns the
// canonical 8-4-4-4-12 lower-case form used by Kubernetes' systemUUID.
func canonicalUUID(s string) (string, error) {
	v := strings.TrimSpace(s)
	v = strings.TrimPrefix(strings.ToLower(v), "urn:uuid:")
	v = strings.TrimSuffix(strings.TrimPrefix(v, "{"), "}")
	var hexDigits string
	switch len(v) {
	case 32:
		hexDigits = v
	case 36:
		if v[8] != '-' || v[13] != '-' || v[18] != '-' || v[23] != '-' {
			return "", fmt.Errorf("UUID %q is not in 8-4-4-4-12 form", s)
		}
		hexDigits = v[:8] + v[9:13] + v[14:18] + v[19:23] + v[24:]
	default:
		return "", fmt.Errorf("UUID %q has the wrong length", s)
	}
	if _, err := hex.DecodeString(hexDigits); err != nil {
		return "", fmt.Errorf("UUID %q is not hexadecimal", s)
	}
	h := hexDigits
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:], nil
}

// reset sends one ComputerSystem.Reset.
func (r *Redfish) reset(ctx context.Context, op string, rt schemas.ResetType) error {
	return r.do(ctx, op, func(c *gofish.APIClient) error {
		sys, err := r.system(c)
		if err != nil {
			return err
		}
		return resetSystem(sys, supportedResetTypes(sys), rt)
	})
}

// supportedResetTypes returns the advertised reset types, or nil when the
// BMC does not say. A failure to read ActionInfo is not fatal: the reset
// itself will report whatever is really wrong.
func supportedResetTypes(sys *schemas.ComputerSystem) []schemas.ResetType {
	types, err := sys.GetSupportedResetTypes()
	if err != nil {
		return nil
	}
	return types
}

// resetSystem checks that the reset can be attempted before sending it, so
// that a missing action is reported as not supported rather than as gofish's
// generic "no target provided".
func resetSystem(sys *schemas.ComputerSystem, types []schemas.ResetType, rt schemas.ResetType) error {
	var raw struct {
		Actions map[string]struct {
			Target string `json:"target"`
		}
	}
	if err := json.Unmarshal(sys.RawData, &raw); err != nil {
		return kindErr(vocab.KindBMC, fmt.Errorf("decoding system %s: %w", sys.ODataID, err))
	}
	if raw.Actions["#ComputerSystem.Reset"].Target == "" {
		return kindErr(vocab.KindNotSupported, fmt.Errorf("system %s has no #ComputerSystem.Reset action", sys.ODataID))
	}
	if len(types) > 0 && !slices.Contains(types, rt) {
		return kindErr(vocab.KindNotSupported, fmt.Errorf("system %s does not allow ResetType %s (allowed: %v)", sys.ODataID, rt, types))
	}
	if _, err := sys.Reset(rt); err != nil {
		return fmt.Errorf("ResetType %s: %w", rt, err)
	}
	return nil
}

// system fetches the configured ComputerSystem, discovering its path on
// first use when none was configured.
func (r *Redfish) system(c *gofish.APIClient) (*schemas.ComputerSystem, error) {
	r.mu.Lock()
	path := r.systemPath
	r.mu.Unlock()
	if path == "" {
		var err error
		if path, err = discoverSystem(c); err != nil {
			return nil, err
		}
		r.mu.Lock()
		r.systemPath = path
		r.mu.Unlock()
	}
	sys, err := schemas.GetComputerSystem(c, path)
	if err != nil {
		return nil, fmt.Errorf("reading system %s: %w", path, err)
	}
	return sys, nil
}

// discoverSystem reads the Systems collection itself rather than through
// gofish's Service.Systems, which fetches every member concurrently and
// hides the cause of failures inside a map the error kinds cannot see.
func discoverSystem(c *gofish.APIClient) (string, error) {
	resp, err := c.Get(redfishSystemsPath)
	defer schemas.DeferredCleanupHTTPResponse(resp)
	if err != nil {
		return "", fmt.Errorf("reading %s: %w", redfishSystemsPath, err)
	}
	var coll struct {
		Members []struct {
			ODataID string `json:"@odata.id"`
		}
	}
	if err := json.NewDecoder(resp.Body).Decode(&coll); err != nil {
		return "", fmt.Errorf("decoding %s: %w", redfishSystemsPath, err)
	}
	switch len(coll.Members) {
	case 1:
		if p := coll.Members[0].ODataID; strings.HasPrefix(p, "/") {
			return p, nil
		}
		return "", kindErr(vocab.KindBMC, fmt.Errorf("%s member has no usable @odata.id", redfishSystemsPath))
	case 0:
		return "", kindErr(vocab.KindBMC, fmt.Errorf("%s has no members", redfishSystemsPath))
	default:
		// Guessing could fence the wrong machine on a multi-node chassis.
		return "", kindErr(vocab.KindBMC, fmt.Errorf("%s has %d members; configure the system path explicitly", redfishSystemsPath, len(coll.Members)))
	}
}

// do runs fn in a fresh authenticated client, retrying only failures that
// another attempt might cure (timeouts, unreachable BMC) and never past ctx.
func (r *Redfish) do(ctx context.Context, op string, fn func(c *gofish.APIClient) error) error {
	var last error
	for attempt := 0; attempt <= r.retries; attempt++ {
		if attempt > 0 {
			t := time.NewTimer(redfishRetryPause)
			select {
			case <-ctx.Done():
				t.Stop()
				return last
			case <-t.C:
			}
		}
		if err := ctx.Err(); err != nil {
			if last != nil {
				return last
			}
			return r.newError(op, vocab.KindTimeout, err, "")
		}
		last = r.attempt(ctx, op, fn)
		if last == nil {
			return nil
		}
		if k := KindOf(last); k != vocab.KindTimeout && k != vocab.KindUnreachable {
			return last
		}
	}
	return last
}

// attempt is one connect, fn, logout sequence bounded by the per-attempt
// timeout.
func (r *Redfish) attempt(ctx context.Context, op string, fn func(c *gofish.APIClient) error) error {
	password, err := r.creds.Password()
	if err != nil {
		// The source's error describes a file or secret, not its content.
		return r.newError(op, vocab.KindAuth, fmt.Errorf("reading BMC password: %w", err), "")
	}
	if password == "" {
		// gofish would quietly drop basic auth for an empty password.
		return r.newError(op, vocab.KindAuth, errors.New("BMC password is empty"), "")
	}

	actx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	c, err := gofish.ConnectContext(actx, gofish.ClientConfig{
		Endpoint:   r.endpoint,
		Username:   r.creds.Username,
		Password:   password,
		BasicAuth:  r.basic,
		HTTPClient: r.httpClient,
		// gofish would otherwise rewrite fields of the shared transport on
		// every connect, which races between concurrent operations.
		NoModifyTransport: true,
	})
	if err != nil {
		stage := "opening session"
		if r.basic {
			stage = "reading service root"
		}
		// In session mode this is the login: its answers lose their body.
		return r.classify(op, actx, fmt.Errorf("%s: %w", stage, err), !r.basic, password)
	}
	defer r.logout(ctx, c)

	// The session token is a credential until the logout: redact it too.
	var token string
	if !r.basic {
		// Without a token gofish would carry on unauthenticated, and an
		// unauthenticated answer is no evidence of anything.
		s, err := c.GetSession()
		if err != nil || s.Token == "" {
			return r.newError(op, vocab.KindBMC, errors.New("BMC created a session without returning an X-Auth-Token"), password)
		}
		token = s.Token
	}
	if err := fn(c); err != nil {
		return r.classify(op, actx, err, false, password, token)
	}
	return nil
}

// logout deletes the session. It runs in the caller's goroutine while ctx is
// live; once ctx has ended it moves to the background (bounded by the
// per-attempt timeout) so the caller is not held past its deadline and the
// BMC's few session slots are still released.
func (r *Redfish) logout(ctx context.Context, c *gofish.APIClient) {
	if r.basic {
		return
	}
	s, err := c.GetSession()
	if err != nil || s.ID == "" {
		// Without a Location header there is no session URI to delete; the
		// BMC's session timeout will reclaim it.
		return
	}
	if ctx.Err() == nil {
		lctx, cancel := context.WithTimeout(ctx, r.timeout)
		err := c.WithContext(lctx).Service.DeleteSession(s.ID)
		cancel()
		if err == nil || ctx.Err() == nil {
			// Either done, or the BMC refused: retrying would not help.
			return
		}
	}
	r.logouts.Add(1)
	go func() {
		defer r.logouts.Done()
		lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.timeout)
		defer cancel()
		_ = c.WithContext(lctx).Service.DeleteSession(s.ID)
	}()
}

// kindError carries a classification decided where the cause is understood
// better than by looking at the error afterwards.
type kindError struct {
	kind vocab.ErrorKind
	err  error
}

func (e *kindError) Error() string { return e.err.Error() }
func (e *kindError) Unwrap() error { return e.err }

func kindErr(kind vocab.ErrorKind, err error) error { return &kindError{kind: kind, err: err} }

// classify maps a gofish/net/http failure onto an ErrorKind. Anything not
// recognised is a BMC error: it is never retried and never "off".
//
// The body of an HTTP answer is dropped (withoutBody) when the answer is
// 401 or 403, when login is set (err comes from creating the session,
// whose request carried the password), and always in Basic-auth mode
// (every request carries the password): the error keeps the status code
// and the Redfish MessageIds only. A BMC that echoes the request may write
// the password in forms no redaction foresees (nested or unaligned base64,
// hex, another case, UTF-16, a prefix). Whatever text remains is redacted
// by newError.
func (r *Redfish) classify(op string, actx context.Context, err error, login bool, password string, secrets ...string) error {
	var ke *kindError
	var re *schemas.Error
	var ue *url.Error
	var certErr *tls.CertificateVerificationError
	var uaErr x509.UnknownAuthorityError
	var hostErr x509.HostnameError
	var invErr x509.CertificateInvalidError
	var kind vocab.ErrorKind
	switch {
	case errors.As(err, &ke):
		kind = ke.kind
	case errors.As(err, &re) && re.HTTPReturnedStatusCode != 0:
		if re.HTTPReturnedStatusCode == http.StatusUnauthorized || re.HTTPReturnedStatusCode == http.StatusForbidden {
			kind = vocab.KindAuth
		} else {
			kind = vocab.KindBMC
		}
		if kind == vocab.KindAuth || login || r.basic {
			err = withoutBody(err, re)
		}
	case errors.As(err, &certErr), errors.As(err, &uaErr), errors.As(err, &hostErr),
		errors.As(err, &invErr), plainHTTPAnswer(err):
		// Retrying cannot fix an untrusted certificate or a plain-HTTP BMC
		// behind an https URL; it is the BMC's answer that is wrong. The
		// commonest first-run failure with Redfish, so the error says what
		// to set (it reaches the log, the Events and fenced bmc status).
		kind = vocab.KindBMC
		err = fmt.Errorf("%w; %s", err, tlsAdvice(err))
	default:
		// gofish flattens body-read failures into strings, so the expired
		// attempt context (checked by classifyTransport) is the only
		// reliable sign of a timeout there.
		var ok bool
		if kind, ok = classifyTransport(actx, err); !ok {
			if errors.As(err, &ue) {
				// Everything else that failed inside http.Client.Do is the
				// transport: reset, connection closed, TLS handshake cut.
				kind = vocab.KindUnreachable
			} else {
				kind = vocab.KindBMC
			}
		}
	}
	return r.newError(op, kind, err, password, secrets...)
}

// plainHTTPAnswer reports a plain-HTTP answer to a TLS handshake: net/http
// replaces the tls.RecordHeaderError by a message of its own, with no type.
func plainHTTPAnswer(err error) bool {
	var recErr tls.RecordHeaderError
	return errors.As(err, &recErr) || strings.Contains(err.Error(), "server gave HTTP response to HTTPS client")
}

// tlsAdvice says which setting fixes a failed TLS handshake with a BMC.
func tlsAdvice(err error) string {
	var hostErr x509.HostnameError
	var invErr x509.CertificateInvalidError
	switch {
	case plainHTTPAnswer(err):
		return "the BMC answered in plain HTTP: set redfish.scheme: http, or the port of its HTTPS service"
	case errors.As(err, &hostErr):
		return "the BMC's certificate does not name the address fenced connects to: use a name or address the certificate lists, or reissue the certificate"
	case errors.As(err, &invErr) && invErr.Reason == x509.Expired:
		return "the BMC's certificate has expired or is not valid yet: check the BMC's clock and renew its certificate"
	}
	return "the BMC's certificate is not signed by a CA this host trusts: set redfish.caFile to the CA that signed it " +
		"(for a self-signed certificate, the certificate itself; openssl s_client -showcerts prints it)"
}

// newError builds the driver's *Error with the credentials redacted from
// the cause (redactError): a BMC may echo the login request back in its
// error body. BMC-supplied text is then cut to maxErrorText. password is
// empty where none was read yet.
func (r *Redfish) newError(op string, kind vocab.ErrorKind, err error, password string, secrets ...string) *Error {
	err = truncateError(redactError(err, r.creds.Username, password, secrets...), maxErrorText)
	return &Error{Node: r.node, Op: op, Endpoint: r.endpoint, Kind: kind, Err: err}
}

// redfishMessageID is the shape of a Redfish MessageId: registry, major and
// minor version (an errata number allowed), message key
// ("Base.1.8.NoValidSession", "IDRAC.2.8.SYS403"). The id comes from the
// BMC's body, so it is held to that shape strictly: a BMC echoing the
// request could put anything there, and free text ("PW-SECRET", a prefix
// of one) must not pass for an id.
var redfishMessageID = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9]{0,31}\.[0-9]{1,4}\.[0-9]{1,4}(\.[0-9]{1,4})?\.[A-Za-z][A-Za-z0-9]{0,63}$`)

// maxMessageIDs bounds the MessageIds withoutBody keeps of one answer.
const maxMessageIDs = 4

// withoutBody replaces the BMC's answer re inside err's text by its status
// code, status text and Redfish MessageIds (error.code, then each
// error.@Message.ExtendedInfo[].MessageId of the shape of one, once each).
// Authentication failures (and every failure to log in, and any failure
// in Basic-auth mode) are answered by some BMCs with the request they
// refused, credentials included, in encodings no redaction can promise to
// foresee; the body is not needed to tell the operator what went wrong.
func withoutBody(err error, re *schemas.Error) error {
	short := fmt.Sprintf("HTTP %d %s", re.HTTPReturnedStatusCode, http.StatusText(re.HTTPReturnedStatusCode))
	var ids []string
	for _, id := range append([]string{re.Code}, extendedMessageIDs(re)...) {
		if redfishMessageID.MatchString(id) && !slices.Contains(ids, id) && len(ids) < maxMessageIDs {
			ids = append(ids, id)
		}
	}
	if len(ids) > 0 {
		short += " (" + strings.Join(ids, ", ") + ")"
	}
	short += ", response body not shown"
	msg := err.Error()
	if full := re.Error(); full != "" && strings.Contains(msg, full) {
		return errors.New(strings.Replace(msg, full, short, 1))
	}
	// The answer is not where expected in the text: show nothing of it.
	return errors.New(short)
}

func extendedMessageIDs(re *schemas.Error) []string {
	ids := make([]string, len(re.ExtendedInfos))
	for i, e := range re.ExtendedInfos {
		ids[i] = e.MessageID
	}
	return ids
}
