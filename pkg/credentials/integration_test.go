package credentials

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/x509/pkix"
	"encoding/base64"
	"errors"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	certv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"

	"fenced.io/fenced/internal/testbed/cluster"
)

// signingController is the kube-controller-manager controller that signs
// approved kubernetes.io/kube-apiserver-client requests with the cluster
// CA the API server trusts (cluster.Start passes it --cluster-signing-*).
const signingController = "certificatesigningrequest-signing-controller"

// squatCluster is a control plane that signs CSRs, its admin, and a
// kubelet's client: the attacker, a worker whose kubelet (like every
// kubelet) may create and read CSRs.
func squatCluster(t *testing.T) (context.Context, *cluster.Cluster, kubernetes.Interface, kubernetes.Interface) {
	t.Helper()
	if testing.Short() {
		t.Skip("integration test: starts a control plane")
	}
	ctx, c := cluster.StartForTest(t, cluster.Options{NoScheduler: true, Controllers: []string{signingController}})
	return ctx, c, c.Client(), userClient(t, c, "system:node:worker-1", "system:nodes")
}

func userClient(t *testing.T, c *cluster.Cluster, user string, groups ...string) kubernetes.Interface {
	t.Helper()
	cl, err := c.UserClient(user, groups...)
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

// squat creates, as cl, a CSR named name (generateName if name ends in
// "-") for node's credential with cl's own key, as an attacker would.
func squat(ctx context.Context, t *testing.T, cl kubernetes.Interface, name, node string, key *ecdsa.PrivateKey) *certv1.CertificateSigningRequest {
	t.Helper()
	meta := metav1.ObjectMeta{Name: name}
	if strings.HasSuffix(name, "-") {
		meta = metav1.ObjectMeta{GenerateName: name}
	}
	csr, err := cl.CertificatesV1().CertificateSigningRequests().Create(ctx, &certv1.CertificateSigningRequest{
		ObjectMeta: meta,
		Spec: certv1.CertificateSigningRequestSpec{
			Request:    csrPEM(t, key, pkix.Name{CommonName: User(node), Organization: []string{GroupFencers}}),
			SignerName: certv1.KubeAPIServerClientSignerName,
			Usages:     []certv1.KeyUsage{certv1.UsageClientAuth},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("the attacker creating CSR %s: %v", name, err)
	}
	return csr
}

// whoIs authenticates at c with a client certificate chain and key.
func whoIs(ctx context.Context, t *testing.T, c *cluster.Cluster, certPEM, keyPEM []byte) authnv1.UserInfo {
	t.Helper()
	cfg := rest.AnonymousClientConfig(c.RESTConfig())
	cfg.CertData, cfg.KeyData = certPEM, keyPEM
	r, err := kubernetes.NewForConfigOrDie(cfg).AuthenticationV1().SelfSubjectReviews().Create(ctx, &authnv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return r.Status.UserInfo
}

func approvedOrDenied(csr *certv1.CertificateSigningRequest) (approved, denied bool) {
	for _, c := range csr.Status.Conditions {
		approved = approved || c.Type == certv1.CertificateApproved && c.Status == corev1.ConditionTrue
		denied = denied || c.Type == certv1.CertificateDenied && c.Status == corev1.ConditionTrue
	}
	return approved, denied
}

// TestSquatOldStepsVersusIssue: with the old install steps of
// deploy/systemd/README.md (apply a CSR named fenced-node-<node>, approve it
// by name) a kubelet that created that name first gets a certificate for
// fenced:node:<victim> in fenced:fencers with its own key; Issue creates its
// own CSR under a generated name, ignores the squat and approves nothing
// whose requester, subject, key or lifetime differ.
func TestSquatOldStepsVersusIssue(t *testing.T) {
	ctx, c, admin, kubelet := squatCluster(t)
	attackerKey := newKey(t)
	attackerKeyPEM, err := keyutil.MarshalPrivateKeyToPEM(attackerKey)
	if err != nil {
		t.Fatal(err)
	}
	csrs := admin.CertificatesV1().CertificateSigningRequests()

	t.Run("old-steps-approve-the-squat", func(t *testing.T) {
		const victim = "node-a"
		squat(ctx, t, kubelet, OldCSRPrefix+victim, victim, attackerKey)

		// The admin's old step 5, word for word but for openssl (the
		// same request, made with Go): apply, approve by name, read.
		adminCSR := csrPEM(t, newKey(t), pkix.Name{CommonName: User(victim), Organization: []string{GroupFencers}})
		kubectl := func(stdin string, args ...string) string {
			t.Helper()
			cmd := exec.CommandContext(ctx, filepath.Join(c.BinDir, "kubectl"), append([]string{"--kubeconfig", c.Kubeconfig}, args...)...)
			cmd.Stdin = strings.NewReader(stdin)
			var out, errb bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &errb
			if err := cmd.Run(); err != nil {
				t.Fatalf("kubectl %s: %v\n%s%s", strings.Join(args, " "), err, out.String(), errb.String())
			}
			said := strings.TrimSpace(out.String() + errb.String())
			if len(said) > 200 {
				said = said[:200] + "…"
			}
			t.Logf("kubectl %s: %s", strings.Join(args, " "), said)
			return out.String()
		}
		kubectl(`apiVersion: certificates.k8s.io/v1
kind: CertificateSigningRequest
metadata:
  name: fenced-node-`+victim+`
spec:
  signerName: kubernetes.io/kube-apiserver-client
  usages: [client auth]
  request: `+base64.StdEncoding.EncodeToString(adminCSR)+"\n", "apply", "-f", "-")
		kubectl("", "certificate", "approve", OldCSRPrefix+victim)
		var cert []byte
		if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
			out := kubectl("", "get", "csr", OldCSRPrefix+victim, "-o", "jsonpath={.status.certificate}")
			cert, err = base64.StdEncoding.DecodeString(out)
			return err == nil && len(cert) > 0, nil
		}); err != nil {
			t.Fatalf("no certificate on %s%s: %v", OldCSRPrefix, victim, err)
		}

		// What the admin got is the attacker's: its key, not the
		// admin's, and the kubelet reads it too.
		got, err := kubelet.CertificatesV1().CertificateSigningRequests().Get(ctx, OldCSRPrefix+victim, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got.Status.Certificate, cert) || got.Spec.Username != "system:node:worker-1" {
			t.Fatalf("CSR %s: requester %s; the certificate the kubelet reads differs from the admin's", got.Name, got.Spec.Username)
		}
		u := whoIs(ctx, t, c, got.Status.Certificate, attackerKeyPEM)
		if u.Username != User(victim) || !slices.Contains(u.Groups, GroupFencers) {
			t.Fatalf("the attacker's key with the certificate authenticates as %s %v", u.Username, u.Groups)
		}
		t.Logf("old steps: worker-1's kubelet now authenticates as %s in %v with its own key (what the agent identity policy takes for node %s's agent and for a fencer)",
			u.Username, u.Groups, victim)
	})

	t.Run("issue-ignores-the-squat", func(t *testing.T) {
		const victim = "node-b"
		squatted := squat(ctx, t, kubelet, OldCSRPrefix+victim, victim, attackerKey)
		var out bytes.Buffer
		i := &Issuer{Client: admin, Out: &out}
		issued, err := i.Issue(ctx, Request{Node: victim, Duration: time.Hour})
		t.Logf("Issue:\n%s", out.String())
		if err != nil {
			t.Fatal(err)
		}
		if issued.CSRName == squatted.Name || !strings.HasPrefix(issued.CSRName, CSRPrefix) {
			t.Errorf("Issue used CSR %s; want a generated name %s…", issued.CSRName, CSRPrefix)
		}
		if !strings.Contains(out.String(), "WARNING: a pending CSR "+squatted.Name+" exists (requested by system:node:worker-1)") {
			t.Errorf("no warning about the pending %s", squatted.Name)
		}
		if left := time.Until(issued.Certificate.NotAfter); left > time.Hour+clockSlack || left < 50*time.Minute {
			t.Errorf("certificate valid for %s more, want the hour asked for", left)
		}
		u := whoIs(ctx, t, c, issued.PEM, issued.PEM)
		if u.Username != User(victim) || !slices.Contains(u.Groups, GroupFencers) {
			t.Errorf("the issued credential authenticates as %s %v", u.Username, u.Groups)
		}
		if err := VerifyWorks(ctx, c.RESTConfig(), issued, Request{Node: victim}); err != nil {
			t.Errorf("VerifyWorks: %v", err)
		}
		s, err := csrs.Get(ctx, squatted.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if approved, _ := approvedOrDenied(s); approved || len(s.Status.Certificate) > 0 {
			t.Errorf("the squatted %s was approved", s.Name)
		}
	})

	// Someone else's request in the place of the one Issue created (the
	// window between create and check): refused, denied, never approved.
	myKey := newKey(t)
	for _, tc := range []struct {
		name    string
		swapped func(t *testing.T) *certv1.CertificateSigningRequest
		want    string
	}{
		{"kubelet-requester", func(t *testing.T) *certv1.CertificateSigningRequest {
			return squat(ctx, t, kubelet, CSRPrefix, "node-c", attackerKey)
		}, `requester is "system:node:worker-1", not you`},
		{"another-key", func(t *testing.T) *certv1.CertificateSigningRequest {
			return squat(ctx, t, admin, CSRPrefix, "node-c", myKey)
		}, "request public key is not the one generated for it here"},
		{"another-node", func(t *testing.T) *certv1.CertificateSigningRequest {
			return squat(ctx, t, admin, CSRPrefix, "node-d", myKey)
		}, `request CN is "fenced:node:node-d", not "fenced:node:node-c"`},
		{"no-lifetime", func(t *testing.T) *certv1.CertificateSigningRequest {
			return squat(ctx, t, admin, CSRPrefix, "node-c", myKey)
		}, "expirationSeconds is unset"},
	} {
		t.Run("swapped/"+tc.name, func(t *testing.T) {
			var swapped *certv1.CertificateSigningRequest
			var out bytes.Buffer
			i := &Issuer{Client: admin, Out: &out, afterCreate: func(context.Context, *certv1.CertificateSigningRequest) *certv1.CertificateSigningRequest {
				swapped = tc.swapped(t)
				return swapped
			}}
			_, err := i.Issue(ctx, Request{Node: "node-c", Duration: time.Hour})
			t.Logf("Issue: %v\n%s", err, out.String())
			if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Issue = %v; want a refusal naming %q", err, tc.want)
			}
			s, err := csrs.Get(ctx, swapped.Name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if approved, denied := approvedOrDenied(s); approved || !denied {
				t.Errorf("CSR %s: approved %v, denied %v; want denied only", s.Name, approved, denied)
			}
		})
	}

	// Replaced between the check and the approval: the approval carries
	// the checked resourceVersion and fails.
	t.Run("replaced-after-check", func(t *testing.T) {
		var replaced *certv1.CertificateSigningRequest
		var out bytes.Buffer
		i := &Issuer{Client: admin, Out: &out, afterCreate: func(ctx context.Context, created *certv1.CertificateSigningRequest) *certv1.CertificateSigningRequest {
			if err := csrs.Delete(ctx, created.Name, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			replaced = squat(ctx, t, kubelet, created.Name, "node-e", attackerKey)
			return created // the check sees what Issue created
		}}
		_, err := i.Issue(ctx, Request{Node: "node-e", Duration: time.Hour})
		t.Logf("Issue: %v\n%s", err, out.String())
		if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "changed between its check and its approval") {
			t.Fatalf("Issue = %v; want a refusal: changed between check and approval", err)
		}
		s, err := csrs.Get(ctx, replaced.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if approved, _ := approvedOrDenied(s); approved {
			t.Errorf("the replacing CSR %s (requester %s) was approved", s.Name, s.Spec.Username)
		}
	})

	// The signer caps a lifetime at spec.expirationSeconds: what Issue
	// asks for is what the certificate gets (the old steps asked nothing
	// and got the controller manager's --cluster-signing-duration, a year).
	t.Run("lifetime", func(t *testing.T) {
		issued, err := (&Issuer{Client: admin}).Issue(ctx, Request{Node: "node-f", Duration: MinDuration})
		if err != nil {
			t.Fatal(err)
		}
		if life := time.Until(issued.Certificate.NotAfter); life > MinDuration+clockSlack {
			t.Errorf("certificate valid %s more, asked %s", life, MinDuration)
		}
		// For the record, next to the old steps' certificate.
		if old, err := csrs.Get(ctx, OldCSRPrefix+"node-a", metav1.GetOptions{}); err == nil && len(old.Status.Certificate) > 0 {
			certs, err := certutil.ParseCertsPEM(old.Status.Certificate)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("old steps' certificate: valid %s more; Issue's: %s", time.Until(certs[0].NotAfter).Round(time.Hour), time.Until(issued.Certificate.NotAfter).Round(time.Second))
		}
	})
}
