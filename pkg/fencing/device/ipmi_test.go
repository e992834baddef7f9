package device

import (
	"context"
	"strings"
	"testing"
	"time"

	"fenced.io/fenced/internal/testbed/ipmisim"
	"fenced.io/fenced/internal/testbed/poll"
	"fenced.io/fenced/pkg/vocab"
)

// fastVerify keeps verified actions quick against ipmi_sim, which switches
// within milliseconds.
var fastVerify = VerifyOptions{PowerWait: 100 * time.Millisecond, Interval: 200 * time.Millisecond, Timeout: 15 * time.Second}

func requireIntegration(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("integration test: needs ipmi_sim (run without -short)")
	}
}

func newIPMI(t *testing.T, sim *ipmisim.Sim, password string, timeout time.Duration, retries int) *IPMI {
	t.Helper()
	b, err := NewIPMI(IPMIOptions{
		DriverOptions:  DriverOptions{Node: "node-a", Timeout: timeout, Retries: retries},
		Host:           sim.Addr,
		Port:           sim.Port,
		Credentials:    Credentials{Username: sim.Username, Password: staticPassword(password)},
		CipherSuite:    3,
		PrivilegeLevel: "administrator",
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

func staticPassword(pw string) func() (string, error) {
	return func() (string, error) { return pw, nil }
}

// assertState checks the driver's reading, ipmitool's reading and the
// machine process agree.
func assertState(t *testing.T, sim *ipmisim.Sim, b BMC, want vocab.PowerState) {
	t.Helper()
	got, err := b.PowerState(context.Background())
	if err != nil || got != want {
		t.Fatalf("PowerState = %s, %v; want %s", got, err, want)
	}
	tool, err := sim.ToolPowerState()
	if err != nil || tool != string(want) {
		t.Fatalf("ipmitool reads %q (%v); want %s", tool, err, want)
	}
	if _, alive := sim.MachinePID(); alive != (want == vocab.PowerOn) {
		t.Fatalf("machine process alive=%v with power %s", alive, want)
	}
}

func TestIPMIPowerActionsAgainstIPMISim(t *testing.T) {
	requireIntegration(t)
	sim := ipmisim.Start(t, ipmisim.Options{Name: "node-a"})
	b := newIPMI(t, sim, sim.Password, time.Second, 2)
	ctx := context.Background()

	assertState(t, sim, b, vocab.PowerOn)
	pidBefore, _ := sim.MachinePID()

	res, err := PowerOffVerified(ctx, b, fastVerify)
	if err != nil || res.State != vocab.PowerOff || res.AlreadyInState {
		t.Fatalf("PowerOffVerified = %+v, %v", res, err)
	}
	assertState(t, sim, b, vocab.PowerOff)

	res, err = PowerOffVerified(ctx, b, fastVerify)
	if err != nil || !res.AlreadyInState {
		t.Fatalf("second PowerOffVerified = %+v, %v; want already off", res, err)
	}

	if res, err = PowerOnVerified(ctx, b, fastVerify); err != nil || res.State != vocab.PowerOn {
		t.Fatalf("PowerOnVerified = %+v, %v", res, err)
	}
	assertState(t, sim, b, vocab.PowerOn)
	pidOn, _ := sim.MachinePID()
	if pidOn == pidBefore {
		t.Fatalf("machine was not restarted by power on (pid %d)", pidOn)
	}

	if res, err = PowerCycleVerified(ctx, b, fastVerify); err != nil || res.State != vocab.PowerOn {
		t.Fatalf("PowerCycleVerified = %+v, %v", res, err)
	}
	assertState(t, sim, b, vocab.PowerOn)
	pidCycled, _ := sim.MachinePID()
	if pidCycled == pidOn {
		t.Fatalf("machine was not restarted by power cycle (pid %d)", pidCycled)
	}

	// The raw Chassis Control "power cycle" request restarts the machine too.
	if err := b.PowerCycle(ctx); err != nil {
		t.Fatalf("PowerCycle: %v", err)
	}
	poll.Until(t, time.Minute, "machine restarted by raw power cycle", func() bool {
		pid, alive := sim.MachinePID()
		return alive && pid != pidCycled
	})
	assertState(t, sim, b, vocab.PowerOn)
}

func TestIPMIPowerLossReadsOff(t *testing.T) {
	requireIntegration(t)
	sim := ipmisim.Start(t, ipmisim.Options{})
	b := newIPMI(t, sim, sim.Password, time.Second, 2)
	if err := sim.PowerLoss(); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, time.Minute, "power to read off after power loss", func() bool {
		state, err := b.PowerState(context.Background())
		return err == nil && state == vocab.PowerOff
	})
	assertState(t, sim, b, vocab.PowerOff)
}

func TestIPMISystemGUIDMatchesSystemUUID(t *testing.T) {
	requireIntegration(t)
	const uuid = "4c4c4544-0042-3510-8052-b4c04f4d4e31" // a Dell-style SMBIOS UUID
	sim := ipmisim.Start(t, ipmisim.Options{SystemUUID: uuid})
	b := newIPMI(t, sim, sim.Password, time.Second, 2)
	got, err := b.SystemGUID(context.Background())
	if err != nil || got != uuid {
		t.Fatalf("SystemGUID = %q, %v; want %q", got, err, uuid)
	}
}

func TestIPMIFailuresAreClassifiedAndNeverOff(t *testing.T) {
	requireIntegration(t)
	sim := ipmisim.Start(t, ipmisim.Options{})
	frozen := ipmisim.Start(t, ipmisim.Options{})
	frozen.Freeze()
	closedPort, err := ipmisim.FreePort("udp", "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	const timeout, retries = 300 * time.Millisecond, 1

	cases := []struct {
		name     string
		bmc      func() *IPMI
		wantKind vocab.ErrorKind
	}{
		{"wrong password", func() *IPMI { return newIPMI(t, sim, "not-the-password", timeout, retries) }, vocab.KindAuth},
		{"wrong user", func() *IPMI {
			b := newIPMI(t, sim, sim.Password, timeout, retries)
			b.opts.Credentials.Username = "nobody"
			return b
		}, vocab.KindAuth},
		{"nothing listening", func() *IPMI {
			b := newIPMI(t, sim, sim.Password, timeout, retries)
			b.opts.Port = closedPort
			return b
		}, vocab.KindUnreachable},
		{"hung BMC (SIGSTOP)", func() *IPMI { return newIPMI(t, frozen, frozen.Password, timeout, retries) }, vocab.KindTimeout},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := tc.bmc()
			start := time.Now()
			state, err := b.PowerState(context.Background())
			elapsed := time.Since(start)
			if err == nil || state != vocab.PowerUnknown {
				t.Fatalf("PowerState = %s, %v; want an error and unknown", state, err)
			}
			if got := KindOf(err); got != tc.wantKind {
				t.Fatalf("kind = %q, want %q (err: %v)", got, tc.wantKind, err)
			}
			// The whole operation is bounded by the per-attempt timeout
			// times exchanges and attempts, never open-ended.
			if budget := timeout * boundedExchanges * (1 + retries); elapsed > budget+time.Second {
				t.Fatalf("took %s, budget %s", elapsed, budget)
			}
			if strings.Contains(err.Error(), sim.Password) || strings.Contains(err.Error(), frozen.Password) {
				t.Fatalf("error leaks the password: %v", err)
			}
			for _, action := range []func(context.Context) error{b.PowerOff, b.PowerOn, b.PowerCycle} {
				if err := action(context.Background()); KindOf(err) != tc.wantKind {
					t.Fatalf("action error kind = %q, want %q (err: %v)", KindOf(err), tc.wantKind, err)
				}
			}
			if _, err := PowerOffVerified(context.Background(), b, fastVerify); err == nil {
				t.Fatal("PowerOffVerified succeeded against a failing BMC")
			}
			t.Logf("%s: %v (after %s)", tc.name, err, elapsed.Round(time.Millisecond))
		})
	}
	// The machine behind the working BMC was never switched by the failures.
	if _, alive := sim.MachinePID(); !alive {
		t.Fatal("machine died although every request was refused")
	}
}
