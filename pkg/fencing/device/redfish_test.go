package device

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf16"

	"fenced.io/fenced/internal/testbed/redfishsim"
	"fenced.io/fenced/pkg/vocab"
)

// rfTestPassword is distinctive so that a leak into any error text is caught.
const rfTestPassword = "Pw-7d1f0c2b-never-print-me"

func rfStaticPassword(p string) func() (string, error) {
	return func() (string, error) { return p, nil }
}

func rfNewSim(t *testing.T, opts redfishsim.Options) *redfishsim.Server {
	t.Helper()
	if opts.Username == "" {
		opts.Username = "fenced"
	}
	if opts.Password == "" {
		opts.Password = rfTestPassword
	}
	sim := redfishsim.New(opts)
	t.Cleanup(sim.Close)
	return sim
}

// rfNewDriver builds a driver for sim with short timeouts; edit adjusts the
// options before construction.
func rfNewDriver(t *testing.T, endpoint string, edit func(*RedfishOptions)) *Redfish {
	t.Helper()
	opts := RedfishOptions{
		DriverOptions: DriverOptions{Node: "node-a", Timeout: 2 * time.Second, Retries: 0},
		Endpoint:      endpoint,
		Credentials:   Credentials{Username: "fenced", Password: rfStaticPassword(rfTestPassword)},
		SystemPath:    redfishsim.SystemPath,
	}
	if edit != nil {
		edit(&opts)
	}
	d, err := NewRedfish(opts)
	if err != nil {
		t.Fatalf("NewRedfish: %v", err)
	}
	t.Cleanup(func() { _ = d.Close() })
	return d
}

func rfAuthModes() []string { return []string{RedfishAuthSession, RedfishAuthBasic} }

func rfWithAuth(mode string) func(*RedfishOptions) {
	return func(o *RedfishOptions) { o.Auth = mode }
}

func rfCtx(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// rfCheckErr asserts err is a driver *Error of the wanted kind that names the
// node and endpoint and does not leak the password.
func rfCheckErr(t *testing.T, err error, want vocab.ErrorKind, endpoint string) {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want kind %s", want)
	}
	var be *Error
	if !errors.As(err, &be) {
		t.Fatalf("error %v (%T) is not a *device.Error", err, err)
	}
	if be.Kind != want {
		t.Errorf("kind = %s, want %s (error: %v)", be.Kind, want, err)
	}
	if be.Node != "node-a" || be.Endpoint != endpoint || be.Op == "" {
		t.Errorf("error fields Node=%q Endpoint=%q Op=%q, want node-a, %s and an op", be.Node, be.Endpoint, be.Op, endpoint)
	}
	rfCheckNoPassword(t, err)
}

func rfCheckNoPassword(t *testing.T, err error) {
	t.Helper()
	for e := err; e != nil; e = errors.Unwrap(e) {
		for _, s := range []string{e.Error(), fmt.Sprintf("%+v", e), fmt.Sprintf("%#v", e)} {
			if strings.Contains(s, rfTestPassword) {
				t.Fatalf("password leaked into error: %s", s)
			}
		}
	}
}

func rfCheckNoSessions(t *testing.T, sim *redfishsim.Server) {
	t.Helper()
	if n := sim.ActiveSessions(); n != 0 {
		t.Errorf("%d sessions left open on the BMC, want 0", n)
	}
}

func TestRedfishPowerState(t *testing.T) {
	tests := []struct {
		redfish  string
		want     vocab.PowerState
		wantKind vocab.ErrorKind
	}{
		{redfish: "On", want: vocab.PowerOn},
		{redfish: "Off", want: vocab.PowerOff},
		{redfish: "PoweringOff", want: vocab.PowerOn},
		{redfish: "PoweringOn", want: vocab.PowerOn},
		{redfish: "Paused", want: vocab.PowerUnknown, wantKind: vocab.KindBMC},
		{redfish: "off", want: vocab.PowerUnknown, wantKind: vocab.KindBMC},
		{redfish: "", want: vocab.PowerUnknown, wantKind: vocab.KindBMC},
	}
	for _, mode := range rfAuthModes() {
		for _, tc := range tests {
			t.Run(mode+"/"+tc.redfish+"_", func(t *testing.T) {
				sim := rfNewSim(t, redfishsim.Options{})
				sim.SetPowerState(tc.redfish)
				d := rfNewDriver(t, sim.URL, rfWithAuth(mode))
				got, err := d.PowerState(rfCtx(t, 10*time.Second))
				if tc.wantKind != "" {
					rfCheckErr(t, err, tc.wantKind, sim.URL)
				} else if err != nil {
					t.Fatalf("PowerState: %v", err)
				}
				if got != tc.want {
					t.Errorf("PowerState = %s, want %s", got, tc.want)
				}
				rfCheckNoSessions(t, sim)
			})
		}
	}
}

