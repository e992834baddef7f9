// Package cluster starts a real Kubernetes control plane — etcd,
// kube-apiserver, kube-controller-manager and kube-scheduler — as local
// processes for tests, and stops it again without leaving anything behind.
//
// No container runtime is needed: the Kubernetes binaries come from
// hack/kube-binaries.sh (built from the Go module proxy and cached outside
// the repo, see BinDir), etcd from Debian's etcd-server package
// (hack/install-deps.sh). Everything listens on 127.0.0.1 on free ports, so
// clusters of parallel tests don't collide; only the API server can be put on
// another local address (Options.BindAddress) for clients in network
// namespaces.
//
// Typical use, in a test:
//
//	ctx, c := cluster.StartForTest(t, cluster.Options{})
//	client := c.Client()
//
// With a testing.TB, Start registers a cleanup that stops the cluster and, if
// the test failed, logs the last lines of every component's log.
package cluster

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"fenced.io/fenced/internal/testbed/ports"
)

// Component names, as used for log files (LogsDir/<name>.log) and messages.
const (
	Etcd              = "etcd"
	APIServer         = "kube-apiserver"
	ControllerManager = "kube-controller-manager"
	Scheduler         = "kube-scheduler"
)

// DefaultControllers are the kube-controller-manager controllers the harness
// runs (names as v1.34's --controllers accepts them). Besides what the
// out-of-service taint relies on (attach/detach, pod GC, taint eviction, node
// lifecycle) it has what workloads need to come up: the workload controllers,
// service accounts and their tokens, namespace and garbage collection, and
// the PV/PVC binder and protection controllers (a pod with an unbound claim
// is never scheduled, and without the protection controllers a deleted PVC
// keeps its finalizer for ever).
var DefaultControllers = []string{
	"persistentvolume-attach-detach-controller",
	"pod-garbage-collector-controller",
	"taint-eviction-controller",
	"node-lifecycle-controller",
	"replicaset-controller",
	"deployment-controller",
	"statefulset-controller",
	"daemonset-controller",
	"serviceaccount-token-controller",
	"serviceaccount-controller",
	"namespace-controller",
	"garbage-collector-controller",
	"persistentvolume-binder-controller",
	"persistentvolume-protection-controller",
	"persistentvolumeclaim-protection-controller",
	"root-ca-certificate-publisher-controller",
}

// ServiceClusterIPRange is the API server's --service-cluster-ip-range. It is
// taken from the top of 198.18.0.0/15 (the benchmarking range the harness
// addresses its test hosts in, docs/design.md section 7; the hosts use the low
// end) rather than Kubernetes' default 10.0.0.0/24 so that nothing a test runs can
// ever address a private network, even by mistake. Service IPs are virtual:
// there is no kube-proxy, so no traffic goes there.
const ServiceClusterIPRange = "198.19.255.0/24"

