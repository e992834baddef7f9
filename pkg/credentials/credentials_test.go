package credentials

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
	"strings"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	certv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/clientcmd"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"
	"k8s.io/utils/ptr"
)

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// csrPEM is a PEM CERTIFICATE REQUEST of key for subject.
func csrPEM(t testing.TB, key *ecdsa.PrivateKey, subject pkix.Name) []byte {
	t.Helper()
	der, err := certutil.MakeCSR(key, &subject, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	return der
}

// TestCheckRequest: a CSR is approved only if every field is the one this
// command asked for; each difference is named.
func TestCheckRequest(t *testing.T) {
	key, other := newKey(t), newKey(t)
	me := authnv1.UserInfo{Username: "admin", UID: "u-1", Groups: []string{"system:masters", "system:authenticated"},
		Extra: map[string]authnv1.ExtraValue{"authentication.kubernetes.io/credential-id": {"X509SHA256=ab"}}}
	want := Expected{Requester: me, User: User("node-a"), Group: GroupFencers, PublicKey: key.Public(), ExpirationSeconds: 3600}
	subject := pkix.Name{CommonName: want.User, Organization: []string{GroupFencers}}
	good := func() *certv1.CertificateSigningRequest {
		return &certv1.CertificateSigningRequest{Spec: certv1.CertificateSigningRequestSpec{
			Request: csrPEM(t, key, subject), SignerName: certv1.KubeAPIServerClientSignerName,
			Usages: []certv1.KeyUsage{certv1.UsageClientAuth}, ExpirationSeconds: ptr.To[int32](3600),
			Username: "admin", UID: "u-1", Groups: []string{"system:authenticated", "system:masters"},
			Extra: map[string]certv1.ExtraValue{"authentication.kubernetes.io/credential-id": {"X509SHA256=ab"}},
		}}
	}
	for _, tc := range []struct {
		name   string
		change func(*certv1.CertificateSigningRequest)
		want   string // "" = approved
	}{
		{"as-asked", func(*certv1.CertificateSigningRequest) {}, ""},
		{"requester-a-kubelet", func(c *certv1.CertificateSigningRequest) {
			c.Spec.Username, c.Spec.UID, c.Spec.Groups = "system:node:worker-1", "", []string{"system:nodes", "system:authenticated"}
			c.Spec.Extra = nil
		}, `requester is "system:node:worker-1", not you ("admin")`},
		{"requester-uid", func(c *certv1.CertificateSigningRequest) { c.Spec.UID = "u-2" }, `requester uid is "u-2"`},
		{"requester-groups", func(c *certv1.CertificateSigningRequest) { c.Spec.Groups = c.Spec.Groups[:1] }, "requester groups"},
		{"requester-extra", func(c *certv1.CertificateSigningRequest) { c.Spec.Extra = nil }, "requester extra"},
		{"another-key", func(c *certv1.CertificateSigningRequest) { c.Spec.Request = csrPEM(t, other, subject) },
			"request public key is not the one generated for it here"},
		{"another-node", func(c *certv1.CertificateSigningRequest) {
			c.Spec.Request = csrPEM(t, key, pkix.Name{CommonName: User("node-b"), Organization: []string{GroupFencers}})
		}, `request CN is "fenced:node:node-b", not "fenced:node:node-a"`},
		{"extra-group", func(c *certv1.CertificateSigningRequest) {
			c.Spec.Request = csrPEM(t, key, pkix.Name{CommonName: want.User, Organization: []string{GroupFencers, "system:masters"}})
		}, "request O is"},
		{"extra-attribute", func(c *certv1.CertificateSigningRequest) {
			c.Spec.Request = csrPEM(t, key, pkix.Name{CommonName: want.User, Organization: []string{GroupFencers}, OrganizationalUnit: []string{"x"}})
		}, "attributes besides CN and O"},
		{"other-signer", func(c *certv1.CertificateSigningRequest) {
			c.Spec.SignerName = certv1.KubeAPIServerClientKubeletSignerName
		}, "signer is"},
		{"more-usages", func(c *certv1.CertificateSigningRequest) {
			c.Spec.Usages = append(c.Spec.Usages, certv1.UsageServerAuth)
		}, "usages are"},
		{"a-year", func(c *certv1.CertificateSigningRequest) { c.Spec.ExpirationSeconds = ptr.To[int32](365 * 86400) }, "expirationSeconds is 31536000, not 3600"},
		{"no-expiration", func(c *certv1.CertificateSigningRequest) { c.Spec.ExpirationSeconds = nil }, "expirationSeconds is unset"},
		{"already-approved", func(c *certv1.CertificateSigningRequest) {
			c.Status.Conditions = []certv1.CertificateSigningRequestCondition{{Type: certv1.CertificateApproved, Status: corev1.ConditionTrue}}
		}, "no longer pending"},
		{"not-pem", func(c *certv1.CertificateSigningRequest) { c.Spec.Request = []byte("junk") }, "not a PEM CERTIFICATE REQUEST"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			csr := good()
			csr.Name = "fenced-node-credential-x"
			tc.change(csr)
			err := CheckRequest(csr, want)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused the request as asked: %v", err)
			case tc.want == "":
			case err == nil:
				t.Fatalf("approved, want a refusal naming %q", tc.want)
			case !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), tc.want):
				t.Fatalf("%v; want ErrRefused naming %q", err, tc.want)
			}
		})
	}
}