func TestRedfishPowerActions(t *testing.T) {
	tests := []struct {
		name       string
		resetTypes []string // nil = simulator default (ForceOff, On, ForceRestart)
		initial    string
		action     func(*Redfish, context.Context) error
		wantState  vocab.PowerState
		wantResets []string
		wantKind   vocab.ErrorKind
	}{
		{name: "off reads off", initial: "On", action: (*Redfish).PowerOff, wantState: vocab.PowerOff, wantResets: []string{"ForceOff"}},
		{name: "on reads on", initial: "Off", action: (*Redfish).PowerOn, wantState: vocab.PowerOn, wantResets: []string{"On"}},
		{name: "cycle uses ForceRestart", initial: "On", action: (*Redfish).PowerCycle, wantState: vocab.PowerOn, wantResets: []string{"ForceRestart"}},
		{
			name: "cycle without ForceRestart is off then on", resetTypes: []string{"ForceOff", "On"},
			initial: "On", action: (*Redfish).PowerCycle, wantState: vocab.PowerOn, wantResets: []string{"ForceOff", "On"},
		},
		{
			name: "off not advertised", resetTypes: []string{"On", "GracefulShutdown"},
			initial: "On", action: (*Redfish).PowerOff, wantState: vocab.PowerOn, wantKind: vocab.KindNotSupported,
		},
	}
	for _, mode := range rfAuthModes() {
		for _, tc := range tests {
			t.Run(mode+"/"+tc.name, func(t *testing.T) {
				sim := rfNewSim(t, redfishsim.Options{PowerState: tc.initial, ResetTypes: tc.resetTypes})
				d := rfNewDriver(t, sim.URL, rfWithAuth(mode))
				ctx := rfCtx(t, 10*time.Second)
				err := tc.action(d, ctx)
				if tc.wantKind != "" {
					rfCheckErr(t, err, tc.wantKind, sim.URL)
				} else if err != nil {
					t.Fatalf("action: %v", err)
				}
				if got := sim.Resets(); !slices.Equal(got, tc.wantResets) {
					t.Errorf("resets received = %v, want %v", got, tc.wantResets)
				}
				got, err := d.PowerState(ctx)
				if err != nil || got != tc.wantState {
					t.Errorf("PowerState after action = %s, %v; want %s", got, err, tc.wantState)
				}
				rfCheckNoSessions(t, sim)
			})
		}
	}
}

func TestRedfishSystemGUID(t *testing.T) {
	const canonical = "4c4c4544-0042-3510-8053-b4c04f4a3232"
	tests := []struct {
		uuid     string
		want     string
		wantKind vocab.ErrorKind
	}{
		{uuid: "4C4C4544-0042-3510-8053-B4C04F4A3232", want: canonical},
		{uuid: canonical, want: canonical},
		{uuid: "4C4C454400423510 8053B4C04F4A3232", wantKind: vocab.KindBMC},
		{uuid: "4C4C45440042351080 53B4C04F4A3232", wantKind: vocab.KindBMC},
		{uuid: "4C4C4544004235108053B4C04F4A3232", want: canonical},
		{uuid: "{4C4C4544-0042-3510-8053-B4C04F4A3232}", want: canonical},
		{uuid: "urn:uuid:4c4c4544-0042-3510-8053-b4c04f4a3232", want: canonical},
		{uuid: "", wantKind: vocab.KindNotSupported},
		{uuid: "not-a-uuid", wantKind: vocab.KindBMC},
		{uuid: "4C4C4544-0042-3510-8053-B4C04F4A32ZZ", wantKind: vocab.KindBMC},
		{uuid: "4C4C45440-042-3510-8053-B4C04F4A3232", wantKind: vocab.KindBMC},
	}
	for _, tc := range tests {
		t.Run(tc.uuid, func(t *testing.T) {
			sim := rfNewSim(t, redfishsim.Options{UUID: tc.uuid})
			d := rfNewDriver(t, sim.URL, nil)
			got, err := d.SystemGUID(rfCtx(t, 10*time.Second))
			if tc.wantKind != "" {
				rfCheckErr(t, err, tc.wantKind, sim.URL)
				return
			}
			if err != nil || got != tc.want {
				t.Errorf("SystemGUID = %q, %v; want %q", got, err, tc.want)
			}
			rfCheckNoSessions(t, sim)
		})
	}
}