// Options configures Start. The zero value is a working default: Kubernetes'
// own timings, DefaultControllers, and binaries found or built for
// KubeVersion().
type Options struct {
	// KubeVersion selects the cached binaries (default: KubeVersion()).
	KubeVersion string
	// BinDir, if set, holds the Kubernetes binaries to use instead of the
	// cache; nothing is built then.
	BinDir string
	// Etcd is the etcd binary (default: "etcd" on PATH, from etcd-server).
	Etcd string

	// Controllers replaces DefaultControllers (kube-controller-manager
	// --controllers; "*" means upstream's default set).
	Controllers []string
	// Extra flags, appended after the harness's own so they win
	// (e.g. "--node-monitor-grace-period=20s" for the controller manager).
	// Don't pass --controllers here: a repeated list flag appends, use
	// Controllers instead.
	APIServerArgs, ControllerManagerArgs, SchedulerArgs []string
	// NoScheduler leaves kube-scheduler out (tests that bind pods by hand).
	NoScheduler bool
	// ControllerManagerVia, if set, is called once the API server is
	// ready, with the admin client configuration, and returns the URL the
	// controller manager reaches the API server at instead: a proxy in
	// between (internal/testbed/watchgate), spoken to in plain HTTP
	// without credentials. Its own serving (authentication and
	// authorization delegation) still goes straight to the API server.
	ControllerManagerVia func(*rest.Config) (string, error)
	// BindAddress is the address kube-apiserver listens on and advertises
	// (default 127.0.0.1). Set it to the host side of a test bridge so that
	// processes in network namespaces reach the API server; it must be an
	// address of this machine, and not a wildcard. etcd, the controller
	// manager and the scheduler stay on 127.0.0.1 whatever it is.
	BindAddress string

	// ReadyTimeout bounds each component's wait for readiness
	// (default 2 minutes: generous for a loaded 2-core CI machine, where
	// kube-apiserver usually needs 5–15 s).
	ReadyTimeout time.Duration
	// StopGrace is how long Stop waits after SIGTERM before SIGKILL
	// (default 5 s).
	StopGrace time.Duration
	// Dir is the working directory (data, keys, logs). Default: a new temp
	// dir, removed by Stop — except its logs/ after a failed test, and all of
	// it if FENCED_KEEP_CLUSTER=1 is set in the environment.
	Dir string
	// Logf receives progress messages (default: t.Logf, or the log package
	// when Start has no testing.TB).
	Logf func(format string, args ...any)
}

// Cluster is a running control plane. Its exported fields are read-only.
type Cluster struct {
	// Dir is the cluster's working directory.
	Dir string
	// LogsDir holds <component>.log for every component: its stdout and
	// stderr, headed by its command line.
	LogsDir string
	// Kubeconfig is the path of an admin kubeconfig (token in group
	// system:masters), usable by kubectl and by processes a test starts.
	Kubeconfig string
	// Host is the API server's URL, https://<BindAddress>:<port>.
	Host string
	// CAFile is the PEM file that verifies the API server's serving cert.
	CAFile string
	// EtcdURL is the client URL of etcd.
	EtcdURL string
	// Version is the Kubernetes release the binaries report, e.g. v1.34.4.
	Version string
	// BinDir is where the Kubernetes binaries were taken from (kubemark is
	// there too, for tests that start hollow nodes).
	BinDir string
	// HollowKubelet is the path of our hollow kubelet (internal/testbed/hollow-kubelet),
	// the kubelet of the harness's machines.
	HollowKubelet string

	opts       Options
	token      string
	ca         *certAuthority
	caPEM      []byte // the API server's serving CA
	restConfig *rest.Config
	client     kubernetes.Interface

	apiMu       sync.Mutex // serialises StopAPIServer and StartAPIServer
	mu          sync.Mutex
	procs       []*process     // in start order
	api         *process       // the current kube-apiserver (also in procs)
	apiPath     string         // kube-apiserver binary, for StartAPIServer
	apiArgs     []string       // its command line, for StartAPIServer
	apiDown     bool           // StopAPIServer stopped it and it was not started again
	stopped     bool           // Stop has begun
	restarts    map[string]int // components restarted after they exited (restartWhenItExits)
	failed      bool           // the test failed: keep logs
	stop        sync.Once
	unInterrupt func() // unregisters the signal-time cleanup
}

