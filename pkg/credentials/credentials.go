// Package credentials issues the API credential of a systemd-run agent
// (deploy/systemd): a client certificate for user fenced:node:<node> in
// group fenced:fencers (or fenced:observers), signed by the cluster's
// kubernetes.io/kube-apiserver-client signer. `fenced credentials issue`
// wires it; cmd/fenced only passes flags and clients.
//
// That certificate is a fencer's power: the agent identity policy
// (deploy/daemonset/base/agent-identity-policy.yaml) lets fenced:node:<x>
// publish node x's key, and group fenced:fencers take power Leases — so
// whoever gets one for a node can speak for that node and taint others. An
// approved certificate cannot be revoked. The install steps this replaces
// applied a CSR of a fixed name (fenced-node-<node>) and approved it by
// name: anyone allowed to create CSRs (every kubelet) could create that
// name first with its own key, the apply was a silent no-op (a CSR's spec
// is immutable) and the approval approved the squatter's request.
//
// So Issue does the whole exchange in one process and approves nothing it
// has not checked:
//   - the private key is generated here and never leaves the process
//     except into the credential file;
//   - the CSR is created (never applied) under a name the API server
//     generates, so no name can be taken in advance;
//   - before approving, the CSR the API server returned must show the
//     caller as its requester (spec.username, uid, groups and extra, against
//     a SelfSubjectReview), the subject CN=fenced:node:<node>, O=<group> and
//     nothing else, this process's public key, the client signer, usage
//     client auth only and the lifetime asked for; anything else is denied,
//     never approved;
//   - the approval carries the checked resourceVersion, so a CSR replaced
//     since (deleted and created again under the same name) is not approved;
//   - the certificate must hold this key and subject and expire no later
//     than asked, and must authenticate as the user and group asked for,
//     before anything is written. A certificate that fails is useless:
//     its key is discarded with the process.
package credentials

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	certv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"
)

// The names the agent identity policy and the RBAC of deploy/systemd trust.
const (
	// UserPrefix + <node> is the user name the policy binds to <node>.
	UserPrefix = "fenced:node:"
	// GroupFencers is what the policy takes for a fencer (power Leases)
	// and deploy/systemd/README.md binds to the fencer's roles.
	GroupFencers = "fenced:fencers"
	// GroupObservers is for hosts that run an observer only.
	GroupObservers = "fenced:observers"
	// OldCSRPrefix is the fixed CSR name of the old install steps,
	// fenced-node-<node>: one found pending may be a squat.
	OldCSRPrefix = "fenced-node-"
	// CSRPrefix is the generateName of the CSRs Issue creates.
	CSRPrefix = "fenced-node-credential-"
)

// Lifetimes. The certificate cannot be revoked, so its lifetime is the
// longest a leaked or forgotten credential keeps a fencer's power. A week
// bounds that to days while a renewal (the same command; the agent picks the
// new file up by itself) can be missed a few times before the agent loses
// the API: renewing every 2 days leaves 5 days to notice a failed run.
const (
	DefaultDuration = 7 * 24 * time.Hour
	// MinDuration is the shortest lifetime the API server accepts
	// (spec.expirationSeconds >= 600).
	MinDuration = 10 * time.Minute
	// MaxDuration: a credential meant to be short-lived.
	MaxDuration = 90 * 24 * time.Hour
	// DefaultWait bounds the wait for the signer.
	DefaultWait = 2 * time.Minute
	// clockSlack is what a certificate may outlast the lifetime asked
	// for: the clocks of this host and of the signer may differ a little.
	clockSlack = 2 * time.Minute
	// approvalReason marks the approvals and denials Issue writes.
	approvalReason = "FencedCredentialsIssue"
)

// ErrRefused is wrapped when Issue declines for a safety reason: a CSR or
// certificate that is not what it asked for. Exit code 1.
var ErrRefused = errors.New("refused")

// ErrCannotCheck is wrapped when Issue cannot ask the API server what it
// must check (unreachable, or no answer to who the caller is). Exit code 3.
var ErrCannotCheck = errors.New("cannot check")

// Request is what to issue.
type Request struct {
	// Node is the Node's name exactly: the user is UserPrefix+Node.
	Node string
	// Group is GroupFencers or GroupObservers.
	Group string
	// Duration is the certificate's lifetime (DefaultDuration if zero).
	Duration time.Duration
	// Wait bounds the wait for the signer (DefaultWait if zero).
	Wait time.Duration
}

// User is the user name of node's credential.
func User(node string) string { return UserPrefix + node }

