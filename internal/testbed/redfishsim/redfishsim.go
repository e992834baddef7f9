// Package redfishsim is a small fake Redfish BMC for tests and the local
// cluster harness. It serves one ComputerSystem with a power state, session
// and basic authentication, and lets tests inject faults. It implements only
// what fenced uses, and is not a conformance reference.
package redfishsim

import (
	"bytes"
	"crypto/subtle"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
)

// Resource paths served by the simulator.
const (
	ServiceRootPath = "/redfish/v1/"
	SystemsPath     = "/redfish/v1/Systems"
	SystemPath      = "/redfish/v1/Systems/1"
	ResetPath       = "/redfish/v1/Systems/1/Actions/ComputerSystem.Reset"
	SessionsPath    = "/redfish/v1/SessionService/Sessions"
)

// Options configure a simulator. Zero values get working defaults.
type Options struct {
	// TLS serves HTTPS with httptest's self-signed certificate.
	TLS bool
	// Username and Password are the only accepted credentials
	// (default "admin" / "password").
	Username, Password string
	// PowerState is the initial Redfish PowerState (default "On").
	PowerState string
	// UUID is the system UUID, served verbatim.
	UUID string
	// ResetTypes are advertised in ResetType@Redfish.AllowableValues
	// (default ForceOff, On, ForceRestart). Set to an empty non-nil slice
	// to advertise none.
	ResetTypes []string
	// EchoRequest makes every error answer (a refused login, a request
	// without valid credentials, an injected Status fault) quote the request
	// it answers, headers (Authorization included) and body (the login's
	// password included), in its message, as some BMCs do. It is the worst
	// case for a client that puts error bodies into its own errors.
	EchoRequest bool
}

// Fault changes how subsequent requests are answered until cleared.
type Fault struct {
	// Path limits the fault to one resource path; empty means every request.
	Path string
	// Delay holds each affected request before it is served, to push a
	// client past its timeout.
	Delay time.Duration
	// Status, if non-zero, answers affected requests with this HTTP status
	// and a Redfish error body instead of serving them.
	Status int
	// MalformedJSON answers affected requests with 200 and a truncated JSON
	// body.
	MalformedJSON bool
}

// Server is a running simulator. Its methods are safe for concurrent use.
type Server struct {
	// URL is the base URL, e.g. "http://127.0.0.1:41234".
	URL string

	srv     *httptest.Server
	closing chan struct{}
	once    sync.Once

	mu         sync.Mutex
	username   string
	password   string
	power      string
	uuid       string
	resetTypes []string
	echo       bool
	sessions   map[string]string // token -> session URI
	nextID     int
	resets     []string
	fault      Fault
	requests   []string
}

// New starts a simulator on a loopback port. Call Close when done.
func New(opts Options) *Server {
	s := &Server{
		closing:    make(chan struct{}),
		username:   or(opts.Username, "admin"),
		password:   or(opts.Password, "password"),
		power:      or(opts.PowerState, "On"),
		uuid:       opts.UUID,
		resetTypes: opts.ResetTypes,
		echo:       opts.EchoRequest,
		sessions:   map[string]string{},
	}
	if s.resetTypes == nil {
		s.resetTypes = []string{"ForceOff", "On", "ForceRestart"}
	}
	if opts.TLS {
		s.srv = httptest.NewTLSServer(http.HandlerFunc(s.serve))
	} else {
		s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	}
	s.URL = s.srv.URL
	return s
}

func or(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

// Close stops the server, releasing any request held by a Delay fault.
func (s *Server) Close() {
	s.once.Do(func() {
		close(s.closing)
		s.srv.Close()
	})
}

// CACertPEM returns the PEM-encoded certificate of a TLS simulator, for use
// as a client's CA bundle. It returns nil for a plain HTTP simulator.
func (s *Server) CACertPEM() []byte {
	cert := s.srv.Certificate()
	if cert == nil {
		return nil
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw})
}