// Start starts etcd, kube-apiserver, kube-controller-manager and
// kube-scheduler and waits until each is ready. If t is not nil, a cleanup
// stops the cluster at the end of the test and, if the test failed, logs the
// tail of each component's log. On error everything already started is
// stopped, the error names the component and its log file, and the returned
// Cluster, when not nil, still tells Dir and LogPath (the logs are kept).
func Start(ctx context.Context, t testing.TB, opts Options) (c *Cluster, err error) {
	if t != nil {
		t.Helper()
	}
	if opts.Logf == nil {
		if t != nil {
			opts.Logf = t.Logf
		} else {
			opts.Logf = log.Printf
		}
	}
	if opts.KubeVersion == "" {
		opts.KubeVersion = KubeVersion()
	}
	if opts.Controllers == nil {
		opts.Controllers = DefaultControllers
	}
	if opts.ReadyTimeout == 0 {
		opts.ReadyTimeout = 2 * time.Minute
	}
	if opts.StopGrace == 0 {
		opts.StopGrace = 5 * time.Second
	}
	if opts.BindAddress == "" {
		opts.BindAddress = "127.0.0.1"
	}
	if ip := net.ParseIP(opts.BindAddress); ip == nil || ip.IsUnspecified() {
		// A wildcard would expose the API server (admin token in a file)
		// on every interface of the machine.
		return nil, fmt.Errorf("Options.BindAddress %q: want one IP address of this machine", opts.BindAddress)
	}
	began := time.Now()

	binDir := opts.BinDir
	if binDir == "" {
		if binDir, err = EnsureBinaries(ctx, opts.KubeVersion, opts.Logf); err != nil {
			return nil, err
		}
	} else if missing := missingBinaries(binDir); len(missing) > 0 {
		return nil, fmt.Errorf("Options.BinDir %s lacks %s", binDir, strings.Join(missing, ", "))
	}
	etcdPath := opts.Etcd
	if etcdPath == "" {
		etcdPath = "etcd"
	}
	if etcdPath, err = exec.LookPath(etcdPath); err != nil {
		return nil, fmt.Errorf("etcd not found (%w): install Debian's etcd-server, e.g. with hack/install-deps.sh", err)
	}

	dir := opts.Dir
	if dir == "" {
		sweepStale()
		if dir, err = os.MkdirTemp("", dirPrefix); err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(dir, ownerFile), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
			return nil, err
		}
	}
	hollow, err := HollowKubeletName()
	if err != nil {
		return nil, err
	}
	c = &Cluster{
		Dir:           dir,
		LogsDir:       filepath.Join(dir, "logs"),
		Version:       opts.KubeVersion,
		BinDir:        binDir,
		HollowKubelet: filepath.Join(binDir, hollow),
		opts:          opts,
	}
	// On Ctrl-C the signal handler kills the processes; this removes the
	// data they leave (etcd's WAL is 64 MiB) and says where the logs are.
	c.unInterrupt = OnInterrupt(func() {
		if c.removeData() {
			fmt.Fprintf(os.Stderr, "internal/testbed/cluster: interrupted; control plane killed, logs kept in %s\n", c.LogsDir)
		}
	})
	if t != nil {
		t.Cleanup(func() {
			if t.Failed() {
				c.markFailed()
				c.DumpLogs(t)
			}
			c.Stop()
		})
	}
	defer func() {
		if err != nil {
			// Keep the logs the error points at; without a t (whose cleanup
			// shows them) show their tails now.
			c.markFailed()
			if t == nil {
				c.dumpLogs(opts.Logf)
			}
			c.Stop()
		}
	}()

	if err := c.prepare(); err != nil {
		return c, err
	}
	ports, err := freePorts("127.0.0.1", 4)
	if err != nil {
		return c, err
	}
	etcdClient, etcdPeer, kcmPort, schedPort := ports[0], ports[1], ports[2], ports[3]
	apiPorts, err := freePorts(opts.BindAddress, 1)
	if err != nil {
		return c, fmt.Errorf("Options.BindAddress: %w", err)
	}
	apiHostPort := net.JoinHostPort(opts.BindAddress, strconv.Itoa(apiPorts[0]))
	c.EtcdURL = "http://127.0.0.1:" + strconv.Itoa(etcdClient)
	c.Host = "https://" + apiHostPort

	// etcd. The data dir lives in the cluster dir; a fresh, single-member
	// cluster every time.
	t0 := time.Now()
	peerURL := "http://127.0.0.1:" + strconv.Itoa(etcdPeer)
	etcd, err := c.start(Etcd, etcdPath, []string{
		"--name=default",
		"--data-dir=" + filepath.Join(dir, "etcd"),
		"--listen-client-urls=" + c.EtcdURL,
		"--advertise-client-urls=" + c.EtcdURL,
		"--listen-peer-urls=" + peerURL,
		"--initial-advertise-peer-urls=" + peerURL,
		"--initial-cluster=default=" + peerURL,
		"--initial-cluster-state=new",
		"--logger=zap",
	})
	if err != nil {
		return c, err
	}
	if err := c.waitReady(ctx, etcd, c.EtcdURL+"/health", ""); err != nil {
		return c, err
	}
	etcdTook := time.Since(t0)

	// kube-apiserver.
	t0 = time.Now()
	pki := filepath.Join(dir, "pki")
	apiCertDir := filepath.Join(dir, APIServer)
	c.CAFile = filepath.Join(apiCertDir, "apiserver.crt")
	args := []string{
		"--etcd-servers=" + c.EtcdURL,
		"--bind-address=" + opts.BindAddress,
		// The kubernetes Service's endpoint would be the advertise address;
		// loopback is not a valid endpoint, so the endpoint reconciler is
		// off (nothing in these tests uses that Service).
		"--advertise-address=" + opts.BindAddress,
		"--endpoint-reconciler-type=none",
		"--secure-port=" + strconv.Itoa(apiPorts[0]),
		// Self-signed serving cert (and its CA) generated into --cert-dir for
		// the bind address; the kubeconfig trusts that file.
		"--cert-dir=" + apiCertDir,
		"--token-auth-file=" + filepath.Join(pki, "tokens.csv"),
		"--client-ca-file=" + filepath.Join(pki, "ca.crt"),
		"--requestheader-client-ca-file=" + filepath.Join(pki, "front-proxy-ca.crt"),
		"--requestheader-allowed-names=front-proxy-client",
		"--requestheader-username-headers=X-Remote-User",
		"--requestheader-group-headers=X-Remote-Group",
		"--requestheader-extra-headers-prefix=X-Remote-Extra-",
		"--authorization-mode=Node,RBAC",
		// Default admission plus NodeRestriction, as on a real cluster, so
		// node identities (UserKubeconfig("system:node:…")) are held to it.
		"--enable-admission-plugins=NodeRestriction",
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + filepath.Join(pki, "sa.pub"),
		"--service-account-signing-key-file=" + filepath.Join(pki, "sa.key"),
		"--service-cluster-ip-range=" + ServiceClusterIPRange,
		// CSI node plugins and similar test workloads ask for privileged
		// containers; the hollow kubelets run nothing for real.
		"--allow-privileged=true",
	}
	c.apiPath, c.apiArgs = filepath.Join(binDir, APIServer), append(args, opts.APIServerArgs...)
	api, err := c.start(APIServer, c.apiPath, c.apiArgs)
	if err != nil {
		return c, err
	}
	c.api = api
	if err := c.waitReady(ctx, api, c.Host+"/readyz", c.token); err != nil {
		return c, err
	}
	if err := c.connect(ctx); err != nil {
		return c, fmt.Errorf("%s is ready but the admin client cannot use it: %w (log: %s)", APIServer, err, api.logPath)
	}
	apiTook := time.Since(t0)

	// kube-controller-manager and kube-scheduler, in parallel: neither
	// depends on the other.
	t0 = time.Now()
	common := []string{
		"--kubeconfig=" + c.Kubeconfig,
		// Delegated authn/authz for their own /healthz and /metrics servers;
		// without these they log warnings and refuse some requests.
		"--authentication-kubeconfig=" + c.Kubeconfig,
		"--authorization-kubeconfig=" + c.Kubeconfig,
		"--bind-address=127.0.0.1",
		// One instance each: no leader election, so a restarted component
		// doesn't wait out its predecessor's lease (15 s).
		"--leader-elect=false",
	}
	kcmArgs := append(append([]string(nil), common...),
		"--secure-port="+strconv.Itoa(kcmPort),
		"--cert-dir="+filepath.Join(dir, ControllerManager),
		"--controllers="+strings.Join(opts.Controllers, ","),
		"--use-service-account-credentials=false",
		"--service-account-private-key-file="+filepath.Join(pki, "sa.key"),
		"--root-ca-file="+c.CAFile,
		// Lets a test enable csrsigning-controller and get certificates
		// the API server trusts.
		"--cluster-signing-cert-file="+filepath.Join(pki, "ca.crt"),
		"--cluster-signing-key-file="+filepath.Join(pki, "ca.key"),
	)
	if opts.ControllerManagerVia != nil {
		kubeconfig, err := c.controllerManagerVia(opts.ControllerManagerVia)
		if err != nil {
			return c, fmt.Errorf("Options.ControllerManagerVia: %w", err)
		}
		kcmArgs = append(kcmArgs, "--kubeconfig="+kubeconfig) // the last one wins
	}
	kcm, err := c.startRestarting(ControllerManager, filepath.Join(binDir, ControllerManager), append(kcmArgs, opts.ControllerManagerArgs...))
	if err != nil {
		return c, err
	}
	var sched *process
	if !opts.NoScheduler {
		schedArgs := append(append([]string(nil), common...),
			"--secure-port="+strconv.Itoa(schedPort),
			"--cert-dir="+filepath.Join(dir, Scheduler),
		)
		if sched, err = c.startRestarting(Scheduler, filepath.Join(binDir, Scheduler), append(schedArgs, opts.SchedulerArgs...)); err != nil {
			return c, err
		}
	}
	var wg sync.WaitGroup
	errs := make([]error, 2)
	wg.Add(1)
	go func() {
		defer wg.Done()
		errs[0] = c.waitReady(ctx, kcm, "https://127.0.0.1:"+strconv.Itoa(kcmPort)+"/healthz", "")
	}()
	if sched != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[1] = c.waitReady(ctx, sched, "https://127.0.0.1:"+strconv.Itoa(schedPort)+"/healthz", "")
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return c, err
	}

	opts.Logf("control plane %s up in %.1fs (etcd %.1fs, kube-apiserver %.1fs, controller-manager/scheduler %.1fs); API %s, logs %s",
		c.Version, time.Since(began).Seconds(), etcdTook.Seconds(), apiTook.Seconds(), time.Since(t0).Seconds(), c.Host, c.LogsDir)
	return c, nil
}

