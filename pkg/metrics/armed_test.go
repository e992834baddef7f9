package metrics

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// credentialPEM is a credential file as `fenced credentials issue` writes
// it: a client certificate valid from notBefore to notAfter, then its key.
func credentialPEM(t *testing.T, notBefore, notAfter time.Time) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "fenced:node:node-a", Organization: []string{"fenced:fencers"}},
		NotBefore: notBefore, NotAfter: notAfter, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return append(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})...)
}

// gather returns c's samples in the text format, for comparison.
func gather(t *testing.T, c prometheus.Collector) string {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			line := f.GetName()
			for _, l := range m.GetLabel() {
				line += " " + l.GetName() + "=" + l.GetValue()
			}
			lines = append(lines, line+" "+strconv.FormatFloat(m.GetGauge().GetValue(), 'f', -1, 64))
		}
	}
	return strings.Join(lines, "\n")
}

func TestAgentReady(t *testing.T) {
	var notReady error = errors.New("not yet in the gossip ring")
	c := NewAgentReady("fencer", func() error { return notReady })
	if got, want := gather(t, c), AgentReadyMetric+" role=fencer 0"; got != want {
		t.Errorf("before ready: %q, want %q", got, want)
	}
	notReady = nil
	if got, want := gather(t, c), AgentReadyMetric+" role=fencer 1"; got != want {
		t.Errorf("ready: %q, want %q", got, want)
	}
}

func TestInventoryNodes(t *testing.T) {
	n := 0
	c := NewInventoryNodes(func() int { return n })
	for _, want := range []int{0, 3} {
		n = want
		if got := testutil.ToFloat64(c); got != float64(want) {
			t.Errorf("%s = %v, want %d", InventoryNodesMetric, got, want)
		}
	}
}

// TestClientCertificate: the gauges follow the certificate file as a
// renewal replaces it, keep the last certificate read while the file is
// unreadable or holds no certificate, and are absent until one was read.
func TestClientCertificate(t *testing.T) {
	file := filepath.Join(t.TempDir(), "client.pem")
	c := NewClientCertificate(func() ([]byte, error) { return os.ReadFile(file) })
	if got := gather(t, c); got != "" {
		t.Fatalf("no certificate file yet: %q, want no sample", got)
	}
	issued := time.Unix(1_800_000_000, 0)
	renewed := issued.Add(48 * time.Hour)
	samples := func(from time.Time) string {
		return ClientCertNotAfterMetric + " " + strconv.FormatInt(from.Add(7*24*time.Hour).Unix(), 10) + "\n" +
			ClientCertNotBeforeMetric + " " + strconv.FormatInt(from.Unix(), 10)
	}
	for _, step := range []struct {
		name  string
		write []byte // nil: remove the file
		from  time.Time
	}{
		{"issued", credentialPEM(t, issued, issued.Add(7*24*time.Hour)), issued},
		{"renewed", credentialPEM(t, renewed, renewed.Add(7*24*time.Hour)), renewed},
		{"file without a certificate", []byte("-----BEGIN EC PRIVATE KEY-----\n-----END EC PRIVATE KEY-----\n"), renewed},
		{"file removed", nil, renewed},
	} {
		if step.write == nil {
			if err := os.Remove(file); err != nil {
				t.Fatal(err)
			}
		} else if err := os.WriteFile(file, step.write, 0o600); err != nil {
			t.Fatal(err)
		}
		if got, want := gather(t, c), samples(step.from); got != want {
			t.Errorf("%s:\n%s\nwant\n%s", step.name, got, want)
		}
	}
}
