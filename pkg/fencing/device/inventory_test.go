package device

import (
	"bytes"
	"io/fs"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"fenced.io/fenced/internal/testbed/redfishsim"
	"fenced.io/fenced/pkg/config"
	"fenced.io/fenced/pkg/vocab"
)

// TestNewDriverPasswordFilePermissions: a password file others may read is
// warned about once, however many nodes share it and sessions re-read it;
// one that group or others may write is refused at every read, before the
// BMC is contacted.
func TestNewDriverPasswordFilePermissions(t *testing.T) {
	tests := []struct {
		name      string
		mode      fs.FileMode
		wantWarns int
		wantErr   string
	}{
		{name: "0600", mode: 0o600},
		{name: "0640", mode: 0o640},
		{name: "0644 warns once", mode: 0o644, wantWarns: 1},
		{name: "0664 refused", mode: 0o664, wantErr: "mode 0664"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sim := rfNewSim(t, redfishsim.Options{})
			p := filepath.Join(t.TempDir(), "password")
			if err := os.WriteFile(p, []byte(rfTestPassword+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(p, tt.mode); err != nil {
				t.Fatal(err)
			}
			var logs bytes.Buffer
			log := slog.New(slog.NewTextHandler(&logs, nil))
			addr, port := rfHostPort(t, sim.URL)
			var drivers []BMC
			for _, node := range []string{"node-a", "node-b"} {
				d, err := NewDriver(config.ResolvedBMC{
					Node: node, Protocol: config.ProtocolRedfish, Address: addr, Port: port,
					Username: "fenced", Password: config.PasswordSource{File: p},
					Timeout: 2 * time.Second, RedfishScheme: "http", RedfishAuth: RedfishAuthSession,
					RedfishSystemPath: redfishsim.SystemPath,
				}, log)
				if err != nil {
					t.Fatalf("NewDriver: %v", err)
				}
				t.Cleanup(func() { _ = d.Close() })
				drivers = append(drivers, d)
			}
			for _, d := range drivers {
				for range 2 {
					_, err := d.PowerState(rfCtx(t, 10*time.Second))
					if tt.wantErr == "" && err != nil {
						t.Fatalf("PowerState: %v", err)
					}
					if tt.wantErr != "" && (KindOf(err) != vocab.KindAuth || !strings.Contains(err.Error(), tt.wantErr)) {
						t.Fatalf("PowerState error = %v, want kind auth containing %q", err, tt.wantErr)
					}
				}
			}
			if tt.wantErr != "" && len(sim.Requests()) != 0 {
				t.Errorf("BMC contacted with a refused password file: %v", sim.Requests())
			}
			if n := strings.Count(logs.String(), `level=WARN msg="secret file`); n != tt.wantWarns {
				t.Errorf("%d warnings, want %d:\n%s", n, tt.wantWarns, logs.String())
			}
		})
	}
}

// rfHostPort splits a simulator's base URL into host and port.
func rfHostPort(t *testing.T, base string) (string, int) {
	t.Helper()
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	port, err := strconv.Atoi(u.Port())
	if err != nil {
		t.Fatal(err)
	}
	return u.Hostname(), port
}