// controllerManagerVia asks via where the controller manager is to reach
// the API server, and writes the kubeconfig that says so.
func (c *Cluster) controllerManagerVia(via func(*rest.Config) (string, error)) (string, error) {
	server, err := via(c.RESTConfig())
	if err != nil {
		return "", err
	}
	path := filepath.Join(c.Dir, "controller-manager-via.kubeconfig")
	return path, writeKubeconfig(path, server, nil, kubeconfigUser{name: "via"})
}

// MustStart is Start for tests that cannot go on without a cluster: it fails
// t at once on error.
func MustStart(ctx context.Context, t testing.TB, opts Options) *Cluster {
	t.Helper()
	c, err := Start(ctx, t, opts)
	if err != nil {
		t.Fatalf("starting the control plane: %v", err)
	}
	return c
}

// TestTimeout bounds the context of TestContext and StartForTest. Generous:
// on a machine without cached binaries Start first builds them (~6 min).
const TestTimeout = 15 * time.Minute

// SkipShortMessage is why a test that starts a control plane skips under
// -short.
const SkipShortMessage = "starts a real Kubernetes control plane; skipped with -short"

// TestContext returns a context for a test that starts a control plane or
// builds its binaries: its deadline is TestTimeout away, and it is
// cancelled by t.Cleanup, so that it outlives parallel subtests (a defer in
// the test function would cancel it before they run).
func TestContext(t testing.TB) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), TestTimeout)
	t.Cleanup(cancel)
	return ctx
}

