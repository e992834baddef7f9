package device

import (
	"context"
	"testing"
	"time"

	"fenced.io/fenced/internal/testbed/ipmisim"
	"fenced.io/fenced/pkg/vocab"
)

// BenchmarkIPMIPowerStatus measures one power-status read against ipmi_sim
// as the fencer does it: open an RMCP+ session (cipher suite 3), Get
// Chassis Status, close the session.
func BenchmarkIPMIPowerStatus(b *testing.B) {
	sim := ipmisim.Start(b, ipmisim.Options{})
	drv, err := NewIPMI(IPMIOptions{
		DriverOptions:  DriverOptions{Node: "bench", Timeout: time.Second, Retries: 2},
		Host:           sim.Addr,
		Port:           sim.Port,
		Credentials:    Credentials{Username: sim.Username, Password: staticPassword(sim.Password)},
		CipherSuite:    3,
		PrivilegeLevel: "administrator",
	})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	for b.Loop() {
		if state, err := drv.PowerState(ctx); err != nil || state != vocab.PowerOn {
			b.Fatalf("PowerState = %s, %v", state, err)
		}
	}
}
