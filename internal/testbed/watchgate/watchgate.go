// Package watchgate is a proxy between one client of the API server — the
// test cluster's kube-controller-manager — and the API server, that holds
// back on demand what that client's informers learn of one resource: the
// bytes of the watches already streaming are kept, and new lists and
// watches of it wait, until Release. Everything else goes through.
//
// It makes an informer lag on purpose, the way a slow or broken watch
// makes one lag in a real cluster (a watch cache behind etcd, a watch
// re-established after a backoff of up to 30 s, a loaded process), and it
// lags one resource only: the controller-manager's Node informer stands
// still while its Pod and VolumeAttachment informers go on, which a
// SIGSTOP of the whole process cannot do. Test-only.
package watchgate

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync"
	"time"

	"k8s.io/client-go/rest"
)

// Gate is the proxy. The zero value is not usable; call New.
type Gate struct {
	mu       sync.Mutex
	held     map[string]chan struct{} // collection path → closed on Release
	streams  map[*gatedWriter]string  // responses of held paths, by path
	srv      *http.Server
	listener net.Listener
}

// New returns a Gate that holds nothing; Serve starts it.
func New() *Gate {
	return &Gate{held: map[string]chan struct{}{}, streams: map[*gatedWriter]string{}}
}

// Serve proxies to the API server cfg reaches, as cfg's user, on a new
// loopback port, and returns the URL its client is to use: plain HTTP
// without credentials (the proxy adds cfg's). Its signature is that of
// cluster.Options.ControllerManagerVia. Close stops it.
func (g *Gate) Serve(cfg *rest.Config) (string, error) {
	upstream, err := url.Parse(cfg.Host)
	if err != nil {
		return "", err
	}
	transport, err := rest.TransportFor(cfg)
	if err != nil {
		return "", err
	}
	proxy := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(upstream)
			r.Out.Host = upstream.Host
		},
		Transport: transport,
		// Watches stream: every write goes out at once (unless held).
		FlushInterval: -1,
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	g.listener = ln
	g.srv = &http.Server{Handler: g.handler(proxy), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = g.srv.Serve(ln) }()
	return "http://" + ln.Addr().String(), nil
}

// Close stops the proxy, releasing everything held first.
func (g *Gate) Close() {
	g.mu.Lock()
	paths := make([]string, 0, len(g.held))
	for p := range g.held {
		paths = append(paths, p)
	}
	g.mu.Unlock()
	for _, p := range paths {
		g.Release(p)
	}
	if g.srv != nil {
		_ = g.srv.Close()
	}
}

// Hold holds back the collection at path, e.g. "/api/v1/nodes": what its
// watches stream from now on is kept, and new lists and watches of it wait.
// Reads of single objects (path + "/name") go through: they are what a
// controller reads live, not what its informer knows.
func (g *Gate) Hold(path string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if _, ok := g.held[path]; !ok {
		g.held[path] = make(chan struct{})
	}
}

// Release lets path through again: what its watches kept goes out, in
// order, and the requests that waited go on.
func (g *Gate) Release(path string) {
	g.mu.Lock()
	ch, ok := g.held[path]
	delete(g.held, path)
	var writers []*gatedWriter
	for w, p := range g.streams {
		if p == path {
			writers = append(writers, w)
		}
	}
	g.mu.Unlock()
	if !ok {
		return
	}
	close(ch)
	for _, w := range writers {
		w.flushKept()
	}
}

// Held reports how many bytes of path's watches are being kept now.
func (g *Gate) Held(path string) int {
	g.mu.Lock()
	var writers []*gatedWriter
	for w, p := range g.streams {
		if p == path {
			writers = append(writers, w)
		}
	}
	g.mu.Unlock()
	n := 0
	for _, w := range writers {
		w.mu.Lock()
		n += w.kept.Len()
		w.mu.Unlock()
	}
	return n
}

// waitFor returns the channel closed when path is released, or nil when
// path is not held.
func (g *Gate) waitFor(path string) chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.held[path]
}

func (g *Gate) handler(proxy http.Handler) http.Handler {
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet {
			proxy.ServeHTTP(rw, r)
			return
		}
		path := r.URL.Path
		if !g.wait(r.Context(), path) {
			return
		}
		w := &gatedWriter{ResponseWriter: rw, gate: g, path: path}
		g.mu.Lock()
		g.streams[w] = path
		g.mu.Unlock()
		defer func() {
			g.mu.Lock()
			delete(g.streams, w)
			g.mu.Unlock()
		}()
		proxy.ServeHTTP(w, r)
		// A watch the API server ended while held (its timeout) keeps
		// what it streamed until the release, then hands it over.
		if g.wait(r.Context(), path) {
			w.flushKept()
		}
	})
}

// wait blocks while path is held; false when the client gave up first.
func (g *Gate) wait(ctx context.Context, path string) bool {
	ch := g.waitFor(path)
	if ch == nil {
		return true
	}
	select {
	case <-ch:
		return true
	case <-ctx.Done():
		return false
	}
}

// gatedWriter keeps what is written to a response of a held path.
type gatedWriter struct {
	http.ResponseWriter
	gate *Gate
	path string

	mu   sync.Mutex
	kept bytes.Buffer
}

func (w *gatedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.gate.waitFor(w.path) != nil {
		return w.kept.Write(p)
	}
	if err := w.flushKeptLocked(); err != nil {
		return 0, err
	}
	return w.ResponseWriter.Write(p)
}

// Flush sends what was written, unless the path is held.
func (w *gatedWriter) Flush() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.gate.waitFor(w.path) != nil {
		return
	}
	_ = w.flushKeptLocked()
	_ = http.NewResponseController(w.ResponseWriter).Flush()
}

// flushKept sends what was kept.
func (w *gatedWriter) flushKept() {
	w.mu.Lock()
	defer w.mu.Unlock()
	_ = w.flushKeptLocked()
	_ = http.NewResponseController(w.ResponseWriter).Flush()
}

func (w *gatedWriter) flushKeptLocked() error {
	if w.kept.Len() == 0 {
		return nil
	}
	_, err := w.ResponseWriter.Write(w.kept.Bytes())
	w.kept.Reset()
	if err != nil {
		return fmt.Errorf("watchgate: %w", err)
	}
	return nil
}