// certFor signs a client certificate for key and subject, valid for life.
func certFor(t testing.TB, key *ecdsa.PrivateKey, subject pkix.Name, now time.Time, life time.Duration, usage x509.ExtKeyUsage) []byte {
	t.Helper()
	ca := newKey(t)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: subject, NotBefore: now.Add(-5 * time.Minute),
		NotAfter: now.Add(life), ExtKeyUsage: []x509.ExtKeyUsage{usage}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), ca)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// TestCheckCertificate: what the signer returns is kept only if it holds
// the key and subject asked for and expires no later than asked.
func TestCheckCertificate(t *testing.T) {
	now := time.Now()
	key := newKey(t)
	want := Expected{User: User("node-a"), Group: GroupFencers, PublicKey: key.Public(), ExpirationSeconds: 3600}
	subject := pkix.Name{CommonName: want.User, Organization: []string{GroupFencers}}
	for _, tc := range []struct {
		name  string
		chain []byte
		want  string
	}{
		{"as-asked", certFor(t, key, subject, now, time.Hour, x509.ExtKeyUsageClientAuth), ""},
		{"a-year", certFor(t, key, subject, now, 365*24*time.Hour, x509.ExtKeyUsageClientAuth), "longer than the 1h0m0s asked for"},
		{"another-key", certFor(t, newKey(t), subject, now, time.Hour, x509.ExtKeyUsageClientAuth), "certificate public key"},
		{"server-auth", certFor(t, key, subject, now, time.Hour, x509.ExtKeyUsageServerAuth), "not for client auth"},
		{"expired", certFor(t, key, subject, now, -time.Minute, x509.ExtKeyUsageClientAuth), "expired"},
		{"junk", []byte("junk"), "the issued certificate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := checkCertificate(tc.chain, want, now)
			if tc.want == "" && err != nil || tc.want != "" && (!errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), tc.want)) {
				t.Fatalf("checkCertificate: %v; want %q", err, tc.want)
			}
		})
	}
}

// TestFilesWrite: the kubeconfig refers to the credential file; a renewal
// keeps both files' modes.
func TestFilesWrite(t *testing.T) {
	dir := t.TempDir()
	f := Files{Kubeconfig: filepath.Join(dir, "kubeconfig"), CredentialPEM: filepath.Join(dir, "client.pem")}
	key := newKey(t)
	keyPEM, err := keyutil.MarshalPrivateKeyToPEM(key)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	issued := &Issued{PEM: append(certFor(t, key, pkix.Name{CommonName: User("node-a")}, now, time.Hour, x509.ExtKeyUsageClientAuth), keyPEM...)}
	if err := f.Write("https://127.0.0.1:6443", []byte("ca"), issued); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{f.Kubeconfig, f.CredentialPEM} {
		if st, err := os.Stat(p); err != nil || st.Mode().Perm() != 0o600 {
			t.Fatalf("%s: %v, mode %v; want a new file 0600", p, err, st.Mode())
		}
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", f.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.CertFile != f.CredentialPEM || cfg.KeyFile != f.CredentialPEM || cfg.Host != "https://127.0.0.1:6443" || string(cfg.CAData) != "ca" {
		t.Fatalf("kubeconfig: host %s, cert %s, key %s, CA %q", cfg.Host, cfg.CertFile, cfg.KeyFile, cfg.CAData)
	}
	// A renewal keeps the mode the admin gave them.
	for _, p := range []string{f.Kubeconfig, f.CredentialPEM} {
		if err := os.Chmod(p, 0o640); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Write("https://127.0.0.1:6443", []byte("ca"), issued); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{f.Kubeconfig, f.CredentialPEM} {
		if st, err := os.Stat(p); err != nil || st.Mode().Perm() != 0o640 {
			t.Fatalf("%s after renewal: %v, mode %v; want 0640 kept", p, err, st.Mode())
		}
	}
	if left, _ := filepath.Glob(filepath.Join(dir, ".*")); len(left) > 0 {
		t.Errorf("temporary files left: %v", left)
	}
}

// FuzzParseRequest: spec.request comes from the API server (any requester
// wrote it); ParseRequest must not panic on any bytes.
func FuzzParseRequest(f *testing.F) {
	f.Add(csrPEM(f, newKey(f), pkix.Name{CommonName: User("node-a"), Organization: []string{GroupFencers}}))
	f.Add([]byte("-----BEGIN CERTIFICATE REQUEST-----\nAAAA\n-----END CERTIFICATE REQUEST-----\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		if cr, err := ParseRequest(data); err == nil && cr == nil {
			t.Fatal("nil request without an error")
		}
	})
}