// StartForTest is the preamble of every test that needs a control plane:
// it skips t under -short (SkipShortMessage), starts the cluster under a
// TestContext and fails t at once if it cannot (MustStart). The cluster is
// stopped at t's cleanup; the context is cancelled after that. The context
// is returned for the test's own API calls.
func StartForTest(t testing.TB, opts Options) (context.Context, *Cluster) {
	t.Helper()
	if testing.Short() {
		t.Skip(SkipShortMessage)
	}
	ctx := TestContext(t)
	return ctx, MustStart(ctx, t, opts)
}

// prepare creates the directories, keys and token file.
func (c *Cluster) prepare() error {
	pki := filepath.Join(c.Dir, "pki")
	for _, d := range []string{c.LogsDir, pki} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return err
		}
	}
	var err error
	if c.ca, err = newCA("fenced-test-client-ca"); err != nil {
		return fmt.Errorf("client CA: %w", err)
	}
	if err := os.WriteFile(filepath.Join(pki, "ca.crt"), c.ca.certPEM, 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(pki, "ca.key"), c.ca.keyPEM, 0o600); err != nil {
		return err
	}
	// A front-proxy CA for --requestheader-client-ca-file. Nothing uses
	// request-header auth here, and the key is thrown away so nothing can;
	// but without it the API server publishes an empty bundle in
	// kube-system/extension-apiserver-authentication, and the controller
	// manager and scheduler log "missing content for CA bundle" errors.
	frontProxy, err := newCA("fenced-test-front-proxy-ca")
	if err != nil {
		return fmt.Errorf("front-proxy CA: %w", err)
	}
	if err := os.WriteFile(filepath.Join(pki, "front-proxy-ca.crt"), frontProxy.certPEM, 0o644); err != nil {
		return err
	}
	if err := writeServiceAccountKey(filepath.Join(pki, "sa.key"), filepath.Join(pki, "sa.pub")); err != nil {
		return fmt.Errorf("service-account key: %w", err)
	}
	// token,user,uid,"groups": system:masters passes every authorization
	// check, RBAC or not.
	c.token = randomToken()
	line := fmt.Sprintf("%s,admin,admin,\"system:masters\"\n", c.token)
	return os.WriteFile(filepath.Join(pki, "tokens.csv"), []byte(line), 0o600)
}