// SetPowerState sets the Redfish PowerState the system reports, e.g. "Off"
// or "PoweringOff".
func (s *Server) SetPowerState(state string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.power = state
}

// PowerState returns the current Redfish PowerState.
func (s *Server) PowerState() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.power
}

// SetUUID changes the system UUID.
func (s *Server) SetUUID(uuid string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.uuid = uuid
}

// SetPassword changes the accepted password, as a BMC credential rotation
// would. Existing sessions stay valid.
func (s *Server) SetPassword(password string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.password = password
}

// ActiveSessions returns the number of sessions not yet logged out.
func (s *Server) ActiveSessions() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.sessions)
}

// Resets returns the ResetType of every accepted reset, oldest first.
func (s *Server) Resets() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.resets)
}

// Requests returns "METHOD /path" for every request received, oldest first.
func (s *Server) Requests() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.requests)
}

// SetFault applies f to subsequent requests.
func (s *Server) SetFault(f Fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fault = f
}

// ClearFault returns to normal answers.
func (s *Server) ClearFault() { s.SetFault(Fault{}) }

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	path := r.URL.Path
	if path != ServiceRootPath {
		path = strings.TrimSuffix(path, "/")
	}
	if path == "/redfish/v1" {
		path = ServiceRootPath
	}

	s.mu.Lock()
	s.requests = append(s.requests, r.Method+" "+path)
	f := s.fault
	s.mu.Unlock()

	// fail answers with a Redfish error, quoting the request if asked to.
	fail := func(status int, msg string) { writeError(w, status, msg) }
	if s.echo {
		echo := echoRequest(r)
		fail = func(status int, msg string) { writeError(w, status, msg+"; request was: "+echo) }
	}

	if f.Path == "" || f.Path == path {
		if f.Delay > 0 {
			t := time.NewTimer(f.Delay)
			defer t.Stop()
			select {
			case <-t.C:
			case <-r.Context().Done():
				return
			case <-s.closing:
				return
			}
		}
		if f.Status != 0 {
			fail(f.Status, "injected fault")
			return
		}
		if f.MalformedJSON {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"@odata.id": "` + path + `", "PowerState": "O`))
			return
		}
	}

	// The service root and session creation are reachable without
	// credentials, as the Redfish specification requires.
	switch {
	case path == ServiceRootPath && r.Method == http.MethodGet:
		s.serviceRoot(w)
		return
	case path == SessionsPath && r.Method == http.MethodPost:
		s.createSession(w, r, fail)
		return
	}
	if !s.authorized(r) {
		fail(http.StatusUnauthorized, "authentication required")
		return
	}

	switch {
	case path == SystemsPath && r.Method == http.MethodGet:
		writeJSON(w, http.StatusOK, map[string]any{
			"@odata.id":           SystemsPath,
			"@odata.type":         "#ComputerSystemCollection.ComputerSystemCollection",
			"Name":                "Computer System Collection",
			"Members@odata.count": 1,
			"Members":             []any{map[string]string{"@odata.id": SystemPath}},
		})
	case path == SystemPath && r.Method == http.MethodGet:
		s.system(w)
	case path == ResetPath && r.Method == http.MethodPost:
		s.reset(w, r)
	case strings.HasPrefix(path, SessionsPath+"/") && r.Method == http.MethodDelete:
		s.deleteSession(w, path)
	default:
		writeError(w, http.StatusNotFound, "no such resource")
	}
}

func (s *Server) serviceRoot(w http.ResponseWriter) {
	writeJSON(w, http.StatusOK, map[string]any{
		"@odata.id":      ServiceRootPath,
		"@odata.type":    "#ServiceRoot.v1_5_0.ServiceRoot",
		"Id":             "RootService",
		"Name":           "Root Service",
		"RedfishVersion": "1.6.0",
		"Systems":        map[string]string{"@odata.id": SystemsPath},
		"SessionService": map[string]string{"@odata.id": "/redfish/v1/SessionService"},
		"Links":          map[string]any{"Sessions": map[string]string{"@odata.id": SessionsPath}},
	})
}