func TestRedfishAuth(t *testing.T) {
	for _, mode := range rfAuthModes() {
		t.Run(mode+"/wrong password", func(t *testing.T) {
			sim := rfNewSim(t, redfishsim.Options{PowerState: "Off"})
			d := rfNewDriver(t, sim.URL, func(o *RedfishOptions) {
				o.Auth = mode
				o.Retries = 3
				o.Credentials.Password = rfStaticPassword(rfTestPassword + "-wrong")
			})
			got, err := d.PowerState(rfCtx(t, 10*time.Second))
			rfCheckErr(t, err, vocab.KindAuth, sim.URL)
			if got != vocab.PowerUnknown {
				t.Errorf("PowerState = %s, want %s", got, vocab.PowerUnknown)
			}
			if strings.Contains(err.Error(), rfTestPassword+"-wrong") {
				t.Errorf("wrong password leaked: %v", err)
			}
			// A refused credential must not be retried: it can lock the
			// account on BMCs with lockout policies.
			if n := rfCountRequests(sim, "GET "+redfishsim.ServiceRootPath); n != 1 {
				t.Errorf("service root fetched %d times, want 1 (no retries on auth errors)", n)
			}
			rfCheckNoSessions(t, sim)
		})

		t.Run(mode+"/password source fails", func(t *testing.T) {
			sim := rfNewSim(t, redfishsim.Options{})
			d := rfNewDriver(t, sim.URL, func(o *RedfishOptions) {
				o.Auth = mode
				o.Credentials.Password = func() (string, error) { return "", errors.New("secret file missing") }
			})
			_, err := d.PowerState(rfCtx(t, 10*time.Second))
			rfCheckErr(t, err, vocab.KindAuth, sim.URL)
			if len(sim.Requests()) != 0 {
				t.Errorf("BMC contacted without a password: %v", sim.Requests())
			}
		})

		t.Run(mode+"/empty password", func(t *testing.T) {
			sim := rfNewSim(t, redfishsim.Options{PowerState: "Off"})
			d := rfNewDriver(t, sim.URL, func(o *RedfishOptions) {
				o.Auth = mode
				o.Credentials.Password = rfStaticPassword("")
			})
			got, err := d.PowerState(rfCtx(t, 10*time.Second))
			rfCheckErr(t, err, vocab.KindAuth, sim.URL)
			if got != vocab.PowerUnknown {
				t.Errorf("PowerState = %s, want %s", got, vocab.PowerUnknown)
			}
		})

		t.Run(mode+"/rotated password is picked up", func(t *testing.T) {
			sim := rfNewSim(t, redfishsim.Options{})
			var mu sync.Mutex
			current := rfTestPassword
			d := rfNewDriver(t, sim.URL, func(o *RedfishOptions) {
				o.Auth = mode
				o.Credentials.Password = func() (string, error) {
					mu.Lock()
					defer mu.Unlock()
					return current, nil
				}
			})
			ctx := rfCtx(t, 10*time.Second)
			if _, err := d.PowerState(ctx); err != nil {
				t.Fatalf("before rotation: %v", err)
			}
			sim.SetPassword(rfTestPassword + "-2")
			if _, err := d.PowerState(ctx); KindOf(err) != vocab.KindAuth {
				t.Fatalf("after BMC rotation with old secret: err = %v, want kind auth", err)
			}
			mu.Lock()
			current = rfTestPassword + "-2"
			mu.Unlock()
			if _, err := d.PowerState(ctx); err != nil {
				t.Fatalf("after secret rotation: %v", err)
			}
			rfCheckNoSessions(t, sim)
		})
	}
}

func rfCountRequests(sim *redfishsim.Server, req string) int {
	n := 0
	for _, r := range sim.Requests() {
		if r == req {
			n++
		}
	}
	return n
}