// start starts one component and records it for Stop.
func (c *Cluster) start(name, path string, args []string) (*process, error) {
	p, err := startProcess(name, filepath.Join(c.LogsDir, name+".log"), path, args, childEnv())
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.procs = append(c.procs, p)
	c.mu.Unlock()
	return p, nil
}

// childEnv is the test's environment minus what would point a component at
// something other than this cluster: KUBECONFIG, and ETCD_* (etcd reads every
// flag from ETCD_<FLAG> too).
func childEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "KUBECONFIG=") || strings.HasPrefix(kv, "ETCD_") {
			continue
		}
		env = append(env, kv)
	}
	return env
}

// waitReady polls url until it answers 200, the process exits, or
// ReadyTimeout passes. The error names the component, the last answer and the
// log, with the log's last lines, since that is where the reason is.
func (c *Cluster) waitReady(ctx context.Context, p *process, url, token string) error {
	// The components serve self-signed certificates generated at startup;
	// this probe only asks a process we started on loopback whether it is
	// up, so it doesn't verify them. Real clients do (see connect).
	hc := &http.Client{
		Timeout:   5 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}, //nolint:gosec // loopback readiness probe, see above
	}
	defer hc.CloseIdleConnections()
	deadline := time.Now().Add(c.opts.ReadyTimeout)
	last := "no answer yet"
	for {
		if done, exitErr := p.exited(); done {
			return fmt.Errorf("%s exited before it was ready (%v); log %s ends:\n%s", p.name, exitErr, p.logPath, p.tail(20))
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := hc.Do(req)
		if err == nil {
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = fmt.Sprintf("HTTP %d: %s", resp.StatusCode, strings.TrimSpace(string(body)))
		} else {
			last = err.Error()
		}
		if ctx.Err() != nil {
			return fmt.Errorf("%s: gave up waiting for %s: %w; log %s", p.name, url, ctx.Err(), p.logPath)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready after %s: %s last said %s; log %s ends:\n%s",
				p.name, c.opts.ReadyTimeout, url, last, p.logPath, p.tail(20))
		}
		select {
		case <-ctx.Done():
		case <-p.done:
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// connect builds the admin REST config from the serving CA the API server
// generated, writes the admin kubeconfig, and checks both with a request
// that verifies TLS properly.
func (c *Cluster) connect(ctx context.Context) error {
	ca, err := os.ReadFile(c.CAFile)
	if err != nil {
		return fmt.Errorf("serving CA: %w", err)
	}
	c.caPEM = ca
	c.Kubeconfig = filepath.Join(c.Dir, "admin.kubeconfig")
	if err := writeKubeconfig(c.Kubeconfig, c.Host, ca, kubeconfigUser{name: "admin", token: c.token}); err != nil {
		return err
	}
	c.restConfig = &rest.Config{
		Host:            c.Host,
		BearerToken:     c.token,
		TLSClientConfig: rest.TLSClientConfig{CAData: ca},
		// client-go's default 5 QPS / burst 10 throttles tests that create
		// a handful of objects in a loop; this is a private cluster.
		QPS:   100,
		Burst: 200,
	}
	if c.client, err = kubernetes.NewForConfig(c.restConfig); err != nil {
		return err
	}
	info, err := c.client.Discovery().ServerVersion()
	if err != nil {
		return err
	}
	if info.GitVersion != c.Version {
		return fmt.Errorf("server reports version %q, expected %q (were the binaries built without the version ldflags?)", info.GitVersion, c.Version)
	}
	return nil
}

// RESTConfig returns a copy of the admin client configuration.
func (c *Cluster) RESTConfig() *rest.Config { return rest.CopyConfig(c.restConfig) }

// Client returns an admin clientset.
func (c *Cluster) Client() kubernetes.Interface { return c.client }

// Token returns the admin bearer token (group system:masters).
func (c *Cluster) Token() string { return c.token }

// UserKubeconfig writes a kubeconfig that authenticates as user in groups with
// a client certificate from the cluster's client CA, and returns its path.
// For a node identity the Node authorizer recognises, use
// UserKubeconfig("system:node:"+name, "system:nodes").
func (c *Cluster) UserKubeconfig(user string, groups ...string) (string, error) {
	certPEM, keyPEM, err := c.ca.issueClient(user, groups)
	if err != nil {
		return "", err
	}
	safe := strings.NewReplacer(":", "_", "/", "_").Replace(user)
	path := filepath.Join(c.Dir, "kubeconfig-"+safe)
	if err := writeKubeconfig(path, c.Host, c.caPEM, kubeconfigUser{name: user, certPEM: certPEM, keyPEM: keyPEM}); err != nil {
		return "", err
	}
	return path, nil
}

// UserClient is a clientset that authenticates as user in groups, through
// a kubeconfig from UserKubeconfig.
func (c *Cluster) UserClient(user string, groups ...string) (kubernetes.Interface, error) {
	kubeconfig, err := c.UserKubeconfig(user, groups...)
	if err != nil {
		return nil, err
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, err
	}
	return kubernetes.NewForConfig(cfg)
}

// CreateNamespace creates a namespace and waits until its "default"
// ServiceAccount exists: until the serviceaccount controller has made it, the
// API server rejects every pod in the namespace.
func (c *Cluster) CreateNamespace(ctx context.Context, name string) (*corev1.Namespace, error) {
	ns, err := c.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil {
		return nil, err
	}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := c.client.CoreV1().ServiceAccounts(name).Get(ctx, "default", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return err == nil, err
	})
	if err != nil {
		return ns, fmt.Errorf("namespace %s: default ServiceAccount did not appear (is serviceaccount-controller running? see %s): %w",
			name, filepath.Join(c.LogsDir, ControllerManager+".log"), err)
	}
	return ns, nil
}

// LogPath returns the log file of a component (Etcd, APIServer, ...).
func (c *Cluster) LogPath(component string) string {
	return filepath.Join(c.LogsDir, component+".log")
}

// ProcessGroups returns the process-group IDs of the components started, in
// start order, e.g. for a test to check that none is left after Stop.
func (c *Cluster) ProcessGroups() []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	var pgids []int
	for _, p := range c.procs {
		pgids = append(pgids, p.pgid)
	}
	return pgids
}