func (s *Server) system(w http.ResponseWriter) {
	s.mu.Lock()
	body := map[string]any{
		"@odata.id":   SystemPath,
		"@odata.type": "#ComputerSystem.v1_10_0.ComputerSystem",
		"Id":          "1",
		"Name":        "Simulated System",
		"PowerState":  s.power,
		"UUID":        s.uuid,
		"Actions": map[string]any{
			"#ComputerSystem.Reset": map[string]any{
				"target":                            ResetPath,
				"ResetType@Redfish.AllowableValues": slices.Clone(s.resetTypes),
			},
		},
	}
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, body)
}

func (s *Server) reset(w http.ResponseWriter, r *http.Request) {
	var req struct{ ResetType string }
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, "malformed request body")
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !slices.Contains(s.resetTypes, req.ResetType) {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("ResetType %q not allowed", req.ResetType))
		return
	}
	switch req.ResetType {
	case "ForceOff":
		s.power = "Off"
	case "On", "ForceRestart":
		s.power = "On"
	default:
		writeError(w, http.StatusBadRequest, fmt.Sprintf("ResetType %q not simulated", req.ResetType))
		return
	}
	s.resets = append(s.resets, req.ResetType)
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) createSession(w http.ResponseWriter, r *http.Request, fail func(status int, msg string)) {
	var req struct{ UserName, Password string }
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		fail(http.StatusBadRequest, "malformed request body")
		return
	}
	s.mu.Lock()
	if !s.credentialsOK(req.UserName, req.Password) {
		s.mu.Unlock()
		fail(http.StatusUnauthorized, "invalid credentials")
		return
	}
	s.nextID++
	id := fmt.Sprint(s.nextID)
	token := fmt.Sprintf("token-%d-%d", s.nextID, time.Now().UnixNano())
	uri := SessionsPath + "/" + id
	s.sessions[token] = uri
	s.mu.Unlock()

	w.Header().Set("X-Auth-Token", token)
	w.Header().Set("Location", uri)
	writeJSON(w, http.StatusCreated, map[string]any{
		"@odata.id": uri,
		"Id":        id,
		"UserName":  req.UserName,
	})
}

func (s *Server) deleteSession(w http.ResponseWriter, path string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for token, uri := range s.sessions {
		if uri == path {
			delete(s.sessions, token)
			w.WriteHeader(http.StatusNoContent)
			return
		}
	}
	writeError(w, http.StatusNotFound, "no such session")
}

// echoRequest renders r (request line, sorted headers, body) the way a BMC
// quoting the request in its error message would, and leaves r.Body
// readable for the handler.
func echoRequest(r *http.Request) string {
	body, _ := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(body))
	names := make([]string, 0, len(r.Header))
	for name := range r.Header {
		names = append(names, name)
	}
	sort.Strings(names)
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s", r.Method, r.URL.RequestURI())
	for _, name := range names {
		fmt.Fprintf(&b, "\n%s: %s", name, strings.Join(r.Header[name], ", "))
	}
	fmt.Fprintf(&b, "\n\n%s", body)
	return b.String()
}

// authorized accepts a live session token or basic credentials.
func (s *Server) authorized(r *http.Request) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if token := r.Header.Get("X-Auth-Token"); token != "" {
		_, ok := s.sessions[token]
		return ok
	}
	if user, pass, ok := r.BasicAuth(); ok {
		return s.credentialsOK(user, pass)
	}
	return false
}

// credentialsOK must be called with s.mu held.
func (s *Server) credentialsOK(user, pass string) bool {
	return subtle.ConstantTimeCompare([]byte(user), []byte(s.username)) == 1 &&
		subtle.ConstantTimeCompare([]byte(pass), []byte(s.password)) == 1
}

func writeJSON(w http.ResponseWriter, status int, body any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(body)
}

// writeError answers with the Redfish error envelope real BMCs use.
func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]any{
		"error": map[string]any{
			"code":    "Base.1.8.GeneralError",
			"message": msg,
		},
	})
}