func TestRedfishBMCFaults(t *testing.T) {
	tests := []struct {
		name     string
		fault    redfishsim.Fault
		wantKind vocab.ErrorKind
	}{
		{name: "404 on system", fault: redfishsim.Fault{Path: redfishsim.SystemPath, Status: http.StatusNotFound}, wantKind: vocab.KindBMC},
		{name: "500 everywhere", fault: redfishsim.Fault{Status: http.StatusInternalServerError}, wantKind: vocab.KindBMC},
		{name: "500 on system", fault: redfishsim.Fault{Path: redfishsim.SystemPath, Status: http.StatusInternalServerError}, wantKind: vocab.KindBMC},
		{name: "503 on service root", fault: redfishsim.Fault{Path: redfishsim.ServiceRootPath, Status: http.StatusServiceUnavailable}, wantKind: vocab.KindBMC},
		{name: "401 everywhere", fault: redfishsim.Fault{Status: http.StatusUnauthorized}, wantKind: vocab.KindAuth},
		{name: "403 on system", fault: redfishsim.Fault{Path: redfishsim.SystemPath, Status: http.StatusForbidden}, wantKind: vocab.KindAuth},
		{name: "malformed JSON on system", fault: redfishsim.Fault{Path: redfishsim.SystemPath, MalformedJSON: true}, wantKind: vocab.KindBMC},
		{name: "malformed JSON everywhere", fault: redfishsim.Fault{MalformedJSON: true}, wantKind: vocab.KindBMC},
	}
	for _, mode := range rfAuthModes() {
		for _, tc := range tests {
			t.Run(mode+"/"+tc.name, func(t *testing.T) {
				// The system really is off: a fault must still never read
				// as off.
				sim := rfNewSim(t, redfishsim.Options{PowerState: "Off"})
				d := rfNewDriver(t, sim.URL, func(o *RedfishOptions) {
					o.Auth = mode
					o.Retries = 2
				})
				sim.SetFault(tc.fault)
				got, err := d.PowerState(rfCtx(t, 10*time.Second))
				rfCheckErr(t, err, tc.wantKind, sim.URL)
				if got != vocab.PowerUnknown {
					t.Errorf("PowerState = %s, want %s", got, vocab.PowerUnknown)
				}
				if n := rfCountRequests(sim, "GET "+redfishsim.ServiceRootPath); n != 1 {
					t.Errorf("service root fetched %d times, want 1 (BMC errors are not retried)", n)
				}
				if tc.fault.Path != "" {
					// Logout is not on the faulty path, so it must work.
					rfCheckNoSessions(t, sim)
				}
			})
		}
	}
}

// TestRedfishTimeout: a BMC that holds every request (or the system's)
// costs a read its per-request timeout, its retries, or the caller's
// deadline, whichever ends first. What is asserted does not depend on how
// fast the machine is: the requests the BMC received (one per attempt,
// the retries, none after the caller's deadline), and that the call came
// back long before the held request would have — each case is built so
// that the fault it guards against would keep the call for a minute.
func TestRedfishTimeout(t *testing.T) {
	const (
		timeout = 300 * time.Millisecond
		// held is how long the BMC holds a request: what a read would wait
		// with no per-request timeout or caller's deadline.
		held = time.Minute
	)
	tests := []struct {
		name    string
		path    string // the slow path; "" for every request
		retries int
		timeout time.Duration // per request; 0: timeout
		ctx     time.Duration // 0 = no caller deadline
		// attempts is how many requests the slow path receives, at most
		// (exactly, without a caller's deadline).
		attempts int
	}{
		{name: "slow everywhere, no retries", retries: 0, attempts: 1},
		{name: "slow everywhere, retries", retries: 2, attempts: 3},
		{name: "slow system, retries", path: redfishsim.SystemPath, retries: 1, attempts: 2},
		// A second attempt could start at timeout + the retry pause, after
		// the deadline: five retries would be six requests.
		{name: "caller deadline beats retries", retries: 5, ctx: 400 * time.Millisecond, attempts: 2},
		// The per-request timeout would hold the call for held.
		{name: "caller deadline beats timeout", path: redfishsim.SystemPath, retries: 0, timeout: 2 * held, ctx: 150 * time.Millisecond, attempts: 1},
	}
	for _, mode := range rfAuthModes() {
		for _, tc := range tests {
			t.Run(mode+"/"+tc.name, func(t *testing.T) {
				sim := rfNewSim(t, redfishsim.Options{PowerState: "Off"})
				d := rfNewDriver(t, sim.URL, func(o *RedfishOptions) {
					o.Auth = mode
					o.Timeout = cmp.Or(tc.timeout, timeout)
					o.Retries = tc.retries
				})
				sim.SetFault(redfishsim.Fault{Path: tc.path, Delay: held})
				before := len(sim.Requests())
				ctx := context.Background()
				if tc.ctx > 0 {
					ctx = rfCtx(t, tc.ctx)
				}
				start := time.Now()
				got, err := d.PowerState(ctx)
				elapsed := time.Since(start)
				rfCheckErr(t, err, vocab.KindTimeout, sim.URL)
				if got != vocab.PowerUnknown {
					t.Errorf("PowerState = %s, want %s", got, vocab.PowerUnknown)
				}
				if elapsed >= held/2 {
					t.Errorf("returned after %s: the held request was waited for", elapsed)
				}
				slow := 0
				for _, r := range sim.Requests()[before:] {
					method, path, _ := strings.Cut(r, " ")
					if method != http.MethodDelete && (tc.path == "" || path == tc.path) {
						slow++
					}
				}
				if slow > tc.attempts || tc.ctx == 0 && slow != tc.attempts {
					t.Errorf("%d request(s) to the slow path, want %d%s", slow, tc.attempts, map[bool]string{true: " at most"}[tc.ctx > 0])
				}
				if tc.path != "" {
					// Sessions opened before the slow request must still be
					// logged out, in the background if the caller's deadline
					// has passed; Close waits for that.
					_ = d.Close()
					rfCheckNoSessions(t, sim)
				}
			})
		}
	}
}

