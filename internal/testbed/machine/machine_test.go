package machine

import (
	"strings"
	"testing"
)

// TestPaths checks where a machine keeps what the harness reaches from
// outside: the kubelet root dir and the bus live in tmp/ (new at every
// boot), the hold-mounts switch outside it (it survives reboots), and the
// bus socket fits in a unix socket address for a harness-like directory.
func TestPaths(t *testing.T) {
	const dir = "/tmp/fh-1234567890/node-a"
	for _, tc := range []struct {
		name, got, want string
	}{
		{"kubelet root", KubeletRootDir(dir), dir + "/tmp/kubelet"},
		{"bus", BusAddress(dir), "unix:path=" + dir + "/tmp/dbus/system_bus_socket"},
		{"hold mounts", HoldMountsFile(dir), dir + "/hold-mounts"},
	} {
		if tc.got != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, tc.got, tc.want)
		}
	}
	if socket := strings.TrimPrefix(BusAddress(dir), "unix:path="); len(socket) > 107 {
		t.Errorf("bus socket path %s is %d bytes, more than fits in sockaddr_un", socket, len(socket))
	}
}