// Validate checks a request before anything is sent; its errors are the
// caller's mistake (a usage error).
func (r *Request) Validate() error {
	if errs := validation.IsDNS1123Subdomain(r.Node); len(errs) > 0 {
		return fmt.Errorf("node %q is not a Node name: %s", r.Node, strings.Join(errs, "; "))
	}
	if r.Group != GroupFencers && r.Group != GroupObservers {
		return fmt.Errorf("group %q: want %s or %s", r.Group, GroupFencers, GroupObservers)
	}
	if r.Duration < MinDuration || r.Duration > MaxDuration {
		return fmt.Errorf("duration %s: want between %s and %s", r.Duration, MinDuration, MaxDuration)
	}
	return nil
}

func (r Request) withDefaults() Request {
	if r.Group == "" {
		r.Group = GroupFencers
	}
	if r.Duration == 0 {
		r.Duration = DefaultDuration
	}
	if r.Wait == 0 {
		r.Wait = DefaultWait
	}
	return r
}

// Issued is a checked credential.
type Issued struct {
	// CSRName is the name the API server gave the request.
	CSRName string
	// Approver is who approved it (the caller, as authenticated).
	Approver string
	// Certificate is the issued certificate, checked.
	Certificate *x509.Certificate
	// PEM holds the certificate chain then the private key, the layout of
	// the kubelet's own client credential file: one file, so a renewal
	// replaces both at once.
	PEM []byte
}

// Issuer issues credentials with the caller's client.
type Issuer struct {
	// Client talks to the API server as the person running the procedure;
	// it needs create/get on certificatesigningrequests, update on their
	// approval subresource and approve on the kube-apiserver-client signer.
	Client kubernetes.Interface
	// Out receives the report.
	Out io.Writer
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Poll is the interval of the wait for the signer (default 500 ms).
	Poll time.Duration

	// afterCreate, when set (tests only), runs between the creation of
	// the CSR and its check, and returns the object the check gets: the
	// window in which someone else's request could be put in its place.
	afterCreate func(context.Context, *certv1.CertificateSigningRequest) *certv1.CertificateSigningRequest
}

func (i *Issuer) now() time.Time {
	if i.Now != nil {
		return i.Now()
	}
	return time.Now()
}

func (i *Issuer) out() io.Writer {
	if i.Out != nil {
		return i.Out
	}
	return io.Discard
}

// Expected is what a CSR must show to be approved.
type Expected struct {
	// Requester is the caller, as the API server authenticates it.
	Requester authnv1.UserInfo
	// User and Group are the subject: CN and the only O.
	User, Group string
	// PublicKey is the key generated for this request.
	PublicKey crypto.PublicKey
	// ExpirationSeconds is the lifetime asked for.
	ExpirationSeconds int32
}

// Issue creates, checks, approves and collects node's credential. It
// approves nothing that CheckRequest refuses, and returns nothing that
// checkCertificate refuses.
func (i *Issuer) Issue(ctx context.Context, req Request) (*Issued, error) {
	req = req.withDefaults()
	if err := req.Validate(); err != nil {
		return nil, err
	}
	csrs := i.Client.CertificatesV1().CertificateSigningRequests()

	who, err := i.Client.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authnv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("%w: who you are (SelfSubjectReview), to check the CSR's requester against: %v", ErrCannotCheck, err)
	}
	if who.Status.UserInfo.Username == "" {
		return nil, fmt.Errorf("%w: the API server says no user name for you (SelfSubjectReview)", ErrCannotCheck)
	}
	me := who.Status.UserInfo
	fmt.Fprintf(i.out(), "You are %s (groups %s).\n", me.Username, strings.Join(me.Groups, ", "))
	i.warnNode(ctx, req.Node)
	i.warnOldName(ctx, req.Node)

	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	want := Expected{Requester: me, User: User(req.Node), Group: req.Group, PublicKey: key.Public(),
		ExpirationSeconds: int32(req.Duration / time.Second)}
	der, err := certutil.MakeCSR(key, &pkix.Name{CommonName: want.User, Organization: []string{want.Group}}, nil, nil)
	if err != nil {
		return nil, err
	}
	created, err := csrs.Create(ctx, &certv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{GenerateName: CSRPrefix},
		Spec: certv1.CertificateSigningRequestSpec{
			Request:           der,
			SignerName:        certv1.KubeAPIServerClientSignerName,
			Usages:            []certv1.KeyUsage{certv1.UsageClientAuth},
			ExpirationSeconds: &want.ExpirationSeconds,
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return nil, apiError("creating the CSR", err)
	}
	if i.afterCreate != nil {
		created = i.afterCreate(ctx, created)
	}
	fmt.Fprintf(i.out(), "Created CSR %s for %s in %s, valid %s.\n", created.Name, want.User, want.Group, req.Duration)

	if err := CheckRequest(created, want); err != nil {
		i.deny(ctx, created, err)
		return nil, err
	}
	approved := created.DeepCopy()
	approved.Status.Conditions = append(approved.Status.Conditions, certv1.CertificateSigningRequestCondition{
		Type: certv1.CertificateApproved, Status: corev1.ConditionTrue, Reason: approvalReason,
		Message: "approved by " + me.Username + " with fenced credentials issue, after checking its requester, subject, key and lifetime",
	})
	// approved carries created's resourceVersion: an object replaced or
	// changed since the check is a conflict, not an approval.
	if _, err := csrs.UpdateApproval(ctx, created.Name, approved, metav1.UpdateOptions{}); err != nil {
		if apierrors.IsConflict(err) {
			return nil, fmt.Errorf("%w: CSR %s changed between its check and its approval: %v", ErrRefused, created.Name, err)
		}
		return nil, apiError("approving CSR "+created.Name, err)
	}
	fmt.Fprintf(i.out(), "Approved CSR %s (requester, subject, key and lifetime checked).\n", created.Name)

	chain, err := i.waitCertificate(ctx, created, req.Wait)
	if err != nil {
		return nil, err
	}
	cert, err := checkCertificate(chain, want, i.now())
	if err != nil {
		return nil, err
	}
	keyPEM, err := keyutil.MarshalPrivateKeyToPEM(key)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(i.out(), "Issued: %s in %s, valid until %s (renew before %s).\n", cert.Subject.CommonName,
		strings.Join(cert.Subject.Organization, ","), cert.NotAfter.UTC().Format(time.RFC3339),
		RenewBy(cert).UTC().Format(time.RFC3339))
	return &Issued{CSRName: created.Name, Approver: me.Username, Certificate: cert, PEM: append(chain, keyPEM...)}, nil
}