func TestRedfishUnreachable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	endpoint := "http://" + l.Addr().String()
	_ = l.Close()

	// A refused connection is an answer: the read does not wait out its
	// per-request timeout (a minute here, so that doing so shows however
	// slow the machine) before each retry.
	const timeout = time.Minute
	for _, mode := range rfAuthModes() {
		t.Run(mode, func(t *testing.T) {
			d := rfNewDriver(t, endpoint, func(o *RedfishOptions) {
				o.Auth = mode
				o.Retries = 2
				o.Timeout = timeout
			})
			start := time.Now()
			got, err := d.PowerState(rfCtx(t, 3*timeout))
			rfCheckErr(t, err, vocab.KindUnreachable, endpoint)
			if got != vocab.PowerUnknown {
				t.Errorf("PowerState = %s, want %s", got, vocab.PowerUnknown)
			}
			if elapsed := time.Since(start); elapsed >= timeout/2 {
				t.Errorf("refused connection took %s", elapsed)
			}
		})
	}
}

func TestRedfishTLS(t *testing.T) {
	sim := rfNewSim(t, redfishsim.Options{TLS: true, PowerState: "Off", UUID: "4C4C4544-0042-3510-8053-B4C04F4A3232"})
	caFile := filepath.Join(t.TempDir(), "bmc-ca.pem")
	if err := os.WriteFile(caFile, sim.CACertPEM(), 0o600); err != nil {
		t.Fatal(err)
	}

	plain := rfNewSim(t, redfishsim.Options{PowerState: "Off"})
	tests := []struct {
		name     string
		edit     func(*RedfishOptions)
		url      string // default: the simulator's
		want     vocab.PowerState
		wantKind vocab.ErrorKind
		wantHint string
	}{
		{name: "CA file", edit: func(o *RedfishOptions) { o.CAFile = caFile }, want: vocab.PowerOff},
		{name: "CA file basic auth", edit: func(o *RedfishOptions) { o.CAFile = caFile; o.Auth = RedfishAuthBasic }, want: vocab.PowerOff},
		{name: "system roots reject the BMC", edit: func(o *RedfishOptions) { o.Retries = 2 }, want: vocab.PowerUnknown, wantKind: vocab.KindBMC,
			wantHint: "not signed by a CA this host trusts: set redfish.caFile"},
		{name: "plain HTTP behind an https URL", url: "https://" + strings.TrimPrefix(plain.URL, "http://"),
			want: vocab.PowerUnknown, wantKind: vocab.KindBMC, wantHint: "plain HTTP: set redfish.scheme: http"},
		{name: "insecure skip verify", edit: func(o *RedfishOptions) { o.InsecureSkipVerify = true }, want: vocab.PowerOff},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := rfNewDriver(t, cmp.Or(tc.url, sim.URL), tc.edit)
			got, err := d.PowerState(rfCtx(t, 10*time.Second))
			if tc.wantKind != "" {
				rfCheckErr(t, err, tc.wantKind, cmp.Or(tc.url, sim.URL))
				if !strings.Contains(err.Error(), tc.wantHint) {
					t.Errorf("error %q lacks the hint %q", err, tc.wantHint)
				}
			} else if err != nil {
				t.Fatalf("PowerState: %v", err)
			}
			if got != tc.want {
				t.Errorf("PowerState = %s, want %s", got, tc.want)
			}
			rfCheckNoSessions(t, sim)
		})
	}
}