// DumpLogs logs, through t, the last 50 lines of every component's log.
// Start's cleanup calls it when the test failed.
func (c *Cluster) DumpLogs(t testing.TB) {
	t.Helper()
	c.dumpLogs(t.Logf)
}

func (c *Cluster) dumpLogs(logf func(string, ...any)) {
	c.mu.Lock()
	procs := append([]*process(nil), c.procs...)
	c.mu.Unlock()
	for _, p := range procs {
		state := "running"
		if done, err := p.exited(); done {
			state = fmt.Sprintf("exited: %v", err)
		}
		logf("==== %s (%s), last 50 lines of %s ====\n%s", p.name, state, p.logPath, p.tail(50))
	}
}

// Stop kills every component, newest first, waiting for each to be gone, and
// removes the working directory (see Options.Dir for what is kept). It is
// safe to call more than once and from several goroutines.
func (c *Cluster) Stop() {
	c.stop.Do(func() {
		c.mu.Lock()
		c.stopped = true
		procs := append([]*process(nil), c.procs...)
		c.mu.Unlock()
		for i := len(procs) - 1; i >= 0; i-- {
			procs[i].stop(c.opts.StopGrace)
		}
		c.unInterrupt()
		c.cleanDir()
	})
}

// cleanDir removes the working directory, except the logs when they are
// wanted: etcd preallocates 64 MiB of WAL, which should not pile up in /tmp
// run after run, but logs of a failure are what one reads next.
func (c *Cluster) cleanDir() {
	if !c.dirOwned() {
		c.opts.Logf("cluster directory kept: %s", c.Dir)
		return
	}
	c.mu.Lock()
	failed := c.failed
	c.mu.Unlock()
	if !failed {
		_ = os.RemoveAll(c.Dir)
		return
	}
	if c.removeData() {
		c.opts.Logf("component logs kept in %s", c.LogsDir)
	}
}