// RenewBy is when a certificate should be renewed: with a third of its
// lifetime left.
func RenewBy(cert *x509.Certificate) time.Time {
	return cert.NotAfter.Add(-cert.NotAfter.Sub(cert.NotBefore) / 3)
}

// CheckRequest is the check before approval: csr must be exactly the
// request want describes, and still pending. The error, wrapping
// ErrRefused, names every field that differs.
func CheckRequest(csr *certv1.CertificateSigningRequest, want Expected) error {
	var bad []string
	add := func(format string, args ...any) { bad = append(bad, fmt.Sprintf(format, args...)) }
	s := csr.Spec
	if s.Username != want.Requester.Username {
		add("requester is %q, not you (%q)", s.Username, want.Requester.Username)
	}
	if s.UID != want.Requester.UID {
		add("requester uid is %q, yours is %q", s.UID, want.Requester.UID)
	}
	if !sameSet(s.Groups, want.Requester.Groups) {
		add("requester groups are %v, yours are %v", s.Groups, want.Requester.Groups)
	}
	if !sameExtra(s.Extra, want.Requester.Extra) {
		add("requester extra is %v, yours is %v", s.Extra, want.Requester.Extra)
	}
	if s.SignerName != certv1.KubeAPIServerClientSignerName {
		add("signer is %q, not %s", s.SignerName, certv1.KubeAPIServerClientSignerName)
	}
	if !slices.Equal(s.Usages, []certv1.KeyUsage{certv1.UsageClientAuth}) {
		add("usages are %v, not [%s]", s.Usages, certv1.UsageClientAuth)
	}
	if s.ExpirationSeconds == nil || *s.ExpirationSeconds != want.ExpirationSeconds {
		add("expirationSeconds is %s, not %d", int32Text(s.ExpirationSeconds), want.ExpirationSeconds)
	}
	if len(csr.Status.Conditions) > 0 || len(csr.Status.Certificate) > 0 {
		add("it is no longer pending (conditions %v)", conditionTypes(csr))
	}
	if cr, err := ParseRequest(s.Request); err != nil {
		add("request: %v", err)
	} else {
		bad = append(bad, checkSubject("request", cr.Subject, cr.PublicKey, want)...)
		if n := len(cr.DNSNames) + len(cr.IPAddresses) + len(cr.EmailAddresses) + len(cr.URIs); n > 0 {
			add("request has %d subject alternative names, want none", n)
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("%w: CSR %s is not the request this command made, so it was not approved: %s",
			ErrRefused, csr.Name, strings.Join(bad, "; "))
	}
	return nil
}

// ParseRequest decodes spec.request: one PEM CERTIFICATE REQUEST block whose
// signature holds (its key signed it).
func ParseRequest(data []byte) (*x509.CertificateRequest, error) {
	block, rest := pem.Decode(data)
	if block == nil || block.Type != "CERTIFICATE REQUEST" {
		return nil, errors.New("not a PEM CERTIFICATE REQUEST")
	}
	if len(bytes.TrimSpace(rest)) > 0 {
		return nil, errors.New("more than one PEM block")
	}
	cr, err := x509.ParseCertificateRequest(block.Bytes)
	if err != nil {
		return nil, err
	}
	if err := cr.CheckSignature(); err != nil {
		return nil, fmt.Errorf("signature: %w", err)
	}
	return cr, nil
}

// checkSubject lists how a subject and key differ from want's: CN the
// user, O the group alone, no other attribute, the key generated here.
func checkSubject(what string, subject pkix.Name, key crypto.PublicKey, want Expected) []string {
	var bad []string
	if subject.CommonName != want.User {
		bad = append(bad, fmt.Sprintf("%s CN is %q, not %q", what, subject.CommonName, want.User))
	}
	if !slices.Equal(subject.Organization, []string{want.Group}) {
		bad = append(bad, fmt.Sprintf("%s O is %q, not [%q]", what, subject.Organization, want.Group))
	}
	if other := len(subject.Names) - 1 - len(subject.Organization); other > 0 {
		bad = append(bad, fmt.Sprintf("%s subject has %d attributes besides CN and O (%s)", what, other, subject))
	}
	if k, ok := key.(interface{ Equal(crypto.PublicKey) bool }); !ok || !k.Equal(want.PublicKey) {
		bad = append(bad, fmt.Sprintf("%s public key is not the one generated for it here", what))
	}
	return bad
}

// checkCertificate checks the signer's answer: the first certificate of
// chain holds want's subject and key, is for client auth, is valid now and
// expires no later than asked.
func checkCertificate(chain []byte, want Expected, now time.Time) (*x509.Certificate, error) {
	certs, err := certutil.ParseCertsPEM(chain)
	if err != nil {
		return nil, fmt.Errorf("%w: the issued certificate: %v", ErrRefused, err)
	}
	c := certs[0]
	bad := checkSubject("certificate", c.Subject, c.PublicKey, want)
	if !slices.Contains(c.ExtKeyUsage, x509.ExtKeyUsageClientAuth) {
		bad = append(bad, "certificate is not for client auth")
	}
	if limit := now.Add(time.Duration(want.ExpirationSeconds)*time.Second + clockSlack); c.NotAfter.After(limit) {
		bad = append(bad, fmt.Sprintf("certificate is valid until %s, longer than the %s asked for (does the signer honour spec.expirationSeconds?)",
			c.NotAfter.UTC().Format(time.RFC3339), time.Duration(want.ExpirationSeconds)*time.Second))
	}
	if !now.Before(c.NotAfter) {
		bad = append(bad, "certificate has expired")
	}
	if len(bad) > 0 {
		return nil, fmt.Errorf("%w: the signer issued a certificate this command did not ask for, so nothing was written (its key is discarded): %s",
			ErrRefused, strings.Join(bad, "; "))
	}
	return c, nil
}

// waitCertificate polls created until the signer has put a certificate in
// it, it was denied or failed, or wait has passed. An object of that name
// with another UID is not ours.
func (i *Issuer) waitCertificate(ctx context.Context, created *certv1.CertificateSigningRequest, wait time.Duration) ([]byte, error) {
	poll := i.Poll
	if poll == 0 {
		poll = 500 * time.Millisecond
	}
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	for {
		csr, err := i.Client.CertificatesV1().CertificateSigningRequests().Get(ctx, created.Name, metav1.GetOptions{})
		switch {
		case err == nil && csr.UID != created.UID:
			return nil, fmt.Errorf("%w: CSR %s was replaced after its approval (uid %s, was %s)", ErrRefused, created.Name, csr.UID, created.UID)
		case err == nil && len(csr.Status.Certificate) > 0:
			return csr.Status.Certificate, nil
		case err == nil:
			for _, c := range csr.Status.Conditions {
				if (c.Type == certv1.CertificateDenied || c.Type == certv1.CertificateFailed) && c.Status == corev1.ConditionTrue {
					return nil, fmt.Errorf("CSR %s: %s: %s %s", created.Name, c.Type, c.Reason, c.Message)
				}
			}
		case ctx.Err() == nil:
			return nil, apiError("reading CSR "+created.Name, err)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("CSR %s approved but no certificate after %s: is the signer of %s running (kube-controller-manager's csrsigning controller, --cluster-signing-*)?",
				created.Name, wait, certv1.KubeAPIServerClientSignerName)
		case <-time.After(poll):
		}
	}
}

// deny marks a refused CSR Denied, so that nobody approves it later; best
// effort, with the checked resourceVersion.
func (i *Issuer) deny(ctx context.Context, csr *certv1.CertificateSigningRequest, why error) {
	d := csr.DeepCopy()
	msg := why.Error()
	if len(msg) > 1000 {
		msg = msg[:1000]
	}
	d.Status.Conditions = append(d.Status.Conditions, certv1.CertificateSigningRequestCondition{
		Type: certv1.CertificateDenied, Status: corev1.ConditionTrue, Reason: approvalReason, Message: msg,
	})
	if _, err := i.Client.CertificatesV1().CertificateSigningRequests().UpdateApproval(ctx, csr.Name, d, metav1.UpdateOptions{}); err != nil {
		fmt.Fprintf(i.out(), "WARNING: could not deny CSR %s (%v): deny it by hand, never approve it: kubectl certificate deny %s\n", csr.Name, err, csr.Name)
		return
	}
	fmt.Fprintf(i.out(), "Denied CSR %s.\n", csr.Name)
}

// warnNode says so when no Node has that name: a typo gives a credential
// for nobody (harmless, useless).
func (i *Issuer) warnNode(ctx context.Context, node string) {
	if _, err := i.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{}); apierrors.IsNotFound(err) {
		fmt.Fprintf(i.out(), "WARNING: there is no Node %q (yet?): the credential is only good for a Node of exactly that name.\n", node)
	}
}