// TestRedfishPasswordNeverInErrors uses a BMC that echoes the login request
// in its error body, the worst case for leaking the password: refused
// logins, and every error answer in Basic-auth mode, lose their body; other
// answers keep it with the password redacted.
func TestRedfishPasswordNeverInErrors(t *testing.T) {
	echo := func(status int) string {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/redfish/v1/" {
				_, _ = io.WriteString(w, `{"@odata.id":"/redfish/v1/","Links":{"Sessions":{"@odata.id":"/redfish/v1/SessionService/Sessions"}}}`)
				return
			}
			body, _ := io.ReadAll(r.Body)
			user, pass, _ := r.BasicAuth()
			w.WriteHeader(status)
			fmt.Fprintf(w, `{"error":{"message":"bad login %s %s:%s"}}`, body, user, pass)
		}))
		t.Cleanup(srv.Close)
		return srv.URL
	}
	tests := []struct {
		mode   string
		status int
		kind   vocab.ErrorKind
		want   string
	}{
		{RedfishAuthSession, http.StatusUnauthorized, vocab.KindAuth, "HTTP 401 Unauthorized, response body not shown"},
		{RedfishAuthBasic, http.StatusUnauthorized, vocab.KindAuth, "HTTP 401 Unauthorized, response body not shown"},
		{RedfishAuthSession, http.StatusInternalServerError, vocab.KindBMC, "opening session: HTTP 500 Internal Server Error, response body not shown"},
		{RedfishAuthBasic, http.StatusInternalServerError, vocab.KindBMC, "HTTP 500 Internal Server Error, response body not shown"},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s/%d", tt.mode, tt.status), func(t *testing.T) {
			url := echo(tt.status)
			d := rfNewDriver(t, url, rfWithAuth(tt.mode))
			_, err := d.PowerState(rfCtx(t, 10*time.Second))
			rfCheckErr(t, err, tt.kind, url)
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not contain %q", err, tt.want)
			}
		})
	}

	t.Run("endpoint with credentials", func(t *testing.T) {
		_, err := NewRedfish(RedfishOptions{
			Endpoint:    "https://root:" + rfTestPassword + "@127.0.0.1:443",
			Credentials: Credentials{Username: "fenced", Password: rfStaticPassword(rfTestPassword)},
		})
		if err == nil {
			t.Fatal("NewRedfish accepted credentials in the endpoint URL")
		}
		rfCheckNoPassword(t, err)
	})
}

func TestRedfishDiscoverSystem(t *testing.T) {
	t.Run("single member", func(t *testing.T) {
		sim := rfNewSim(t, redfishsim.Options{PowerState: "Off", UUID: "4C4C4544-0042-3510-8053-B4C04F4A3232"})
		d := rfNewDriver(t, sim.URL, func(o *RedfishOptions) { o.SystemPath = "" })
		ctx := rfCtx(t, 10*time.Second)
		got, err := d.PowerState(ctx)
		if err != nil || got != vocab.PowerOff {
			t.Fatalf("PowerState = %s, %v; want off", got, err)
		}
		if err := d.PowerOn(ctx); err != nil {
			t.Fatalf("PowerOn: %v", err)
		}
		if got := sim.Resets(); !slices.Equal(got, []string{"On"}) {
			t.Errorf("resets = %v, want [On]", got)
		}
		if n := rfCountRequests(sim, "GET "+redfishsim.SystemsPath); n != 1 {
			t.Errorf("Systems collection read %d times, want 1 (discovery is cached)", n)
		}
		rfCheckNoSessions(t, sim)
	})

	for _, members := range []int{0, 2} {
		t.Run(fmt.Sprintf("%d members", members), func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				switch r.URL.Path {
				case "/redfish/v1/":
					_, _ = io.WriteString(w, `{"@odata.id":"/redfish/v1/","Systems":{"@odata.id":"/redfish/v1/Systems"}}`)
				case "/redfish/v1/Systems":
					var m []string
					for i := range members {
						m = append(m, fmt.Sprintf(`{"@odata.id":"/redfish/v1/Systems/%d"}`, i+1))
					}
					fmt.Fprintf(w, `{"Members":[%s]}`, strings.Join(m, ","))
				default:
					_, _ = io.WriteString(w, `{"@odata.id":"/redfish/v1/Systems/1","PowerState":"Off"}`)
				}
			}))
			t.Cleanup(srv.Close)
			d := rfNewDriver(t, srv.URL, func(o *RedfishOptions) {
				o.SystemPath = ""
				o.Auth = RedfishAuthBasic
			})
			got, err := d.PowerState(rfCtx(t, 10*time.Second))
			rfCheckErr(t, err, vocab.KindBMC, srv.URL)
			if got != vocab.PowerUnknown {
				t.Errorf("PowerState = %s, want %s", got, vocab.PowerUnknown)
			}
		})
	}
}