// dirOwned reports whether the harness may delete the working directory: it
// made it, and FENCED_KEEP_CLUSTER=1 does not ask to keep it.
func (c *Cluster) dirOwned() bool {
	return c.opts.Dir == "" && os.Getenv("FENCED_KEEP_CLUSTER") != "1"
}

// removeData removes everything in an owned working directory but logs/,
// reporting whether it did.
func (c *Cluster) removeData() bool {
	if !c.dirOwned() {
		return false
	}
	entries, _ := os.ReadDir(c.Dir)
	for _, e := range entries {
		if e.Name() != "logs" {
			_ = os.RemoveAll(filepath.Join(c.Dir, e.Name()))
		}
	}
	return true
}

// sweepStale removes the etcd data of earlier clusters whose test binary died
// without cleaning up (SIGKILL, a crash): each owned directory records its
// owner's PID, and a directory whose owner is gone is no one's. The small
// logs are left for whoever investigates that death.
func sweepStale() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), dirPrefix+"*"))
	for _, d := range dirs {
		data, err := os.ReadFile(filepath.Join(d, ownerFile))
		if err != nil {
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
		if err != nil || pid <= 0 || syscall.Kill(pid, 0) != syscall.ESRCH {
			continue
		}
		_ = os.RemoveAll(filepath.Join(d, "etcd"))
		_ = os.Remove(filepath.Join(d, ownerFile))
	}
}

const (
	dirPrefix = "fenced-cluster-"
	ownerFile = "owner.pid"
)

// markFailed tells Stop to keep the logs.
func (c *Cluster) markFailed() {
	c.mu.Lock()
	c.failed = true
	c.mu.Unlock()
}

// freePorts returns n distinct free TCP ports on addr, below the
// ephemeral range (package internal/testbed/ports says why). A port can still be taken
// by another test's server before the component binds it, which shows up
// as a clear "address already in use" in its log.
func freePorts(addr string, n int) ([]int, error) {
	return ports.Free("tcp", addr, n)
}