// warnOldName points at a CSR of the old steps' fixed name still pending:
// whoever made it, it must not be approved.
func (i *Issuer) warnOldName(ctx context.Context, node string) {
	old, err := i.Client.CertificatesV1().CertificateSigningRequests().Get(ctx, OldCSRPrefix+node, metav1.GetOptions{})
	if err != nil || len(old.Status.Conditions) > 0 {
		return
	}
	fmt.Fprintf(i.out(), "WARNING: a pending CSR %s exists (requested by %s), the fixed name of the old install steps: it may be a squat; do not approve it (kubectl certificate deny %s).\n",
		old.Name, old.Spec.Username, old.Name)
}

// apiError classifies a failed request: an answer of the API server is a
// failure (exit 1); no answer means nothing could be checked (exit 3).
func apiError(what string, err error) error {
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		return fmt.Errorf("%s: %w", what, err)
	}
	return fmt.Errorf("%w: %s: %v", ErrCannotCheck, what, err)
}

// IssueTo issues req's credential, checks that the API server the agent
// will use (agent: its address and CA) takes it, and only then writes
// files for it: nothing is written for a credential that does not work.
func (i *Issuer) IssueTo(ctx context.Context, req Request, agent *rest.Config, files Files) error {
	issued, err := i.Issue(ctx, req)
	if err != nil {
		return err
	}
	if err := VerifyWorks(ctx, agent, issued, req); err != nil {
		return err
	}
	return files.Write(agent.Host, agent.CAData, issued)
}