func TestNewRedfishValidation(t *testing.T) {
	creds := Credentials{Username: "fenced", Password: rfStaticPassword(rfTestPassword)}
	tests := []struct {
		name string
		opts RedfishOptions
	}{
		{name: "no scheme", opts: RedfishOptions{Endpoint: "127.0.0.1:443", Credentials: creds}},
		{name: "ftp scheme", opts: RedfishOptions{Endpoint: "ftp://127.0.0.1", Credentials: creds}},
		{name: "path", opts: RedfishOptions{Endpoint: "https://127.0.0.1/redfish/v1", Credentials: creds}},
		{name: "no user", opts: RedfishOptions{Endpoint: "https://127.0.0.1", Credentials: Credentials{Password: rfStaticPassword("x")}}},
		{name: "no password source", opts: RedfishOptions{Endpoint: "https://127.0.0.1", Credentials: Credentials{Username: "u"}}},
		{name: "bad auth", opts: RedfishOptions{Endpoint: "https://127.0.0.1", Credentials: creds, Auth: "digest"}},
		{name: "relative system path", opts: RedfishOptions{Endpoint: "https://127.0.0.1", Credentials: creds, SystemPath: "Systems/1"}},
		{name: "missing CA file", opts: RedfishOptions{Endpoint: "https://127.0.0.1", Credentials: creds, CAFile: "/nonexistent/ca.pem"}},
		{name: "CA and insecure", opts: RedfishOptions{Endpoint: "https://127.0.0.1", Credentials: creds, CAFile: "/x", InsecureSkipVerify: true}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := NewRedfish(tc.opts); err == nil {
				t.Fatal("NewRedfish accepted invalid options")
			} else {
				rfCheckNoPassword(t, err)
			}
		})
	}

	t.Run("trailing slash is normalised", func(t *testing.T) {
		d, err := NewRedfish(RedfishOptions{Endpoint: "https://127.0.0.1:8443/", Credentials: creds})
		if err != nil {
			t.Fatal(err)
		}
		if d.endpoint != "https://127.0.0.1:8443" {
			t.Errorf("endpoint = %q", d.endpoint)
		}
	})
}

func TestRedfishCallerContextAlreadyDone(t *testing.T) {
	sim := rfNewSim(t, redfishsim.Options{PowerState: "Off"})
	d := rfNewDriver(t, sim.URL, nil)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	got, err := d.PowerState(ctx)
	rfCheckErr(t, err, vocab.KindTimeout, sim.URL)
	if got != vocab.PowerUnknown {
		t.Errorf("PowerState = %s, want %s", got, vocab.PowerUnknown)
	}
	if len(sim.Requests()) != 0 {
		t.Errorf("BMC contacted after the caller gave up: %v", sim.Requests())
	}
}

