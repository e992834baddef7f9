package watchgate

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"

	"fenced.io/fenced/internal/testbed/cluster"
	"fenced.io/fenced/internal/testbed/poll"
)

// upstream streams numbered lines on the collection (a watch), one every
// 5 ms, answers a single object, and counts what it sent.
func upstream(t *testing.T) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var sent atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/api/v1/nodes" && r.URL.Query().Get("watch") == "true":
			w.WriteHeader(http.StatusOK)
			for i := 0; ; i++ {
				if _, err := fmt.Fprintf(w, "%d\n", i); err != nil {
					return
				}
				w.(http.Flusher).Flush()
				sent.Add(1)
				select {
				case <-r.Context().Done():
					return
				case <-time.After(5 * time.Millisecond):
				}
			}
		case r.URL.Path == "/api/v1/nodes":
			fmt.Fprintln(w, "list")
		default:
			fmt.Fprintln(w, "object "+r.URL.Path)
		}
	}))
	t.Cleanup(srv.Close)
	return srv, &sent
}

func get(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Error(err)
		return ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// TestHoldKeepsTheWatchAndTheList: while the collection is held, its watch
// delivers nothing and a list waits, a single object goes through; on
// release the watch delivers what was kept, in order, and goes on, and the
// list is answered.
func TestHoldKeepsTheWatchAndTheList(t *testing.T) {
	srv, sent := upstream(t)
	g := New()
	proxyURL, err := g.Serve(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(g.Close)

	resp, err := http.Get(proxyURL + "/api/v1/nodes?watch=true")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	lines := make(chan int, 100000)
	go func() {
		s := bufio.NewScanner(resp.Body)
		for s.Scan() {
			n, _ := strconv.Atoi(s.Text())
			lines <- n
		}
		close(lines)
	}()
	next := 0
	read := func() int { // reads what arrived, checking the order
		got := 0
		for {
			select {
			case n := <-lines:
				if n != next {
					t.Fatalf("line %d after %d: out of order or lost", n, next-1)
				}
				next++
				got++
			default:
				return got
			}
		}
	}
	poll.Until(t, 10*time.Second, "the watch streams", func() bool { read(); return next >= 5 })

	g.Hold("/api/v1/nodes")
	heldAt := sent.Load()
	poll.Until(t, 10*time.Second, "the proxy keeps what the upstream sends", func() bool { return g.Held("/api/v1/nodes") > 0 })
	read()
	arrived := next
	listed := make(chan string, 1)
	go func() { listed <- get(t, proxyURL+"/api/v1/nodes") }()
	if got := get(t, proxyURL+"/api/v1/nodes/n1"); got != "object /api/v1/nodes/n1\n" {
		t.Fatalf("a single object while held: %q", got)
	}
	// As long as we look (the upstream sends 20 lines meanwhile), nothing
	// more arrives and the list is not answered.
	poll.Until(t, 10*time.Second, "the upstream sends 20 more lines", func() bool { return sent.Load() >= heldAt+20 })
	if read(); next > arrived+1 { // one line may have been on its way when Hold was called
		t.Fatalf("%d lines arrived while held", next-arrived)
	}
	select {
	case l := <-listed:
		t.Fatalf("list answered while held: %q", l)
	default:
	}

	g.Release("/api/v1/nodes")
	poll.Until(t, 10*time.Second, "what was kept arrives, in order", func() bool { read(); return int64(next) >= heldAt+20 })
	if l := <-listed; !strings.Contains(l, "list") {
		t.Fatalf("list after the release: %q", l)
	}
	if g.Held("/api/v1/nodes") != 0 {
		t.Fatal("bytes still kept after the release")
	}
}

// TestGateInFrontOfTheControllerManager puts the gate between a real
// controller-manager and its API server: with the Node collection held,
// the node lifecycle controller does not see a cordon (no
// node.kubernetes.io/unschedulable taint) for as long as we look, although
// the API server has it and single reads go through; released, it answers.
func TestGateInFrontOfTheControllerManager(t *testing.T) {
	g := New()
	t.Cleanup(g.Close)
	ctx, c := cluster.StartForTest(t, cluster.Options{ControllerManagerVia: g.Serve})
	nodes := c.Client().CoreV1().Nodes()
	if _, err := nodes.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "gated"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	answered := func() bool {
		n, err := nodes.Get(ctx, "gated", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, tn := range n.Spec.Taints {
			if tn.Key == corev1.TaintNodeUnschedulable {
				return true
			}
		}
		return false
	}
	cordon := func(on bool) {
		patch := fmt.Sprintf(`{"spec":{"unschedulable":%v}}`, on)
		if _, err := nodes.Patch(ctx, "gated", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// Through the gate, the controller-manager works: it answers a cordon.
	cordon(true)
	poll.Until(t, time.Minute, "the node lifecycle controller answers the cordon", answered)
	cordon(false)
	poll.Until(t, time.Minute, "the node lifecycle controller answers the uncordon", func() bool { return !answered() })

	g.Hold("/api/v1/nodes")
	cordon(true)
	for since := time.Now(); time.Since(since) < 3*time.Second; time.Sleep(100 * time.Millisecond) {
		if answered() {
			t.Fatal("the node lifecycle controller answered a cordon its informer was not shown")
		}
	}
	released := time.Now()
	g.Release("/api/v1/nodes")
	poll.Until(t, time.Minute, "the node lifecycle controller answers once released", answered)
	t.Logf("answered %s after the release", time.Since(released).Round(time.Millisecond))
}