// VerifyWorks authenticates with the new credential and checks that the API
// server takes it for want's user in want's group.
func VerifyWorks(ctx context.Context, cfg *rest.Config, issued *Issued, req Request) error {
	req = req.withDefaults()
	c := rest.AnonymousClientConfig(cfg)
	c.CertData, c.KeyData = issued.PEM, issued.PEM
	cl, err := kubernetes.NewForConfig(c)
	if err != nil {
		return err
	}
	r, err := cl.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authnv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		return apiError("authenticating with the new credential at "+cfg.Host, err)
	}
	u := r.Status.UserInfo
	if u.Username != User(req.Node) || !slices.Contains(u.Groups, req.Group) {
		return fmt.Errorf("%w: the API server at %s takes the new credential for %s in %v, not %s in %s; nothing was written",
			ErrRefused, cfg.Host, u.Username, u.Groups, User(req.Node), req.Group)
	}
	return nil
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

func sameExtra(a map[string]certv1.ExtraValue, b map[string]authnv1.ExtraValue) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		w, ok := b[k]
		if !ok || !sameSet(v, w) {
			return false
		}
	}
	return true
}

func int32Text(p *int32) string {
	if p == nil {
		return "unset"
	}
	return fmt.Sprint(*p)
}

func conditionTypes(csr *certv1.CertificateSigningRequest) []certv1.RequestConditionType {
	var ts []certv1.RequestConditionType
	for _, c := range csr.Status.Conditions {
		ts = append(ts, c.Type)
	}
	return ts
}