// TestRedfishConcurrentOperations runs operations in parallel on one driver;
// with -race it guards against sharing mutable per-connection state.
func TestRedfishConcurrentOperations(t *testing.T) {
	for _, mode := range rfAuthModes() {
		t.Run(mode, func(t *testing.T) {
			sim := rfNewSim(t, redfishsim.Options{PowerState: "Off", UUID: "4C4C4544-0042-3510-8053-B4C04F4A3232"})
			d := rfNewDriver(t, sim.URL, func(o *RedfishOptions) {
				o.Auth = mode
				o.SystemPath = ""
			})
			ctx := rfCtx(t, 20*time.Second)
			var wg sync.WaitGroup
			errs := make(chan error, 16)
			for range 8 {
				wg.Add(2)
				go func() {
					defer wg.Done()
					if st, err := d.PowerState(ctx); err != nil || st != vocab.PowerOff {
						errs <- fmt.Errorf("PowerState = %s, %v", st, err)
					}
				}()
				go func() {
					defer wg.Done()
					if _, err := d.SystemGUID(ctx); err != nil {
						errs <- fmt.Errorf("SystemGUID: %v", err)
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
			rfCheckNoSessions(t, sim)
		})
	}
}

// rfLeakForms are ways a BMC's error body can carry the Basic-auth
// password that the redactor (credentialPattern) does not foresee.
func rfLeakForms(user, pw string) map[string]string {
	token := user + ":" + pw
	utf16le := func(s string) string {
		var b strings.Builder
		for _, u := range utf16.Encode([]rune(s)) {
			b.WriteByte(byte(u))
			b.WriteByte(byte(u >> 8))
		}
		return b.String()
	}
	return map[string]string{
		"nested base64":         base64.StdEncoding.EncodeToString([]byte(base64.StdEncoding.EncodeToString([]byte(token)))),
		"unaligned base64 (+1)": base64.StdEncoding.EncodeToString([]byte("Basic " + token))[8:],
		"unaligned base64 (+2)": base64.StdEncoding.EncodeToString([]byte("x:" + token)),
		"hex":                   hex.EncodeToString([]byte(pw)),
		"upper-case hex":        strings.ToUpper(hex.EncodeToString([]byte(pw))),
		"upper-case":            strings.ToUpper(pw),
		"UTF-16":                utf16le(pw),
		"truncated prefix":      pw[:len(pw)-3],
		"reversed":              reversed(pw),
	}
}

func reversed(s string) string {
	b := []byte(s)
	slices.Reverse(b)
	return string(b)
}

// TestRedfishBasicErrorBodyNeverLeaks: in Basic-auth mode every request
// carries the password, and a BMC may answer any of them with an error
// body that echoes it in a form no redactor foresees. Such an answer is
// reduced to its status and Redfish MessageIds; nothing else of the body
// reaches the error (and so the logs and Warning Events).
func TestRedfishBasicErrorBodyNeverLeaks(t *testing.T) {
	const user, bodyText = "fenced", "bmc-free-text-marker"
	for name, leak := range rfLeakForms(user, rfTestPassword) {
		for _, status := range []int{http.StatusBadRequest, http.StatusNotFound, http.StatusInternalServerError, http.StatusServiceUnavailable} {
			t.Run(fmt.Sprintf("%s/%d", name, status), func(t *testing.T) {
				srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					if r.URL.Path == "/redfish/v1/" {
						_, _ = io.WriteString(w, `{"@odata.id":"/redfish/v1/"}`)
						return
					}
					w.Header().Set("Content-Type", "application/json")
					w.WriteHeader(status)
					// The leak sits in every field a BMC fills with text.
					body, _ := json.Marshal(map[string]any{"error": map[string]any{
						"code":    "Base.1.8.GeneralError",
						"message": bodyText + " " + leak,
						"@Message.ExtendedInfo": []map[string]any{
							{"MessageId": "Base.1.8.PropertyValueFormatError", "Message": leak, "MessageArgs": []string{leak}, "Resolution": leak},
							{"MessageId": leak},
						},
					}})
					_, _ = w.Write(body)
				}))
				t.Cleanup(srv.Close)
				d := rfNewDriver(t, srv.URL, rfWithAuth(RedfishAuthBasic))
				_, err := d.PowerState(rfCtx(t, 10*time.Second))
				rfCheckErr(t, err, vocab.KindBMC, srv.URL)
				msg := err.Error()
				t.Logf("error: %s", msg)
				for form, s := range rfLeakForms(user, rfTestPassword) {
					if strings.Contains(strings.ToLower(msg), strings.ToLower(s)) {
						t.Errorf("the password in form %q is in the error: %s", form, msg)
					}
				}
				if strings.Contains(msg, bodyText) {
					t.Errorf("the body's free text is in the error: %s", msg)
				}
				want := fmt.Sprintf("HTTP %d %s (Base.1.8.GeneralError, Base.1.8.PropertyValueFormatError), response body not shown", status, http.StatusText(status))
				if !strings.Contains(msg, want) {
					t.Errorf("error %q does not contain %q", msg, want)
				}
			})
		}
	}
	t.Run("not JSON", func(t *testing.T) {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/redfish/v1/" {
				_, _ = io.WriteString(w, `{"@odata.id":"/redfish/v1/"}`)
				return
			}
			w.WriteHeader(http.StatusBadGateway)
			_, _ = io.WriteString(w, "<html>"+bodyText+" "+hex.EncodeToString([]byte(rfTestPassword))+"</html>")
		}))
		t.Cleanup(srv.Close)
		d := rfNewDriver(t, srv.URL, rfWithAuth(RedfishAuthBasic))
		_, err := d.PowerState(rfCtx(t, 10*time.Second))
		rfCheckErr(t, err, vocab.KindBMC, srv.URL)
		if msg := err.Error(); strings.Contains(msg, bodyText) || !strings.Contains(msg, "HTTP 502 Bad Gateway, response body not shown") {
			t.Errorf("error %q: want the status alone", msg)
		}
	})
}
