package e2e

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"fenced.io/fenced/internal/testbed/harness"
	"fenced.io/fenced/internal/testbed/ipmisim"
	"fenced.io/fenced/internal/testbed/poll"
	"fenced.io/fenced/pkg/taint"
	"fenced.io/fenced/pkg/vocab"
)

// TestConfigReload changes the running fencers' configuration, which they
// read from a directory laid out as the kubelet lays out a ConfigMap volume
// (Fencing.ConfigVolume), through an update as the kubelet makes it (a new
// ..data swapped in; the file's own path is a symlink that never changes):
// w-1's BMC moves to another address, and the fencers take it without a
// restart — w-1's next power loss is read there and tainted. Then an
// invalid file is refused (metric, Event on the fencer's Node) and the
// configuration in force keeps fencing: w-2's power loss is tainted.
func TestConfigReload(t *testing.T) {
	harness.Parallel(t)
	ctx, h := harness.StartForTest(t, harness.Options{
		Machines: []string{"cp-1", "cp-2", "w-1", "w-2", "w-3"},
		Fencing:  &harness.Fencing{Fencers: []string{"cp-1", "cp-2"}, ConfigVolume: true},
	})
	fencers := []*harness.Machine{h.Machine("cp-1"), h.Machine("cp-2")}
	pids := map[string]int{}
	for _, f := range fencers {
		pid, err := f.AgentPID()
		must(t, err)
		pids[f.Name] = pid
	}
	file := h.FencerConfigFile()
	text, err := os.ReadFile(file)
	must(t, err)

	// w-1's BMC "moves": a relay on another port of the BMC network
	// forwards to its simulator, so a read at the new address reaches the
	// machine, and the relay counts the requests that came its way.
	addr, port := bmcOf(t, string(text), "w-1")
	relay := startUDPRelay(t, addr, port)
	moved := regexp.MustCompile(`(\{name: w-1, address: [^,]+, port: )\d+`).ReplaceAllString(string(text), fmt.Sprintf("${1}%d", relay.port))
	if moved == string(text) {
		t.Fatal("w-1's BMC entry not found in the fencers' configuration")
	}
	must(t, h.SetFencerConfig(moved))
	waitReload(t, fencers, `fenced_config_reload_total{result="applied"}`, 1)

	must(t, h.Machine("w-1").PowerLoss())
	n := waitTaint(ctx, t, h, "w-1", true)
	ev, ok, err := taint.EvidenceOf(n)
	if err != nil || !ok || ev.BMC == nil {
		t.Fatalf("w-1's evidence: %+v, %v, %v", ev, ok, err)
	}
	if want := fmt.Sprintf("ipmi://%s", net.JoinHostPort(addr, fmt.Sprint(relay.port))); ev.BMC.Endpoint != want {
		t.Errorf("w-1 was read at %s, want the new address %s", ev.BMC.Endpoint, want)
	}
	if relay.packets.Load() == 0 {
		t.Error("no request reached w-1's BMC at its new address")
	}

	// An invalid change: refused, said, and the configuration in force
	// (with w-1's new address) stays.
	invalid := strings.Replace(moved, "{name: w-2, address:", "{name: w-2, adress:", 1)
	must(t, h.SetFencerConfig(invalid))
	waitReload(t, fencers, `fenced_config_reload_total{result="refused"}`, 1)
	for _, f := range fencers {
		if v := metricValue(t, f, "fenced_config_last_reload_success"); v != 0 {
			t.Errorf("%s: fenced_config_last_reload_success = %v after the invalid file", f.Name, v)
		}
		_, err := h.WaitEvent(ctx, "default", f.Name, vocab.EventConfigurationRefused, "adress", podTimeout)
		must(t, err)
	}
	must(t, h.Machine("w-2").PowerLoss())
	waitTaint(ctx, t, h, "w-2", true)

	for _, f := range fencers {
		pid, err := f.AgentPID()
		must(t, err)
		if pid != pids[f.Name] {
			t.Errorf("%s's agent restarted (pid %d, then %d)", f.Name, pids[f.Name], pid)
		}
	}
}

// bmcOf is node's BMC address and port in the fencers' configuration.
func bmcOf(t *testing.T, text, node string) (string, int) {
	t.Helper()
	m := regexp.MustCompile(`\{name: ` + regexp.QuoteMeta(node) + `, address: ([^,]+), port: (\d+)`).FindStringSubmatch(text)
	if m == nil {
		t.Fatalf("no BMC entry of %s in:\n%s", node, text)
	}
	var port int
	if _, err := fmt.Sscan(m[2], &port); err != nil {
		t.Fatal(err)
	}
	return m[1], port
}

// waitReload waits until every fencer's series is at least want.
func waitReload(t *testing.T, fencers []*harness.Machine, series string, want float64) {
	t.Helper()
	for _, f := range fencers {
		poll.Until(t, time.Minute, f.Name+": "+series, func() bool {
			text, err := f.Metrics()
			if err != nil {
				return false
			}
			v, err := seriesValue(text, series)
			return err == nil && v >= want
		})
	}
}

// udpRelay forwards UDP datagrams from its port to a target and the
// answers back, one upstream socket per client (an IPMI session is bound
// to its client's address).
type udpRelay struct {
	port    int
	packets atomic.Int64
}

func startUDPRelay(t *testing.T, addr string, target int) *udpRelay {
	t.Helper()
	port, err := ipmisim.FreePort("udp", addr)
	must(t, err)
	lis, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.ParseIP(addr), Port: port})
	must(t, err)
	to := &net.UDPAddr{IP: net.ParseIP(addr), Port: target}
	r := &udpRelay{port: port}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() {
		cancel()
		_ = lis.Close()
		wg.Wait()
	})
	upstreams := map[string]*net.UDPConn{}
	wg.Add(1)
	go func() {
		defer wg.Done()
		buf := make([]byte, 64<<10)
		for {
			n, from, err := lis.ReadFromUDP(buf)
			if err != nil {
				for _, up := range upstreams {
					_ = up.Close()
				}
				return
			}
			r.packets.Add(1)
			up, ok := upstreams[from.String()]
			if !ok {
				if up, err = net.DialUDP("udp", nil, to); err != nil {
					continue
				}
				upstreams[from.String()] = up
				wg.Add(1)
				go func() {
					defer wg.Done()
					back := make([]byte, 64<<10)
					for ctx.Err() == nil {
						n, err := up.Read(back)
						if errors.Is(err, net.ErrClosed) {
							return
						}
						if err == nil {
							_, _ = lis.WriteToUDP(back[:n], from)
						}
					}
				}()
			}
			_, _ = up.Write(buf[:n])
		}
	}()
	return r
}
